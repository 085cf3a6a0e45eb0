"""A distributed store's tensors as one rank sees them; the collective path and the serving
threads cut requests, read rows and apply pushes through a :class:`Shards`."""
from __future__ import annotations

import dataclasses
import math
import threading
import time
from typing import Iterator, Mapping, Sequence

import torch

from dglx_dist.errors import InvalidValueError, ProtocolError
from dglx_dist.kvstore.cache import Held, RowCache
from dglx_dist.kvstore.entries import TensorEntry, apply_op
from dglx_dist.kvstore.ops import PushOp, combine_duplicates
from dglx_dist.kvstore.policy import PartitionPolicy, Piece, rows_at, split_contiguous
from dglx_dist.kvstore.recent import RecentRows
from dglx_dist.kvstore.shm import EMPTY_U8, from_bytes, to_bytes

__all__ = ["Shards", "PullPlan", "Message", "pack_messages", "unpack_messages"]

Message = tuple[torch.Tensor, torch.Tensor]
"""A push message: int64 ``[name index, op index, *ids]`` and the values' raw bytes."""


def _piece_shape(entry: TensorEntry, q: Piece) -> tuple[int, ...]:
    return (q.local.numel(), *entry.part_trailing[q.part])


def _piece_bytes(entry: TensorEntry, q: Piece) -> int:
    return math.prod(_piece_shape(entry, q)) * entry.dtype.itemsize


def _unpack(entry: TensorEntry, pieces: list[Piece],
           buf: torch.Tensor) -> Iterator[tuple[Piece, torch.Tensor]]:
    """Yields (piece, rows): ``buf`` cut into the pieces' rows (views, in order)."""
    offset = 0
    for q in pieces:
        size = _piece_bytes(entry, q)
        yield q, from_bytes(buf[offset:offset + size], _piece_shape(entry, q), entry.dtype)
        offset += size
    if offset != buf.numel():
        raise ProtocolError(f"{entry.name!r}: a message for parts {[q.part for q in pieces]} "
                            f"carried {buf.numel()} bytes; expected {offset} (do all ranks "
                            f"register the same names in the same order?)")


@dataclasses.dataclass(eq=False)
class PullPlan:
    """One pull cut by where its rows live (:meth:`Shards.plan_pull`): ``out`` gets a row per
    id of ``uniq`` (``inverse``: the row of each requested id; None: ``out`` is in request
    order) from the own server's pieces (``local``), the other servers' (``remote``) and the
    server's copies of other servers' rows (``cached``: pieces into ``held.rows``, see
    :mod:`~dglx_dist.kvstore.cache`) and this rank's copies of rows its earlier pulls
    brought (``reused``: pieces with their rows; the learning cache's kept rows and
    :mod:`~dglx_dist.kvstore.recent`);
    ``keepers``, what keeps the remote rows the answers bring (``keep(entry, ids, rows)``: a
    learning cache's, the recent rows')."""

    entry: TensorEntry
    uniq: torch.Tensor
    inverse: torch.Tensor | None
    out: torch.Tensor
    local: list[Piece]
    remote: dict[int, list[Piece]]
    pin: bool
    cached: list[Piece] = dataclasses.field(default_factory=list)
    held: Held | None = None
    reused: list[tuple[Piece, torch.Tensor]] = dataclasses.field(default_factory=list)
    keepers: tuple = ()

    def cache_counts(self) -> tuple[int, int]:
        """Rows of other servers this pull reads from the cache, and rows it asks them for."""
        return (sum(q.pos.numel() for q in self.cached),
                sum(q.pos.numel() for pieces in self.remote.values() for q in pieces))

    def requests(self) -> dict[int, tuple[torch.Tensor, int]]:
        """Per other server: the ids it is asked for and the bytes of its answer."""
        asked = {}
        for server, pieces in self.remote.items():
            pos = torch.cat([q.pos for q in pieces])
            if len(pieces) > 1 and pieces[0].cols is not None:  # column pieces share rows
                pos = torch.unique(pos)
            asked[server] = (self.uniq.index_select(0, pos), self.answer_bytes(server))
        return asked

    def answer_bytes(self, server: int) -> int:
        """The bytes of ``server``'s answer."""
        return sum(_piece_bytes(self.entry, q) for q in self.remote[server])

    def fill_local(self) -> None:
        """Reads the own server's rows and its copies of other servers' (shared memory)."""
        parts, out, cached = self.entry.parts, self.out, self.cached
        if len(self.local) == 1 and self.local[0].cols is None and self.local[0].span() is None:
            # one pass: gather every row of ``out`` from the part, rows of other servers
            # from its row 0 (overwritten when their answers arrive); cheaper than a gather
            # into a buffer plus a scatter of it
            q, index = self.local[0], torch.zeros(out.shape[0], dtype=torch.int64)
            index[q.pos] = q.local
            source = parts[q.part]
            if cached and self.held.base == q.part:  # the copies follow the part's rows
                for c in cached:
                    index[c.pos] = c.local + source.shape[0]
                source, cached = self.held.whole, []
            torch.index_select(source, 0, index, out=out)
        else:
            for q in self.local:
                q.fill(out, parts[q.part])
        for q in cached:  # after the one-pass gather, which wrote row 0 there
            q.fill(out, self.held.rows)
        for q, rows in self.reused:
            q.take(out, rows)

    def take(self, server: int, answer: torch.Tensor) -> None:
        """Writes ``server``'s answer (raw bytes) into place."""
        for q, rows in _unpack(self.entry, self.remote[server], answer):
            q.take(self.out, rows)
            for keep in self.keepers:
                keep(self.entry, self.uniq.index_select(0, q.pos), rows)

    def rows(self) -> torch.Tensor:
        """The rows in request order (once every answer is taken)."""
        return self.out if self.inverse is None else rows_at(self.out, self.inverse, self.pin)


class Shards:
    """A distributed store's registered tensors, their placement and this server's parts
    (thread-safe where a serving thread reads and writes them too).

    Args:
        topology, rank: the job's servers x ranks, and this process's global rank.
        ops: the store's push ops by name, in registration order (ops registered later are
            seen; never written).
        pin: pulled rows go to page-locked memory (they travel on to a GPU).

    Attributes:
        cache: the server's copies of other servers' rows, or None (no cache).
        recent: this rank's copies of the rows its last pulls brought, or None.
    """

    def __init__(self, topology, rank: int, ops: Mapping[str, PushOp], pin: bool = False):
        self.topology, self.rank, self.ops, self.pin = topology, rank, ops, pin
        self.server, self.per_server = topology.server_of(rank), topology.ranks_per_server
        self._entries: list[TensorEntry] = []  # by registration index
        self._servers: list[list[int]] = []  # the server of each part, by registration index
        self._registered = threading.Condition()  # a serving thread may wait for an entry
        self._apply_lock = threading.Lock()  # one writer thread at a time in this process
        self.cache: RowCache | None = None
        self.recent: RecentRows | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def part_servers(self, policy: PartitionPolicy) -> list[int]:
        """The server holding each part of ``policy`` (ValueError: the part count is neither the
        number of servers nor the world size)."""
        n, servers, per = policy.num_parts, self.topology.num_servers, self.per_server
        if n == servers:
            return list(range(n))
        if n == servers * per:
            return [p // per for p in range(n)]
        raise InvalidValueError(f"the policy has {n} parts; a job with {servers} servers x {per} "
                                f"ranks needs {servers} parts (one per server) or {servers * per} "
                                "(one per rank)")

    def add(self, entry: TensorEntry, servers: list[int]) -> None:
        """Registers ``entry`` (index ``len(self)``) whose part ``p`` is on ``servers[p]``."""
        with self._registered:
            self._servers.append(servers)
            self._entries.append(entry)
            self._registered.notify_all()

    def entry_at(self, index: int, source: str, wait: float = 0.0) -> TensorEntry:
        """Entry ``index``, which ``source`` referred to, waiting up to ``wait`` seconds for this
        rank's ``init_data`` to register it (a peer may leave the collective ``init_data`` and
        ask for rows before this rank has). ProtocolError when there is none."""
        deadline = time.monotonic() + wait
        with self._registered:
            while index >= len(self._entries) and time.monotonic() < deadline:
                self._registered.wait(max(deadline - time.monotonic(), 0.0))
        if not 0 <= index < len(self._entries):
            raise ProtocolError(f"{source} referred to tensor #{index}, but rank {self.rank} has "
                                f"{len(self._entries)} registered: init_data must run in the "
                                "same order on every rank")
        return self._entries[index]

    def _pieces_on(self, entry: TensorEntry, gids: torch.Tensor, server: int) -> list[Piece]:
        servers = self._servers[entry.index]
        return [q for q in entry.policy.split(gids) if servers[q.part] == server]

    def plan_pull(self, entry: TensorEntry, ids: torch.Tensor, dedup: bool) -> PullPlan:
        """Cuts a pull of ``ids`` into the own server's and the other servers' pieces."""
        if dedup:
            uniq, inverse = torch.unique(ids, return_inverse=True)
            uniq, pieces, order = split_contiguous(entry.policy, uniq)
            if order is not None:  # uniq was regrouped: row i of ``out`` now answers uniq[i]
                where = torch.empty_like(order)
                where[order] = torch.arange(order.numel())
                inverse = where.index_select(0, inverse)
        else:  # rows go straight to their places in the request
            uniq, inverse, pieces = ids, None, entry.policy.split(ids)
        out = torch.empty((uniq.numel(), *entry.trailing), dtype=entry.dtype,
                          pin_memory=self.pin)
        servers = self._servers[entry.index]
        remote: dict[int, list[Piece]] = {}
        for q in pieces:
            if servers[q.part] != self.server:
                remote.setdefault(servers[q.part], []).append(q)
        local = [q for q in pieces if servers[q.part] == self.server]
        cached, held, reused, keepers = [], None, [], []
        if self.cache is not None:
            remote, cached, reused = self.cache.serve(entry, uniq, remote)
            held = self.cache.held[entry.index] if cached else None
            if self.cache.counting and not entry.policy.splits_columns:
                keepers.append(self.cache.keep)
        if self.recent is not None:
            remote, recent = self.recent.serve(entry, uniq, remote)
            reused += recent
            keepers.append(self.recent.keep)
        return PullPlan(entry, uniq, inverse, out, local, remote, self.pin, cached, held,
                        reused, tuple(keepers))

    def read(self, entry: TensorEntry, ids: torch.Tensor,
             out: torch.Tensor | None = None) -> torch.Tensor:
        """The raw bytes of the rows ``ids`` this server holds (a pull's answer), gathered into
        ``out`` when given (ValueError when it does not have their size)."""
        pieces = self._pieces_on(entry, ids, self.server)
        size = sum(_piece_bytes(entry, q) for q in pieces)
        if out is not None and out.numel() != size:
            raise InvalidValueError(f"{entry.name!r}: the rows asked for are {size} bytes on "
                                    f"server {self.server}; the request expects {out.numel()}")
        buf = torch.empty(size, dtype=torch.uint8) if out is None else out
        for q, rows in _unpack(entry, pieces, buf):  # gather straight into the message
            torch.index_select(entry.parts[q.part], 0, q.local, out=rows)
        return buf

    def push_messages(self, entry: TensorEntry, op: PushOp, ids: torch.Tensor,
                      values: torch.Tensor) -> dict[int, Message]:
        """A push's messages by writer rank (values of duplicate ids combined first)."""
        uniq, combined = combine_duplicates(ids, values, op.combine)
        servers, op_index = self._servers[entry.index], list(self.ops).index(op.name)
        dest: dict[int, list[torch.Tensor]] = {}
        for q in entry.policy.split(uniq):
            writer = servers[q.part] * self.per_server + q.local % self.per_server
            for w in torch.unique(writer).tolist():
                dest.setdefault(w, []).append(q.pos[writer == w])
        messages = {}
        for writer, pos in dest.items():
            pos = torch.unique(torch.cat(pos))
            gids = uniq[pos]
            chunks = [to_bytes(combined[q.index(pos.index_select(0, q.pos))])
                      for q in self._pieces_on(entry, gids, writer // self.per_server)]
            messages[writer] = (torch.cat([torch.tensor([entry.index, op_index]), gids]),
                                torch.cat(chunks) if chunks else EMPTY_U8)
        return messages

    def apply_many(self, messages: Mapping[int, Sequence[Message]]) -> None:
        """Applies push messages by source rank (each of another name, as
        :func:`unpack_messages` gives them): what every source sent is combined (in rank
        order) per (name, op, part), then applied."""
        groups: dict[tuple[int, int, int], list[tuple[torch.Tensor, torch.Tensor]]] = {}
        for source in sorted(messages):
            for head, buf in messages[source]:
                if head.numel() == 0:
                    continue
                entry = self.entry_at(int(head[0]), f"rank {source}")
                pieces = self._pieces_on(entry, head[2:], self.server)
                for q, rows in _unpack(entry, pieces, buf):
                    groups.setdefault((entry.index, int(head[1]), q.part), []).append(
                        (q.local, rows))
        ops = list(self.ops.values())
        with self._apply_lock:  # a serving thread applies other ranks' pushes too
            for (index, op_index, part), items in groups.items():
                entry, op = self._entries[index], ops[op_index]
                local, rows = (torch.cat(x) for x in zip(*items))
                local, rows = combine_duplicates(local, rows, op.combine)
                apply_op(self._entries, entry, op, part, local, rows)


def pack_messages(messages: Sequence[Message]) -> torch.Tensor:
    """Push messages to one writer as one uint8 tensor: int64 ``[k, (head length, value
    bytes) per message, the heads]`` as bytes, then the values' bytes."""
    if not messages:
        return EMPTY_U8
    sizes = [n for head, buf in messages for n in (head.numel(), buf.numel())]
    head = torch.cat([torch.tensor([len(messages), *sizes]), *(h for h, _ in messages)])
    return torch.cat([to_bytes(head), *(buf for _, buf in messages)])


def unpack_messages(buf: torch.Tensor) -> list[Message]:
    """The messages :func:`pack_messages` packed (the values' bytes as views)."""
    if buf.numel() == 0:
        return []
    k = int(from_bytes(buf[:8], (1,), torch.int64)[0])
    if k < 1 or buf.numel() < 8 * (1 + 2 * k):
        raise ProtocolError(f"a push message of {buf.numel()} bytes announces {k} pushes")
    sizes = from_bytes(buf[8:8 * (1 + 2 * k)], (k, 2), torch.int64).tolist()
    offset, heads = 8 * (1 + 2 * k), []
    for length, _ in sizes:
        heads.append(from_bytes(buf[offset:offset + 8 * length], (length,), torch.int64))
        offset += 8 * length
    out = []
    for head, (_, nbytes) in zip(heads, sizes):
        out.append((head, buf[offset:offset + nbytes]))
        offset += nbytes
    if offset != buf.numel():
        raise ProtocolError(f"a push message of {buf.numel()} bytes; its {k} pushes announce "
                            f"{offset}")
    return out
