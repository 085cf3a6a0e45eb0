"""Copies of the other servers' rows that this rank's last pulls brought, read by its next
pulls instead of asking for them again (``DistKVStore.keep_recent``; ``distdgl``'s
``reuse_mb``).

Consecutive mini-batches share much of their input: at 1M nodes (fanouts 10,25, batch 1000,
two servers) 13% of a step's remote rows were pulled by the step before, 32% by one of the
four before, 45% by one of the eight before (docs/benchmarks.md). A :class:`RecentRows` keeps,
per name, the last rows the answers brought up to its budget (:class:`~dglx_dist.kvstore.
copies.Copies`: the oldest give way), in this rank's own memory: unlike the server's cache
(:mod:`~dglx_dist.kvstore.cache`) it needs no epoch to learn, no fill and no shared memory,
and it serves from the second step.

What stays exact: a copy is read only while nothing may have written its row. A name that
is written is not kept any more, on any rank: a collective push drops it everywhere at once;
a rank's own push of some rows drops it on that rank, and on the others at the next barrier
(``DistGraph.barrier``), since other ranks' single-rank writes are promised to be seen only
after one (as in DGL). Column-split names (P3's features) are not kept.
"""
from __future__ import annotations

import threading

import torch

from dglx_dist.kvstore.copies import Copies
from dglx_dist.kvstore.entries import TensorEntry
from dglx_dist.kvstore.policy import Piece

__all__ = ["RecentRows"]


class RecentRows:
    """This rank's copies of the remote rows its last pulls brought, at most ``budget`` bytes
    per name (rows, their ids and the table of slots that finds them), the oldest overwritten
    first; thread-safe (a loader's worker thread pulls while the loop's thread does). ``written``:
    the names written so far (the store's, shared with its cache), never kept."""

    def __init__(self, budget: int, written: set[int]):
        self.budget = int(budget)
        self._copies: dict[int, Copies] = {}
        self._written = written
        self._lock = threading.Lock()

    def serve(self, entry: TensorEntry, uniq: torch.Tensor, remote: dict[int, list[Piece]]
              ) -> tuple[dict[int, list[Piece]], list[tuple[Piece, torch.Tensor]]]:
        """A pull's remote pieces less the rows kept here, and those rows
        (:meth:`Copies.serve`)."""
        with self._lock:
            copies = self._copies.get(entry.index)
            if copies is None or not remote:
                return remote, []
            return copies.serve(uniq, remote)

    def keep(self, entry: TensorEntry, gids: torch.Tensor, rows: torch.Tensor) -> None:
        """Keeps copies of the remote rows an answer brought (``rows`` of ``gids``), unless
        the name was written since (the answer may have been read before the write)."""
        if entry.policy.splits_columns:
            return
        with self._lock:
            if entry.index in self._written:
                return
            copies = self._copies.get(entry.index)
            if copies is None:
                copies = Copies.within(entry, self.budget, wrap=True)
                if copies is None:
                    return  # the budget does not hold a row
                self._copies[entry.index] = copies
            copies.add(gids, rows)

    def drop(self, index: int) -> None:
        """Forgets name ``index``'s copies (it was written: the store marks it first)."""
        with self._lock:
            self._copies.pop(index, None)
