"""A rank's copies of other servers' rows, found by global id in one gather: what the
remote-row cache keeps while it learns (:mod:`~dglx_dist.kvstore.cache`) and the rows the
last pulls brought (:mod:`~dglx_dist.kvstore.recent`) both hold, and what a pull reads from
them before it asks the other servers."""
from __future__ import annotations

import dataclasses

import torch

from dglx_dist.kvstore.entries import TensorEntry
from dglx_dist.kvstore.policy import Piece

__all__ = ["Copies", "ID_BYTES", "SLOT_BYTES", "capacity", "split_held"]

ID_BYTES = 8
"""Each copied row's global id (int64), kept beside the rows."""

SLOT_BYTES = 4
"""Each row of a copied name costs a slot (int32) besides the copies."""


@dataclasses.dataclass
class Copies:
    """Copies of rows of one name: ``rows[i]`` of global row ``ids[i]`` (-1: empty),
    ``slots[g]`` the position of row ``g`` (-1: not copied; a lookup is one gather), ``next``
    the position the next copy takes. Full, a ``wrap`` store overwrites its oldest copies; any
    other keeps what it has and copies no more."""

    ids: torch.Tensor
    rows: torch.Tensor
    slots: torch.Tensor
    wrap: bool
    next: int = 0

    @classmethod
    def of(cls, entry: TensorEntry, capacity: int, wrap: bool) -> "Copies":
        """An empty store of at most ``capacity`` rows of ``entry`` (the pages of its rows
        are only touched as copies fill them)."""
        return cls(torch.full((capacity,), -1, dtype=torch.int64),
                   torch.empty((capacity, *entry.trailing), dtype=entry.dtype),
                   torch.full((entry.policy.num_rows,), -1, dtype=torch.int32), wrap)

    def add(self, gids: torch.Tensor, rows: torch.Tensor, most: int | None = None) -> int:
        """Copies the rows of ``gids`` (distinct; ``rows`` aligned) not copied yet, at most
        ``most`` of them; returns how many it copied. The copies take the next positions in
        turn, so each lands in one or two spans of the store: gathered straight there."""
        new = torch.nonzero(self.slots.index_select(0, gids) < 0).squeeze(1)
        cap = self.ids.numel()
        room = cap if self.wrap else cap - self.next
        room = room if most is None else max(0, min(room, most))
        if new.numel() > room:  # only the last ones fit (a wrap: they overwrite the oldest)
            new = new[-room:] if self.wrap else new[:room]
        n = new.numel()
        if not n:
            return 0
        at = torch.remainder(torch.arange(self.next, self.next + n), cap)
        old = self.ids.index_select(0, at)
        self.slots.index_fill_(0, old[old >= 0], -1)
        gids = gids.index_select(0, new)
        done = 0
        for start, end in _spans(self.next, n, cap):
            take = new[done:done + end - start]
            torch.index_select(rows, 0, take, out=self.rows[start:end])
            self.ids[start:end] = gids[done:done + end - start]
            done += end - start
        self.slots.index_copy_(0, gids, at.to(torch.int32))
        self.next = (self.next + n) % cap if self.wrap else self.next + n
        return n

    def has(self, ids: torch.Tensor) -> torch.Tensor:
        """Whether each of ``ids`` is copied here."""
        return self.slots.index_select(0, ids) >= 0

    def rows_of(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """The copies of ``ids`` (every one copied here), in order, into ``out`` if given."""
        at = self.slots.index_select(0, ids).long()
        return torch.index_select(self.rows, 0, at, out=out) if out is not None \
            else self.rows.index_select(0, at)

    def serve(self, uniq: torch.Tensor, remote: dict[int, list[Piece]]
              ) -> tuple[dict[int, list[Piece]], list[tuple[Piece, torch.Tensor]]]:
        """A pull's remote pieces less the rows copied here, and those rows: pieces of
        positions in ``uniq`` with their rows, copied now (later copies may overwrite them
        before the pull writes its output)."""
        left, held = split_held(self.slots, uniq, remote)
        return left, [(Piece(-1, q.pos, q.local), self.rows.index_select(0, q.local))
                      for q in held]


def _spans(first: int, n: int, cap: int) -> list[tuple[int, int]]:
    """The positions ``first .. first + n - 1`` of a store of ``cap`` (``n <= cap``), modulo
    ``cap``, as at most two ``(start, end)`` spans."""
    end = first + n
    return [(first, end)] if end <= cap else [(first, cap), (0, end - cap)]


def capacity(budget: float, num_rows: int, row_bytes: int) -> int:
    """The rows of ``row_bytes`` each (and their ids) that ``budget`` bytes hold beside the
    slot table of a name of ``num_rows`` rows."""
    return max(0, int((budget - SLOT_BYTES * num_rows) // (row_bytes + ID_BYTES)))


def split_held(slots: torch.Tensor, uniq: torch.Tensor, remote: dict[int, list[Piece]]
               ) -> tuple[dict[int, list[Piece]], list[Piece]]:
    """A pull's remote pieces (positions in ``uniq``) less the rows held elsewhere, and
    pieces reading those (``local``: their positions there); ``slots[g]`` is global row
    ``g``'s position, or -1 where it is not held."""
    left, held = {}, []
    for server, pieces in remote.items():
        for q in pieces:
            at = slots.index_select(0, uniq.index_select(0, q.pos))
            hit = at >= 0
            if bool(hit.any()):
                held.append(Piece(-1, q.pos[hit], at[hit].long()))
                q = Piece(q.part, q.pos[~hit], q.local[~hit])
            if q.pos.numel():
                left.setdefault(server, []).append(q)
    return left, held
