"""One pull per server (``DistKVStore.pull_per_server``): the ranks of a server ask each other
server once for the rows any of them wants (a row two of them want crosses the link once),
then hand each other the rows they got.

docs/kvstore.md ("One pull per server") gives the four steps, the order their exchanges run
in, what goes alone (column slices, p3's) and what a rank whose answers failed does.
"""
from __future__ import annotations

import collections
from typing import Callable

import torch

from dglx_dist.errors import ProtocolError
from dglx_dist.kvstore.shm import EMPTY_U8

__all__ = ["ServerPulls"]

Key = tuple[int, int]  # (the tensor's registration index, the server asked)
Asked = dict[int, list[tuple[int, torch.Tensor]]]  # server -> [(index, ids)]
Send = Callable[[Asked, list[int]], Callable[[], list[torch.Tensor]]]
_OK, _FAILED = 0, 1
_STATUS = 8  # bytes of status in front of each message of step 3


def _encode(mine: dict[Key, torch.Tensor], whole: bool) -> torch.Tensor:
    """``[whole, keys, (index, server, count) per key, ids...]`` (int64)."""
    keys = sorted(mine)
    head = [int(whole), len(keys)] + [n for k in keys for n in (*k, mine[k].numel())]
    return torch.cat([torch.tensor(head, dtype=torch.int64)] + [mine[k] for k in keys])


def _decode(msg: torch.Tensor) -> tuple[bool, dict[Key, torch.Tensor]]:
    whole, count = bool(msg[0]), int(msg[1])
    head = msg[2:2 + 3 * count].view(count, 3).tolist()
    ids = torch.split(msg[2 + 3 * count:], [n for _, _, n in head])
    return whole, {(index, server): t for (index, server, _), t in zip(head, ids)}


def _wide(rows: torch.Tensor) -> torch.Tensor:
    """Raw rows (uint8, a row each) seen as the widest integers that tile a row (copied
    where their bytes do not start on such a boundary): copies of whole rows by index move
    words instead of bytes (an index copy of uint8 rows costs several times more)."""
    for size, dtype in ((8, torch.int64), (4, torch.int32), (2, torch.int16)):
        if rows.shape[1] % size == 0:
            return (rows if rows.storage_offset() % size == 0 else rows.clone()).view(dtype)
    return rows


class _Pull:
    """One coalesced pull under way: every rank's requests, the unions, who asks for what.

    A union is held as sort keys ``part * rows + id`` (sorted), so that each rank's request
    asks its server's parts one after another, in the order the server answers them. A row
    one rank wants is asked for by that rank; rows several want are cut into contiguous runs,
    one per rank of the server."""

    def __init__(self, every: list[dict[Key, torch.Tensor]], local: int,
                 plan_order: list[list[tuple[Key, int]]], entry_of: Callable):
        self.every, self.local = every, local
        self.mine = every[local]  # this rank's requests, as the others received them
        self.plan_order = plan_order  # per plan, its keys and id counts, in its servers' order
        self.entries = {k: entry_of(k[0]) for k in set().union(*every)}
        self.union, self.owner, self.slot = {}, {}, {}
        self._found: dict[tuple[Key, int], tuple[torch.Tensor, torch.Tensor]] = {}
        for k in sorted(self.entries):
            self._assign(k, [torch.unique(self.sort_key(k, e[k])) for e in every if k in e],
                         [m for m, e in enumerate(every) if k in e])
        self.wait_cross: Callable[[], list[torch.Tensor]] | None = None
        self.result: list[torch.Tensor] | None = None
        self.error: BaseException | None = None

    def _assign(self, k: Key, keys: list[torch.Tensor], askers: list[int]) -> None:
        """Key ``k``'s union, the rank that asks for each of its rows and the row's place in
        that rank's request."""
        union = torch.unique(torch.cat(keys))
        count = torch.zeros(union.numel(), dtype=torch.int64)
        owner = torch.empty(union.numel(), dtype=torch.int64)
        for m, asked in zip(askers, keys):
            hit = torch.searchsorted(union, asked)
            count.index_add_(0, hit, torch.ones_like(hit))
            owner[hit] = m
        shared = torch.nonzero(count > 1).squeeze(1)
        owner[shared] = torch.arange(shared.numel()) * len(self.every) // max(shared.numel(), 1)
        slot = torch.empty_like(owner)
        for m in range(len(self.every)):
            where = torch.nonzero(owner == m).squeeze(1)
            slot[where] = torch.arange(where.numel())
        self.union[k], self.owner[k], self.slot[k] = union, owner, slot

    def sort_key(self, k: Key, ids: torch.Tensor) -> torch.Tensor:
        policy = self.entries[k].policy
        return torch.as_tensor(policy.part_of(ids)) * policy.num_rows + ids

    def width(self, k: Key) -> int:
        return self.entries[k].row_bytes

    def run(self, k: Key) -> torch.Tensor:
        """The ids this rank asks key ``k``'s server for, in the order the server answers."""
        keys = self.union[k][self.owner[k] == self.local]
        return keys % self.entries[k].policy.num_rows

    def where(self, k: Key, m: int) -> tuple[torch.Tensor, torch.Tensor]:
        """For each id rank ``m`` of the server wants of key ``k``: the rank that asks for it
        and its place in that rank's request (computed once)."""
        found = self._found.get((k, m))
        if found is None:
            pos = torch.searchsorted(self.union[k], self.sort_key(k, self.every[m][k]))
            found = self._found[(k, m)] = (self.owner[k][pos], self.slot[k][pos])
        return found


class ServerPulls:
    """This rank's coalesced pulls (see the module docstring).

    Args:
        server: a communicator over the ranks of this rank's server (a group of its own).
        entry_of: the :class:`~dglx_dist.kvstore.entries.TensorEntry` of a registration index.
        servers: the number of servers.
    """

    def __init__(self, server, entry_of: Callable, servers: int):
        self.server, self.entry_of, self.servers = server, entry_of, servers
        self.local = server.group_rank
        self._queue: collections.deque[_Pull] = collections.deque()

    def on(self, twin) -> "ServerPulls":
        """The same pulls on ``twin(server)``, a group of its own (collective), with a queue
        of their own: a loader's worker thread starts and finishes them there."""
        return ServerPulls(twin(self.server), self.entry_of, self.servers)

    def start(self, keyed: list[tuple[int, bool, dict[int, torch.Tensor]]], send: Send,
              alone: Callable[[], Callable[[], list[torch.Tensor]]]
              ) -> Callable[[], list[torch.Tensor]]:
        """Starts a pull whose plans ask ``keyed`` (per plan: its tensor's index, whether it
        asks for whole rows, and the ids per other server); ``send(asked, expect)`` sends
        requests across servers and returns what waits for the answers (raw bytes per
        server), ``alone()`` sends each plan's own requests. Returns what waits for the
        answers each plan would have got asking alone (collective within the server)."""
        mine: dict[Key, list[torch.Tensor]] = {}
        for index, _, asked in keyed:
            for server, ids in asked.items():
                mine.setdefault((index, server), []).append(ids)
        whole = all(w for _, w, _ in keyed)
        flat = {k: torch.cat(v) for k, v in mine.items()}
        gathered = [_decode(m) for m in self.server.all_gather_v(_encode(flat, whole))]
        if not all(w for w, _ in gathered):
            return alone()
        pull = _Pull([e for _, e in gathered], self.local,
                     [[((index, s), ids.numel()) for s, ids in asked.items()]
                      for index, _, asked in keyed], self.entry_of)
        asked: Asked = {}
        expect = [0] * self.servers
        for k in pull.union:
            run = pull.run(k)
            if run.numel():
                asked.setdefault(k[1], []).append((k[0], run))
                expect[k[1]] += run.numel() * pull.width(k)
        pull.wait_cross = send(asked, expect)
        self._queue.append(pull)
        return lambda: self._finish_through(pull)

    def _finish_through(self, pull: _Pull) -> list[torch.Tensor]:
        """Finishes the pulls started before ``pull``, then ``pull`` (in start order)."""
        while pull.result is None and pull.error is None:
            first = self._queue.popleft()
            try:
                first.result = self._finish(first)
            except BaseException as exc:
                first.error = exc
                if first is pull:
                    raise
        if pull.error is not None:
            raise pull.error
        return pull.result

    def _finish(self, pull: _Pull) -> list[torch.Tensor]:
        failure, got = None, {}
        try:
            got = self._own_rows(pull, pull.wait_cross())
        except RuntimeError as exc:  # the server's other ranks still get this rank's word
            failure = exc
        send = [self._rows_for(pull, m, got, failure is None) if m != self.local else EMPTY_U8
                for m in range(len(pull.every))]
        expect = [0 if m == self.local else _STATUS + self._bytes_from(pull, m)
                  for m in range(len(pull.every))]
        recv = self.server.all_to_all_v(send, recv_rows=expect)
        if failure is not None:
            raise failure
        for m, msg in enumerate(recv):
            if m != self.local and int(msg[:_STATUS].view(torch.int64)) != _OK:
                raise ProtocolError(f"rank {self.server.members[m]} (this server) could not get "
                                    f"the rows it pulled for its server's ranks")
        return self._answers(pull, got, recv)

    def _own_rows(self, pull: _Pull, replies: list[torch.Tensor]) -> dict[Key, torch.Tensor]:
        """This rank's runs' rows (raw bytes, a row each) from the answers of each server."""
        got, offsets = {}, [0] * self.servers
        for k in pull.union:  # sorted: the order the requests went in
            run, width = pull.run(k), pull.width(k)
            if run.numel():
                n = run.numel() * width
                got[k] = replies[k[1]][offsets[k[1]]:offsets[k[1]] + n].view(-1, width)
                offsets[k[1]] += n
        return got

    def _rows_for(self, pull: _Pull, m: int, got: dict[Key, torch.Tensor], ok: bool
                  ) -> torch.Tensor:
        """The rows of this rank's runs that rank ``m`` of the server asked for, in its order."""
        parts = [torch.tensor([_OK if ok else _FAILED], dtype=torch.int64).view(torch.uint8)]
        for k in sorted(pull.every[m]):
            owner, slot = pull.where(k, m)
            mine = slot[owner == self.local]
            if not mine.numel():
                continue
            if ok:
                parts.append(_wide(got[k]).index_select(0, mine).view(torch.uint8).reshape(-1))
            else:
                parts.append(torch.zeros(mine.numel() * pull.width(k), dtype=torch.uint8))
        return torch.cat(parts)

    def _bytes_from(self, pull: _Pull, m: int) -> int:
        """The bytes of rows this rank asked for that rank ``m``'s runs hold."""
        return sum(int((pull.where(k, self.local)[0] == m).sum()) * pull.width(k)
                   for k in pull.mine)

    def _answers(self, pull: _Pull, got: dict[Key, torch.Tensor],
                 recv: list[torch.Tensor]) -> list[torch.Tensor]:
        """Per server, the answer to this rank's own requests, as asking alone gives it."""
        offsets = [_STATUS] * len(recv)
        rows = {}
        for k, ids in sorted(pull.mine.items()):
            width = pull.width(k)
            owner, slot = pull.where(k, self.local)
            if bool((owner == self.local).all()):  # every row came in this rank's answer
                rows[k] = got[k].index_select(0, slot)
                continue
            out = torch.empty((ids.numel(), width), dtype=torch.uint8)
            for m in range(len(pull.every)):
                sel = torch.nonzero(owner == m).squeeze(1)
                if not sel.numel():
                    continue
                if m == self.local:
                    src = _wide(got[k]).index_select(0, slot.index_select(0, sel))
                else:
                    n = sel.numel() * width
                    src = _wide(recv[m][offsets[m]:offsets[m] + n].view(-1, width))
                    offsets[m] += n
                _wide(out).index_copy_(0, sel, src)
            rows[k] = out
        used: dict[Key, int] = collections.Counter()
        replies: list[list[torch.Tensor]] = [[] for _ in range(self.servers)]
        for segments in pull.plan_order:  # a plan's rows of each server, plan after plan
            for k, n in segments:
                replies[k[1]].append(rows[k][used[k]:used[k] + n].reshape(-1))
                used[k] += n
        return [r[0] if len(r) == 1 else torch.cat(r) if r else EMPTY_U8 for r in replies]
