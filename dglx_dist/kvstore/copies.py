"""A rank's copies of other servers' rows, found by global id in one gather: what the
remote-row cache keeps while it learns (:mod:`~dglx_dist.kvstore.cache`) and the rows the
last pulls brought (:mod:`~dglx_dist.kvstore.recent`) both hold, and what a pull reads from
them before it asks the other servers.

The copies are found through a table of positions: one slot per row of the name where that
takes at most half the budget (``slots[g]`` is row ``g``'s position: a lookup is
one gather), else one slot per ``g % len(slots)``, a direct-mapped index whose slot holds the
last copy that landed there, checked against the copies' ids (a lookup is two gathers; a copy
whose slot a later one took is not found, and is asked for again). So a name of any size
keeps copies within the budget: at 64 MiB a name of more than 8M rows has 8M slots.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from dglx_dist.kvstore.entries import TensorEntry
from dglx_dist.kvstore.policy import Piece

__all__ = ["Copies", "ID_BYTES", "SLOT_BYTES", "capacity", "split_held", "table_size"]

ID_BYTES = 8
"""Each copied row's global id (int64), kept beside the rows."""

SLOT_BYTES = 4
"""Each slot of the table that finds the copies (int32)."""

TABLE_SHARE = 2
"""The table of slots takes at most ``1 / TABLE_SHARE`` of a store's budget."""


@dataclasses.dataclass
class Copies:
    """Copies of rows of one name: ``rows[i]`` of global row ``ids[i]`` (-1: empty), found
    through ``slots`` (the module's text: one per row of the name, or a direct-mapped index
    of fewer), ``next`` the position the next copy takes. Full, a ``wrap`` store overwrites
    its oldest copies; any other keeps what it has and copies no more."""

    ids: torch.Tensor
    rows: torch.Tensor
    slots: torch.Tensor
    wrap: bool
    next: int = 0
    exact: bool = True
    """Whether ``slots`` has a slot per row of the name (else: a direct-mapped index)."""

    @classmethod
    def within(cls, entry: TensorEntry, budget: float, wrap: bool) -> "Copies | None":
        """An empty store of ``entry``'s rows, its table and ids within ``budget`` bytes
        (:func:`capacity`; None: the budget holds no row); the pages of its rows are only
        touched as copies fill them."""
        num_rows = entry.policy.num_rows
        rows = capacity(budget, num_rows, entry.row_bytes)
        return cls.of(entry, rows, wrap, table_size(budget, num_rows)) if rows else None

    @classmethod
    def of(cls, entry: TensorEntry, capacity: int, wrap: bool,
           slots: int | None = None) -> "Copies":
        """An empty store of ``capacity`` rows of ``entry`` found through ``slots`` slots
        (None: one per row of the name)."""
        num_rows = entry.policy.num_rows
        size = num_rows if slots is None else min(slots, num_rows)
        return cls(torch.full((capacity,), -1, dtype=torch.int64),
                   torch.empty((capacity, *entry.trailing), dtype=entry.dtype),
                   torch.full((size,), -1, dtype=torch.int32), wrap, exact=size == num_rows)

    def _key(self, gids: torch.Tensor) -> torch.Tensor:
        return gids if self.exact else torch.remainder(gids, self.slots.numel())

    def find(self, gids: torch.Tensor) -> torch.Tensor:
        """Each of ``gids``' position among the copies (int32), or -1 where it has none."""
        at = self.slots.index_select(0, self._key(gids))
        if self.exact:
            return at
        mine = self.ids.index_select(0, at.clamp(min=0).long()) == gids
        return torch.where(mine, at, -1)

    def add(self, gids: torch.Tensor, rows: torch.Tensor, most: int | None = None) -> int:
        """Copies the rows of ``gids`` (distinct; ``rows`` aligned) not copied yet, at most
        ``most`` of them; returns how many it copied. The copies take the next positions in
        turn, so each lands in one or two spans of the store: gathered straight there."""
        new = torch.nonzero(self.find(gids) < 0).squeeze(1)
        cap = self.ids.numel()
        room = cap if self.wrap else cap - self.next
        room = room if most is None else max(0, min(room, most))
        if new.numel() > room:  # only the last ones fit (a wrap: they overwrite the oldest)
            new = new[-room:] if self.wrap else new[:room]
        n = new.numel()
        if not n:
            return 0
        at = torch.remainder(torch.arange(self.next, self.next + n), cap).to(torch.int32)
        old = self.ids.index_select(0, at)
        gone = old >= 0  # copies overwritten: their slots, where still theirs, empty
        key = self._key(old[gone])
        if not self.exact:
            key = key[self.slots.index_select(0, key) == at[gone]]
        self.slots.index_fill_(0, key, -1)
        gids = gids.index_select(0, new)
        done = 0
        for start, end in _spans(self.next, n, cap):
            take = new[done:done + end - start]
            torch.index_select(rows, 0, take, out=self.rows[start:end])
            self.ids[start:end] = gids[done:done + end - start]
            done += end - start
        self.slots.index_copy_(0, self._key(gids), at)
        self.next = (self.next + n) % cap if self.wrap else self.next + n
        return n

    def has(self, ids: torch.Tensor) -> torch.Tensor:
        """Whether each of ``ids`` is copied here (and found)."""
        return self.find(ids) >= 0

    def rows_of(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """The copies of ``ids`` (every one found here: :meth:`has`), in order, into ``out``
        if given."""
        at = self.find(ids).long()
        return torch.index_select(self.rows, 0, at, out=out) if out is not None \
            else self.rows.index_select(0, at)

    def serve(self, uniq: torch.Tensor, remote: dict[int, list[Piece]]
              ) -> tuple[dict[int, list[Piece]], list[tuple[Piece, torch.Tensor]]]:
        """A pull's remote pieces less the rows copied here, and those rows: pieces of
        positions in ``uniq`` with their rows, copied now (later copies may overwrite them
        before the pull writes its output)."""
        left, held = split_held(self.find, uniq, remote)
        return left, [(Piece(-1, q.pos, q.local), self.rows.index_select(0, q.local))
                      for q in held]


def _spans(first: int, n: int, cap: int) -> list[tuple[int, int]]:
    """The positions ``first .. first + n - 1`` of a store of ``cap`` (``n <= cap``), modulo
    ``cap``, as at most two ``(start, end)`` spans."""
    end = first + n
    return [(first, end)] if end <= cap else [(first, cap), (0, end - cap)]


def table_size(budget: float, num_rows: int) -> int:
    """The slots of a store of ``budget`` bytes for a name of ``num_rows`` rows: one per row
    where that takes at most ``1 / TABLE_SHARE`` of the budget, else as many as that share
    holds."""
    return max(1, min(num_rows, int(budget // (TABLE_SHARE * SLOT_BYTES))))


def capacity(budget: float, num_rows: int, row_bytes: int) -> int:
    """The rows of ``row_bytes`` each (and their ids) that ``budget`` bytes hold beside the
    table of slots (:func:`table_size`) of a name of ``num_rows`` rows."""
    table = SLOT_BYTES * table_size(budget, num_rows)
    return max(0, int((budget - table) // (row_bytes + ID_BYTES)))


def split_held(find: Callable[[torch.Tensor], torch.Tensor], uniq: torch.Tensor,
               remote: dict[int, list[Piece]]) -> tuple[dict[int, list[Piece]], list[Piece]]:
    """A pull's remote pieces (positions in ``uniq``) less the rows held elsewhere, and
    pieces reading those (``local``: their positions there); ``find(gids)`` is each global
    row's position, or -1 where it is not held."""
    left, held = {}, []
    for server, pieces in remote.items():
        for q in pieces:
            at = find(uniq.index_select(0, q.pos))
            hit = at >= 0
            if bool(hit.any()):
                held.append(Piece(-1, q.pos[hit], at[hit].long()))
                q = Piece(q.part, q.pos[~hit], q.local[~hit])
            if q.pos.numel():
                left.setdefault(server, []).append(q)
    return left, held
