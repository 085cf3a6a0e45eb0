"""The distributed store: parts in shared memory on their servers, remote rows via the comm layer.

**Placement.** A policy with one part per server puts part ``p`` on server ``p``, shared by the
server's ranks (DistDGL); a policy with one part per rank puts part ``p`` on rank ``p``'s server
(a server then holds ``ranks_per_server`` parts). Any other part count is an error.

**Shared memory.** For every part a server holds, one rank of the server (the lowest local rank
that passed the part's rows to ``init_data``, else local rank 0) creates the part's tensor in a
file under ``/dev/shm`` named by a per-job token and fills it; the server's other ranks map the
same file; then it is unlinked (see :mod:`dglx_dist.kvstore.shm`; the code is in
:mod:`dglx_dist.kvstore.dist_init`). Rows of parts on the caller's own server are read straight
from that memory: no comm call, no bytes counted.

**What is collective.** ``DistKVStore(session)``, ``init_data`` and ``close`` are collective;
``pull`` and ``push`` are too by default (``collective=True``): every rank of the job calls them
the same number of times in the same order (the fast path of training steps). A rank with
nothing to fetch or write passes empty ids; ranks may use *different* names (and ops) in the
same step, because requests carry the name's (and op's) registration index, which is why names
and ops must be registered in the same order everywhere. A rank whose arguments are bad still
takes part with an empty request, then raises.

**Non-collective.** ``pull(..., collective=False)`` and ``push(..., collective=False)`` involve
only the caller: every rank of a store built with ``serve=True`` (not the default: stores used
only collectively need no thread; with more than one rank) runs a serving thread on a process group of the store's own, which answers
requests for its server's rows from the shared memory (see :mod:`dglx_dist.kvstore.serve`). A
pull sends each other server's ids to ONE rank there, the one with the caller's local index (as
``cross`` does), as a header plus the raw ids, and gets the rows back as raw bytes; own-server
rows are read locally meanwhile. A push goes to the rows' writers as below (rows this rank
writes itself are applied at once), each writer applies it and acknowledges, so when the call
returns a pull from any rank sees the values. The serving thread and the main thread of a rank
never apply at the same time (a lock); a collective push and non-collective pushes of other
ranks to the same rows are not ordered, and a pull may read rows while they are written (as in
DistDGL). ``close()`` waits for every rank (a barrier), then stops the threads; a store nobody
closed is stopped by the session's clean shutdown.

**Pull.** The requested ids are deduplicated (``torch.unique``; ``dedup=False`` skips that for
ids known to be unique, such as a block's input nodes, and writes rows straight into request
order instead of gathering them from a deduplicated buffer at the end); ids held by the own
server are read from shared memory (while the answers from other servers travel); the others
are grouped by owning server and sent to the ranks with this rank's local index on every
server (``session.cross``'s members, on process groups of the store's own, so that other
exchanges on ``cross`` do not queue behind rows under way) with ``all_to_all_v``: per
non-empty destination one int64 tensor ``[name_index, *ids]`` (so a request costs
``8 * (1 + unique ids)`` bytes). The peer reads its shared memory and answers with the rows
as raw bytes (uint8), so row widths may differ per peer; the caller scatters them back into
request order. A pull costs two ``all_to_all_v`` calls whenever the job has more than one
server; the answers' exchange skips the round of counts, since every caller knows how many
bytes it asked for. ``start_pull`` returns once the answers are on their way (own rows
read); waiting for it scatters them.

**Push.** Values of duplicate ids are combined first (the op's rule). Each row then goes to ONE
writer on its owning server, the server's local rank ``local_row % ranks_per_server``, through
``session.world.all_to_all_v`` (``[name_index, op_index, *ids]`` plus the values as raw bytes);
the writer combines what all sources sent (in rank order), applies the op to the shared rows,
and every rank finishes with ``session.server.barrier()``, so a following pull sees the writes.
Concurrent writes therefore never touch the same row.
"""
from __future__ import annotations

import logging
import math
import secrets
import threading
from pathlib import Path
from typing import Callable

import torch

from dglx_dist.errors import InvalidValueError, ProtocolError
from dglx_dist.kvstore.base import KVStore, TensorEntry
from dglx_dist.kvstore.dist_init import DistInit
from dglx_dist.kvstore.ops import PushOp, combine_duplicates
from dglx_dist.kvstore.policy import PartitionPolicy, Piece, rows_at, split_contiguous
from dglx_dist.kvstore.serve import Channel, ServedStore
from dglx_dist.kvstore.shm import EMPTY_I64, EMPTY_U8, default_shm_dir, from_bytes, to_bytes
from dglx_dist.runtime.comm import PeerError

__all__ = ["DistKVStore"]

log = logging.getLogger(__name__)


class DistKVStore(ServedStore, DistInit, KVStore):
    """Named tensors sharded over the job's servers (see the module docstring for what is
    collective).

    Args:
        session: the running session (communicators, topology, byte counters).
        seed: mixed into the seeds of callable initialisers.
        shm_dir: where shared tensors are created; default ``/dev/shm``.
        serve: run a serving thread (on a process group of its own), so that
            ``pull``/``push`` with ``collective=False`` work; a store only ever used
            collectively may skip it.
    """

    def __init__(self, session, *, seed: int = 0, shm_dir: str | Path | None = None,
                 serve: bool = False):
        super().__init__(seed)
        self.session = session
        topo = session.topology
        self._num_servers, self._per_server = topo.num_servers, topo.ranks_per_server
        self._server = session.server_id
        # pulled rows go to a GPU from page-locked memory (runtime.transfer)
        self._pin = session.device.type == "cuda"
        self._dir = Path(shm_dir) if shm_dir is not None else default_shm_dir()
        self._servers: dict[int, list[int]] = {}  # entry index -> server of each part
        self._by_index: list[TensorEntry] = []
        self._registered = threading.Condition()  # the serving thread waits for entries
        self._apply_lock = threading.Lock()  # one writer thread at a time in this process
        # the pulls' own groups: a sampler's exchanges on ``cross`` need not wait for rows
        # still travelling from a pull started earlier
        self._cross = session.new_cross_comm("kvstore") if self._num_servers > 1 else None
        token = self._gather_rows(torch.tensor([secrets.randbits(62)]))[0, 0]  # rank 0's
        self.token = f"{int(token):016x}"
        self._channel: Channel | None = None
        if serve and session.world_size > 1:
            self._channel = Channel(session, self._serve)
            session.add_closer(self._channel.stop)

    # -- placement ---------------------------------------------------------------------------
    def part_servers(self, policy: PartitionPolicy) -> list[int]:
        """The server holding each part of ``policy``.

        Raises:
            ValueError: the part count is neither the number of servers nor the world size.
        """
        n, servers, world = policy.num_parts, self._num_servers, self.session.world_size
        if n == servers:
            return list(range(n))
        if n == world:
            return [p // self._per_server for p in range(n)]
        raise InvalidValueError(f"the policy has {n} parts; a job with {servers} servers x "
                                f"{self._per_server} ranks needs {servers} parts (one per server) "
                                f"or {world} (one per rank)")

    def _check_parts_held(self, policy: PartitionPolicy, parts: list[int]) -> None:
        servers = self.part_servers(policy)
        elsewhere = [p for p in parts if servers[p] != self._server]
        if elsewhere:
            raise InvalidValueError(f"part_data holds parts {elsewhere}, which live on other "
                                    f"servers; rank {self.session.rank} (server {self._server}) "
                                    "may only pass parts "
                                    f"{[p for p, s in enumerate(servers) if s == self._server]}")

    def _checkpoints_part(self, part: int) -> bool:
        ranks = self.session.topology.server_ranks(self._server)  # spread over the server
        return ranks[part % len(ranks)] == self.session.rank

    # -- pull --------------------------------------------------------------------------------
    def _pull(self, entry: TensorEntry, ids: torch.Tensor, dedup: bool) -> torch.Tensor:
        return self._start_pull(entry, ids, dedup)()

    def _start_pull(self, entry: TensorEntry, ids: torch.Tensor,
                    dedup: bool) -> Callable[[], torch.Tensor]:
        uniq, inverse, out, local, remote = self._plan_pull(entry, ids, dedup)
        answers = self._start_exchange(entry, uniq, remote) if self._num_servers > 1 else None
        try:  # own rows are read while the answers travel
            self._fill_local(entry, out, local)
        except BaseException:
            if answers is not None:
                answers()  # the peers' answers are still received
            raise

        def finish() -> torch.Tensor:
            if answers is not None:
                replies = answers()
                for server, mine in remote.items():
                    for q, rows in self._unpack(entry, mine, replies[server]):
                        q.take(out, rows)
            return out if inverse is None else rows_at(out, inverse, self._pin)

        return finish

    def _plan_pull(self, entry: TensorEntry, ids: torch.Tensor, dedup: bool):
        """(unique ids, inverse or None, output buffer, own-server pieces, other servers'
        pieces by server) of a pull."""
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
                          pin_memory=self._pin)
        servers = self._servers[entry.index]
        local = [q for q in pieces if servers[q.part] == self._server]
        remote: dict[int, list[Piece]] = {}
        for q in pieces:
            if servers[q.part] != self._server:
                remote.setdefault(servers[q.part], []).append(q)
        return uniq, inverse, out, local, remote

    @staticmethod
    def _fill_local(entry: TensorEntry, out: torch.Tensor, local: list[Piece]) -> None:
        if len(local) == 1 and local[0].cols is None and local[0].span() is None:
            # one pass: gather every row of ``out`` from the part, rows of other servers
            # from its row 0 (overwritten when their answers arrive); cheaper than a gather
            # into a buffer plus a scatter of it
            q, index = local[0], torch.zeros(out.shape[0], dtype=torch.int64)
            index[q.pos] = q.local
            torch.index_select(entry.parts[q.part], 0, index, out=out)
            return
        for q in local:
            q.fill(out, entry.parts[q.part])

    @staticmethod
    def _request_pos(pieces: list[Piece]) -> torch.Tensor:
        """Positions (in the unique ids) of the ids one server is asked for."""
        pos = torch.cat([q.pos for q in pieces])
        if len(pieces) > 1 and pieces[0].cols is not None:  # column pieces share rows
            pos = torch.unique(pos)
        return pos

    def _pull_nothing(self) -> None:
        if self._num_servers > 1:
            self._start_exchange(None, EMPTY_I64, {})()  # nothing to read locally either

    def _start_exchange(self, entry: TensorEntry | None, uniq: torch.Tensor,
                        remote: dict[int, list[Piece]]) -> Callable[[], list[torch.Tensor]]:
        """Sends the requests, answers the peers' and starts sending the answers; returns what
        waits for the answers to this rank's requests (and raises what answering failed
        with, once the exchange is over: a failed rank answers nothing, then fails too)."""
        send = [EMPTY_I64] * self._num_servers
        expect = [0] * self._num_servers  # the answers' sizes are known: no count round
        for server, pieces in remote.items():
            pos = self._request_pos(pieces)
            send[server] = torch.cat([torch.tensor([entry.index]), uniq.index_select(0, pos)])
            expect[server] = sum(self._piece_bytes(entry, q) for q in pieces)
        requests = self._cross.all_to_all_v(send)
        answers, failure = [], None
        for source, request in enumerate(requests):
            try:
                answers.append(self._answer_pull(request, source))
            except RuntimeError as exc:  # answer nothing (the peer then fails too), no hang
                answers.append(EMPTY_U8)
                failure = exc
        pending = self._cross.start_all_to_all_v(answers, recv_rows=expect)

        def wait() -> list[torch.Tensor]:
            replies = pending.wait()
            if failure is not None:
                raise failure
            return replies

        return wait

    def _answer_pull(self, request: torch.Tensor, source: int) -> torch.Tensor:
        if request.numel() == 0:
            return EMPTY_U8
        entry = self._entry_at(int(request[0]), f"server {source}")
        pieces = self._pieces_on(entry, request[1:], self._server)
        buf = torch.empty(sum(self._piece_bytes(entry, q) for q in pieces), dtype=torch.uint8)
        for q, rows in self._unpack(entry, pieces, buf):  # gather straight into the message
            torch.index_select(entry.parts[q.part], 0, q.local, out=rows)
        return buf

    # -- push --------------------------------------------------------------------------------
    def _push(self, entry: TensorEntry, op: PushOp, ids: torch.Tensor,
              values: torch.Tensor) -> None:
        uniq, combined = combine_duplicates(ids, values, op.combine)
        self._push_exchange(self._push_messages(entry, op, uniq, combined))

    def _push_messages(self, entry: TensorEntry, op: PushOp, uniq: torch.Tensor,
                       combined: torch.Tensor) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """Per writer rank: ``[name index, op index, *ids]`` and the values' raw bytes."""
        servers, op_index = self._servers[entry.index], self.ops().index(op.name)
        dest: dict[int, list[torch.Tensor]] = {}
        for q in entry.policy.split(uniq):
            writer = servers[q.part] * self._per_server + q.local % self._per_server
            for w in torch.unique(writer).tolist():
                dest.setdefault(w, []).append(q.pos[writer == w])
        messages = {}
        for writer, pos in dest.items():
            pos = torch.unique(torch.cat(pos))
            gids = uniq[pos]
            chunks = [to_bytes(combined[q.index(pos.index_select(0, q.pos))])
                      for q in self._pieces_on(entry, gids, writer // self._per_server)]
            messages[writer] = (torch.cat([torch.tensor([entry.index, op_index]), gids]),
                                torch.cat(chunks) if chunks else EMPTY_U8)
        return messages

    def _push_nothing(self) -> None:
        self._push_exchange({})

    def _push_exchange(self, messages: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> None:
        world = self.session.world
        heads, data = [EMPTY_I64] * world.size, [EMPTY_U8] * world.size
        for writer, (head, buf) in messages.items():
            heads[writer], data[writer] = head, buf
        if world.size > 1:
            heads, data = world.all_to_all_v(heads), world.all_to_all_v(data)
        try:
            self._apply_received(heads, data)
        finally:
            self.session.server.barrier()

    def _apply_received(self, heads: list[torch.Tensor], data: list[torch.Tensor]) -> None:
        """Combines what every source sent (in rank order) per (name, op, part), then applies."""
        groups: dict[tuple[int, int, int], list[tuple[torch.Tensor, torch.Tensor]]] = {}
        for source, (head, buf) in enumerate(zip(heads, data)):
            if head.numel() == 0:
                continue
            entry = self._entry_at(int(head[0]), f"rank {source}")
            op_index = int(head[1])
            pieces = self._pieces_on(entry, head[2:], self._server)
            for q, rows in self._unpack(entry, pieces, buf):
                groups.setdefault((entry.index, op_index, q.part), []).append((q.local, rows))
        op_names = self.ops()
        with self._apply_lock:  # the serving thread applies other ranks' pushes too
            for (index, op_index, part), items in groups.items():
                entry, op = self._by_index[index], self._ops[op_names[op_index]]
                local, rows = (torch.cat(x) for x in zip(*items))
                local, rows = combine_duplicates(local, rows, op.combine)
                self._apply(entry, op, part, local, rows)

    # -- helpers -----------------------------------------------------------------------------
    def _pieces_on(self, entry: TensorEntry, gids: torch.Tensor, server: int) -> list:
        servers = self._servers[entry.index]
        return [q for q in entry.policy.split(gids) if servers[q.part] == server]

    @staticmethod
    def _piece_shape(entry: TensorEntry, q: Piece) -> tuple[int, ...]:
        return (q.local.numel(), *entry.part_trailing[q.part])

    def _piece_bytes(self, entry: TensorEntry, q: Piece) -> int:
        return math.prod(self._piece_shape(entry, q)) * entry.dtype.itemsize

    def _unpack(self, entry: TensorEntry, pieces: list[Piece], buf: torch.Tensor):
        """Yields (piece, rows): ``buf`` cut into the pieces' rows (views, in order)."""
        offset = 0
        for q in pieces:
            size = self._piece_bytes(entry, q)
            yield q, from_bytes(buf[offset:offset + size], self._piece_shape(entry, q),
                                entry.dtype)
            offset += size
        if offset != buf.numel():
            raise ProtocolError(f"{entry.name!r}: a message for parts "
                                f"{[q.part for q in pieces]} carried {buf.numel()} bytes; "
                                f"expected {offset} (do all ranks register the same names in "
                                f"the same order?)")

    def _entry_at(self, index: int, source: str) -> TensorEntry:
        if not 0 <= index < len(self._by_index):
            raise ProtocolError(f"{source} referred to tensor #{index}, but rank "
                                f"{self.session.rank} has {len(self._by_index)} registered: "
                                f"init_data must run in the same order on every rank")
        return self._by_index[index]

    def close(self) -> None:
        """Stops the serving threads (collective when the store serves: every rank calls it,
        after its last pull or push) and drops this process's mappings (the files were
        unlinked at init). Idempotent."""
        if self._channel is not None:
            failed = self.session.failure is not None  # then a barrier would only time out
            try:
                if not failed:
                    self.session.world.barrier()  # nobody asks this rank for rows any more
            except PeerError as exc:
                log.warning("rank %d: kvstore close: %s", self.session.rank, exc)
                failed = True
            self.session.remove_closer(self._channel.stop)
            self._channel.stop(job_failed=failed)
            self._channel = None
        for entry in self._by_index:
            entry.parts.clear()
