"""Copies of other servers' rows, kept on a server so that its pulls stop fetching them again.

A :class:`RowCache` (``DistKVStore.start_cache``) counts, for one epoch, how often this
server's ranks pulled each row that lives elsewhere, and keeps a copy of each such row as its
answer arrives (:class:`~dglx_dist.kvstore.copies.Copies`), which the rank's later pulls
read until the fill; ``DistKVStore.fill_cache`` (collective) puts the rows pulled most
often, within the budget, into the server's shared memory, where later pulls read them: the
copies come from the ranks' kept rows, so the fill sends no rows between servers. While the
budget has room, the next epoch's misses are counted and kept for the next fill.
docs/kvstore.md ("A cache of other servers' rows") says what stays exact (pushes drop
copies; whole rows only), what is refused and why visits, not degrees.
"""
from __future__ import annotations

import dataclasses
import shutil
import threading
from pathlib import Path

import psutil
import torch

from dglx_dist.errors import InvalidValueError
from dglx_dist.kvstore.copies import ID_BYTES, Copies, split_held
from dglx_dist.kvstore.entries import TensorEntry
from dglx_dist.kvstore.policy import Piece

__all__ = ["RowCache", "Held", "choose_rows", "check_budget"]


@dataclasses.dataclass(frozen=True)
class Held:
    """One name's cached rows: ``ids`` (int64, in the order the fills added them), ``rows[i]``
    the row of ``ids[i]``; ``slots[g]`` is the position in ``rows`` of global row ``g``, or -1
    (int32, one per row of the name: a lookup is one gather, where a binary search of sorted
    ids took 40 times as long for a pull's remote rows at ogbn-products' size)."""

    ids: torch.Tensor
    rows: torch.Tensor
    slots: torch.Tensor
    base: int | None = None
    whole: torch.Tensor | None = None

    @classmethod
    def of(cls, ids: torch.Tensor, rows: torch.Tensor, num_rows: int,
           base: int | None = None, whole: torch.Tensor | None = None) -> "Held":
        """``rows`` held for the distinct global ``ids`` of a name with ``num_rows`` rows; with
        ``base``, ``whole`` is one tensor of the own part ``base``'s rows followed by ``rows``
        (so that a pull gathers own and cached rows in one pass)."""
        slots = torch.full((num_rows,), -1, dtype=torch.int32)
        slots[ids] = torch.arange(ids.numel(), dtype=torch.int32)
        return cls(ids, rows, slots, base, whole)

    @property
    def nbytes(self) -> int:
        return self.ids.numel() * ID_BYTES + self.rows.nbytes


def choose_rows(counts: dict[int, torch.Tensor], row_bytes: dict[int, int],
                budget: int) -> dict[int, torch.Tensor]:
    """The rows to cache by name index: the most often pulled first (ties: lower name index,
    then lower id), while their bytes (``row_bytes`` plus :data:`ID_BYTES` each) add up to at
    most ``budget``; each name's ids sorted. Rows never pulled are never chosen."""
    names, ids, seen, cost = [], [], [], []
    for index in sorted(counts):
        pulled = torch.nonzero(counts[index] > 0).squeeze(1)
        names.append(torch.full_like(pulled, index))
        ids.append(pulled)
        seen.append(counts[index].index_select(0, pulled).long())
        cost.append(torch.full_like(pulled, row_bytes[index] + ID_BYTES))
    if not ids:
        return {}
    names, ids, seen, cost = (torch.cat(t) for t in (names, ids, seen, cost))
    order = torch.sort(-seen, stable=True).indices  # ties keep (name, id) order
    taken = order[torch.cumsum(cost.index_select(0, order), 0) <= budget]
    chosen = {}
    for index in sorted(counts):
        mine = ids.index_select(0, taken[names.index_select(0, taken) == index])
        if mine.numel():
            chosen[index] = torch.sort(mine).values
    return chosen


def check_budget(budget: int, shm_dir: Path, server: int) -> None:
    """Refuses (ValueError) a budget that is not positive or larger than the shared memory
    free in ``shm_dir`` or the memory available on this server."""
    mb = budget / 2**20
    if budget <= 0:
        raise InvalidValueError(f"cache_mb={mb:g}: expected a positive budget (0 turns the "
                                "cache off)")
    room = {f"shared memory free in {shm_dir}": shutil.disk_usage(shm_dir).free,
            "memory available": psutil.virtual_memory().available}
    for what, free in room.items():
        if budget > free:
            raise InvalidValueError(f"cache_mb={mb:,.0f}: more than the {free / 2**20:,.0f} MB "
                                    f"of {what} on server {server}; expected a budget that "
                                    "fits beside the partition's own data")


class RowCache:
    """This rank's view of its server's cache: the held rows and, while the cache learns
    (``counting``), the counts and kept copies of the remote rows pulled since the last fill,
    which its pulls read too (a name once written is neither kept nor read from them).

    Args:
        budget: bytes per server for cached rows and their ids.
        keep: bytes of copies this rank keeps between fills at most, their ids and slots
            included (by default the budget; a server's ranks share it, so that the copies
            take no more memory than the cache will).
        written: the names written so far (the store's), neither kept nor read from copies.
    """

    def __init__(self, budget: int, keep: int | None = None, *, written: set[int]):
        self.budget = int(budget)
        self.keep_limit = self.budget if keep is None else int(keep)
        self.counting = True
        self.counts: dict[int, torch.Tensor] = {}  # name index -> pulls per global row
        self.kept: dict[int, Copies] = {}  # name index -> copies of the rows pulled
        self.kept_bytes = 0
        self.written = written
        self.held: dict[int, Held] = {}  # name index -> cached rows
        self.aside = False  # set_aside ended the counting: the next fill takes what it left
        self.fills = 0
        # a loader's worker thread pulls (and counts) while the loop's thread does
        self._counting = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Bytes of rows and ids held (shared by the server's ranks)."""
        return sum(h.nbytes for h in self.held.values())

    def drop(self, index: int) -> None:
        """Forgets name ``index``'s copies, held and kept (its rows were written: the store
        marks it first; a fill takes no name that was)."""
        with self._counting:
            self.held.pop(index, None)
            self.kept.pop(index, None)

    def _count(self, entry: TensorEntry, uniq: torch.Tensor,
               remote: dict[int, list[Piece]]) -> None:
        counts = self.counts.get(entry.index)
        if counts is None:
            counts = self.counts[entry.index] = torch.zeros(entry.policy.num_rows,
                                                            dtype=torch.int32)
        for pieces in remote.values():
            for q in pieces:
                counts.index_add_(0, uniq.index_select(0, q.pos),
                                  torch.ones(q.pos.numel(), dtype=torch.int32))

    def keep(self, entry: TensorEntry, gids: torch.Tensor, rows: torch.Tensor) -> None:
        """Keeps copies of the remote rows an answer brought (``rows`` of ``gids``), for the
        next fill and this rank's next pulls, until they reach its share of the budget."""
        with self._counting:
            if not self.counting or entry.index in self.written:
                return
            kept = self.kept.get(entry.index)
            if kept is None:
                kept = Copies.within(entry, self.keep_limit - self.kept_bytes, wrap=False)
                if kept is None:
                    return
                self.kept[entry.index] = kept
                self.kept_bytes += kept.slots.nbytes
            per_row = entry.row_bytes + ID_BYTES
            self.kept_bytes += per_row * kept.add(
                gids, rows, (self.keep_limit - self.kept_bytes) // per_row)

    @property
    def fill_due(self) -> bool:
        """Whether a fill has counts to fill from: the cache counts, or :meth:`set_aside`
        ended its counting."""
        return self.counting or self.aside

    def set_aside(self) -> bool:
        """Ends the counting until the next fill, which takes the counts and copies made so
        far (later pulls count and keep nothing); False where the cache was not counting."""
        with self._counting:
            if not self.counting:
                return False
            self.counting, self.aside = False, True
            return True

    def take_learnt(self) -> tuple[dict[int, torch.Tensor], dict[int, Copies]]:
        """The counts and copies since the last fill; they start again."""
        with self._counting:
            learnt = self.counts, self.kept
            self.counts, self.kept, self.kept_bytes, self.aside = {}, {}, 0, False
        return learnt

    def serve(self, entry: TensorEntry, uniq: torch.Tensor, remote: dict[int, list[Piece]]
              ) -> tuple[dict[int, list[Piece]], list[Piece], list[tuple[Piece, torch.Tensor]]]:
        """A pull's remote pieces, less the rows held here and the rows this rank kept since
        the last fill; pieces reading the held rows (``local`` indexes :attr:`Held.rows`);
        and the kept rows (:meth:`Copies.serve`). While counting, counts the rows not held
        (kept ones too: the fill chooses by the pulls)."""
        left, cached = self._split(entry, uniq, remote)
        if not left or entry.policy.splits_columns:
            return left, cached, []
        with self._counting:
            if self.counting:
                self._count(entry, uniq, left)
            kept = self.kept.get(entry.index)
            if kept is None:
                return left, cached, []
            left, copies = kept.serve(uniq, left)
        return left, cached, copies

    def _split(self, entry: TensorEntry, uniq: torch.Tensor,
               remote: dict[int, list[Piece]]) -> tuple[dict[int, list[Piece]], list[Piece]]:
        held = self.held.get(entry.index)
        if held is None or not held.ids.numel():
            return remote, []
        return split_held(lambda gids: held.slots.index_select(0, gids), uniq, remote)

