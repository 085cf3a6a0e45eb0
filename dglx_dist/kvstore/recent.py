"""Copies of the other servers' rows that this rank's last pulls brought, read by its next
pulls instead of asking for them again (``DistKVStore.keep_recent``; ``distdgl``'s
``reuse_mb``).

Consecutive mini-batches share much of their input: at 1M nodes (fanouts 10,25, batch 1000,
two servers) 13% of a step's remote rows were pulled by the step before, 32% by one of the
four before, 45% by one of the eight before (docs/benchmarks.md). A :class:`RecentRows` keeps,
per name, the last rows the answers brought up to its budget in a ring (the oldest give way),
in this rank's own memory: unlike the server's cache (:mod:`~dglx_dist.kvstore.cache`) it
needs no epoch to learn, no fill and no shared memory, and it serves from the second step.

What stays exact: a copy is read only while nothing may have written its row. A collective
push drops the copies of every name it writes, on every rank; this rank's own push of one
row drops its name's; a barrier (``DistGraph.barrier``) drops them all, since other ranks'
single-rank writes are promised to be seen only after one (as in DGL). Column-split names
(P3's features) are not kept.
"""
from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Callable

import torch

from dglx_dist.kvstore.cache import ID_BYTES, split_held
from dglx_dist.kvstore.entries import TensorEntry
from dglx_dist.kvstore.policy import Piece

__all__ = ["RecentRows"]

SLOT_BYTES = 4
"""Each row of a kept name costs a slot (int32) besides its copies."""


@dataclasses.dataclass
class _Ring:
    """One name's copies: ``rows[i]`` of global row ``ids[i]`` (-1: empty), ``slots[g]`` the
    position of row ``g`` (-1: not kept), ``next`` the position the next copy overwrites."""

    ids: torch.Tensor
    rows: torch.Tensor
    slots: torch.Tensor
    next: int = 0

    @classmethod
    def of(cls, entry: TensorEntry, capacity: int) -> "_Ring":
        return cls(torch.full((capacity,), -1, dtype=torch.int64),
                   torch.empty((capacity, *entry.trailing), dtype=entry.dtype),
                   torch.full((entry.policy.num_rows,), -1, dtype=torch.int32))

    def add(self, gids: torch.Tensor, rows: torch.Tensor) -> None:
        """Copies the rows of ``gids`` (distinct) not kept yet over the oldest."""
        new = self.slots.index_select(0, gids) < 0
        gids, rows = gids[new], rows[new]
        cap = self.ids.numel()
        if gids.numel() > cap:  # only the last ones fit
            gids, rows = gids[-cap:], rows[-cap:]
        if not gids.numel():
            return
        at = torch.remainder(torch.arange(self.next, self.next + gids.numel()), cap)
        old = self.ids.index_select(0, at)
        self.slots[old[old >= 0]] = -1
        self.ids[at], self.rows[at] = gids, rows
        self.slots[gids] = at.to(torch.int32)
        self.next = (self.next + gids.numel()) % cap

    def clear(self) -> None:
        """Forgets every copy (the buffers stay for the next)."""
        self.slots[self.ids[self.ids >= 0]] = -1
        self.ids.fill_(-1)
        self.next = 0


class RecentRows:
    """This rank's copies of the remote rows its last pulls brought, at most ``budget`` bytes
    per name (rows, their ids and a slot per row of the name), the oldest overwritten first;
    thread-safe (a loader's worker thread pulls while the loop's thread does)."""

    def __init__(self, budget: int):
        self.budget = int(budget)
        self._rings: dict[int, _Ring] = {}
        self._written: set[int] = set()  # names pushed: not kept any more
        self._dropped = 0  # drops so far: rows pulled before one are not kept after it
        self._lock = threading.Lock()

    def serve(self, entry: TensorEntry, uniq: torch.Tensor, remote: dict[int, list[Piece]]
              ) -> tuple[dict[int, list[Piece]], list[tuple[Piece, torch.Tensor]]]:
        """A pull's remote pieces less the rows kept here, and those rows: pieces of
        positions in ``uniq`` with their rows, copied now (a later answer may overwrite the
        ring before the pull writes its output)."""
        with self._lock:
            ring = self._rings.get(entry.index)
            if ring is None or not remote:
                return remote, []
            left, held = split_held(ring.slots, uniq, remote)
            return left, [(Piece(-1, q.pos, q.local), ring.rows.index_select(0, q.local))
                          for q in held]

    def keeper(self) -> Callable[[TensorEntry, torch.Tensor, torch.Tensor], None]:
        """What a pull planned now keeps its answers' rows with: :meth:`keep`, unless the
        copies are dropped before the answers arrive (they may have been read before a
        write the drop stands for)."""
        return functools.partial(self.keep, since=self._dropped)

    def keep(self, entry: TensorEntry, gids: torch.Tensor, rows: torch.Tensor,
             since: int) -> None:
        """Keeps copies of the remote rows an answer brought (``rows`` of ``gids``) of a pull
        planned after ``since`` drops, unless there were more since."""
        if entry.policy.splits_columns or entry.index in self._written:
            return
        with self._lock:
            if since != self._dropped:
                return
            ring = self._rings.get(entry.index)
            if ring is None:
                per_row = entry.row_bytes + ID_BYTES
                capacity = (self.budget - SLOT_BYTES * entry.policy.num_rows) // per_row
                if capacity < 1:
                    return  # the budget does not cover the name's slots and a row
                ring = self._rings[entry.index] = _Ring.of(entry, capacity)
            ring.add(gids, rows)

    def drop(self, index: int | None = None, written: bool = False) -> None:
        """Forgets name ``index``'s copies (every name's: None); a name ``written`` (pushed)
        is not kept any more: its rows change as the job trains."""
        with self._lock:
            self._dropped += 1
            for i, ring in self._rings.items():
                if index is None or i == index:
                    ring.clear()
            if written and index is not None:
                self._written.add(index)
                self._rings.pop(index, None)
