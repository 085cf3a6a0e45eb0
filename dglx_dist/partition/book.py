"""The owner / local-id vocabulary of a partitioning, vectorised.

A *node book* answers, for global node ids: which part owns them (``owner``), where they sit in
the owner's core list (``to_local``), and which ids a part owns (``core_ids``):
:class:`RangeBook` (``metis``: part ``p`` owns ``[offsets[p], offsets[p+1])``) or
:class:`HashBook` (``hash``: a seeded hash of the id; its local ids from a table made on the
first lookup; docs/partitioners.md). :class:`FeatureSlices` splits the feature columns into
contiguous slices, one per part (``feature_dim``). Methods accept numpy arrays or torch
tensors and answer in the same kind.
"""
from __future__ import annotations

import abc
from typing import Any, Iterator, Sequence, Union

import numpy as np
import torch

from dglx_dist.errors import IdOutOfRangeError, InvalidValueError

__all__ = ["NodeBook", "RangeBook", "HashBook", "FeatureSlices", "hash_ids", "book_from_json"]

Ids = Union[np.ndarray, torch.Tensor]
_BLOCK = 1 << 22
"""Ids a hash book hashes at once where it goes over every id (its core ids, its local ids)."""
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def hash_ids(ids: np.ndarray, seed: int) -> np.ndarray:
    """SplitMix64 finaliser of ``ids`` mixed with ``seed``: uniform uint64, vectorised."""
    offset = np.uint64(((int(seed) + 1) * int(_GOLDEN)) & 0xFFFFFFFFFFFFFFFF)
    x = np.asarray(ids).astype(np.uint64) + offset
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def _as_numpy(ids: Ids) -> tuple[np.ndarray, bool]:
    if isinstance(ids, torch.Tensor):
        return ids.detach().cpu().numpy().astype(np.int64, copy=False), True
    return np.asarray(ids, dtype=np.int64), False


def _like(out: np.ndarray, as_torch: bool) -> Ids:
    return torch.from_numpy(np.ascontiguousarray(out)) if as_torch else out


def _bounds(values: Sequence[int] | np.ndarray, what: str) -> np.ndarray:
    """``values`` as int64 bounds of consecutive ranges: two or more, from 0, not decreasing."""
    arr = np.asarray(values, dtype=np.int64)
    if arr.ndim != 1 or arr.size < 2 or arr[0] != 0 or np.any(np.diff(arr) < 0):
        raise InvalidValueError(f"{what} must start at 0 and not decrease; got {arr}")
    return arr


class NodeBook(abc.ABC):
    """Maps global node ids to owning parts and local ids."""

    kind: str = ""

    def __init__(self, num_nodes: int, num_parts: int):
        self.num_nodes = int(num_nodes)
        self.num_parts = int(num_parts)

    def owner(self, ids: Ids) -> Ids:
        """The part owning each id."""
        arr, t = _as_numpy(ids)
        self._check(arr)
        return _like(self._owner(arr), t)

    def to_local(self, ids: Ids) -> Ids:
        """Each id's index in its owner's core list."""
        arr, t = _as_numpy(ids)
        self._check(arr)
        return _like(self._to_local(arr), t)

    def core_ids(self, part: int) -> np.ndarray:
        """The ids part ``part`` owns, increasing."""
        self._check_part(part)
        return self._core_ids(part)

    def part_sizes(self) -> np.ndarray:
        """Number of core nodes per part."""
        return np.array([self.core_ids(p).size for p in range(self.num_parts)], dtype=np.int64)

    @abc.abstractmethod
    def to_json(self) -> dict[str, Any]:
        """JSON-ready description (goes into the partition manifest)."""

    @abc.abstractmethod
    def _owner(self, ids: np.ndarray) -> np.ndarray: ...

    @abc.abstractmethod
    def _to_local(self, ids: np.ndarray) -> np.ndarray: ...

    @abc.abstractmethod
    def _core_ids(self, part: int) -> np.ndarray: ...

    def _check(self, ids: np.ndarray) -> None:
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_nodes):
            bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
            raise IdOutOfRangeError(f"node id {bad} is outside [0, {self.num_nodes})")

    def _check_part(self, part: int) -> None:
        if not 0 <= part < self.num_parts:
            raise IdOutOfRangeError(f"part {part} is outside [0, {self.num_parts})")


class RangeBook(NodeBook):
    """Part ``p`` owns ids ``[offsets[p], offsets[p+1])``."""

    kind = "range"

    def __init__(self, offsets: Sequence[int] | np.ndarray):
        offsets = _bounds(offsets, "range offsets")
        super().__init__(int(offsets[-1]), offsets.size - 1)
        self.offsets = offsets

    def _owner(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.offsets, ids, side="right") - 1

    def _to_local(self, ids: np.ndarray) -> np.ndarray:
        return ids - self.offsets[self._owner(ids)]

    def _core_ids(self, part: int) -> np.ndarray:
        return np.arange(self.offsets[part], self.offsets[part + 1], dtype=np.int64)

    def part_sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "offsets": [int(o) for o in self.offsets]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "RangeBook":
        return cls(d["offsets"])


class HashBook(NodeBook):
    """Owner = ``hash_ids(id, seed) % num_parts``; ids are not relabeled."""

    kind = "hash"

    def __init__(self, num_nodes: int, num_parts: int, seed: int):
        if num_parts < 1:
            raise InvalidValueError(f"num_parts must be >= 1, got {num_parts}")
        super().__init__(num_nodes, num_parts)
        self.seed = int(seed)
        self._cores: dict[int, np.ndarray] = {}
        self._locals: np.ndarray | None = None

    def _owner(self, ids: np.ndarray) -> np.ndarray:
        return (hash_ids(ids, self.seed) % np.uint64(self.num_parts)).astype(np.int64)

    def _to_local(self, ids: np.ndarray) -> np.ndarray:
        return self._local_table()[ids].astype(np.int64)

    def _owners(self) -> Iterator[tuple[int, np.ndarray]]:
        """``(first id, owners)`` of every block of :data:`_BLOCK` ids in turn (no full-size
        temporaries)."""
        for lo in range(0, self.num_nodes, _BLOCK):
            yield lo, self._owner(np.arange(lo, min(lo + _BLOCK, self.num_nodes)))

    def _local_table(self) -> np.ndarray:
        """Every id's index in its owner's core list (int32 where the ids fit), made on the
        first lookup: 4 bytes a node, for a gather per lookup where a binary search of the
        owner's sorted ids took 30-100x as long (docs/partitioners.md)."""
        if self._locals is None:  # (two threads may both make it: the same values)
            dtype = np.int32 if self.num_nodes <= np.iinfo(np.int32).max else np.int64
            table, taken = np.empty(self.num_nodes, dtype=dtype), [0] * self.num_parts
            for lo, owner in self._owners():
                for p in range(self.num_parts):  # the part's ids of the block, increasing
                    mine = np.flatnonzero(owner == p) + lo
                    table[mine] = np.arange(taken[p], taken[p] + mine.size, dtype=dtype)
                    taken[p] += mine.size
            self._locals = table
        return self._locals

    def _core_ids(self, part: int) -> np.ndarray:
        if part not in self._cores:
            found = [np.flatnonzero(owner == part) + lo for lo, owner in self._owners()]
            self._cores[part] = np.concatenate(found) if found else np.zeros(0, np.int64)
        return self._cores[part]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "num_nodes": self.num_nodes, "num_parts": self.num_parts,
                "seed": self.seed}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "HashBook":
        return cls(d["num_nodes"], d["num_parts"], d["seed"])


class FeatureSlices:
    """Contiguous column slices of a ``feat_dim``-wide feature matrix, one per part."""

    def __init__(self, bounds: Sequence[int] | np.ndarray):
        self.bounds = _bounds(bounds, "feature slice bounds")

    @classmethod
    def even(cls, feat_dim: int, num_parts: int) -> "FeatureSlices":
        """Splits ``feat_dim`` columns into ``num_parts`` slices differing by at most one column."""
        if not 1 <= num_parts <= feat_dim:
            raise InvalidValueError(f"cannot split {feat_dim} feature columns into {num_parts} "
                                    f"slices; expected 1 <= parts <= {feat_dim}")
        base, extra = divmod(feat_dim, num_parts)
        widths = [base + (1 if p < extra else 0) for p in range(num_parts)]
        return cls(np.concatenate([[0], np.cumsum(widths)]))

    @property
    def feat_dim(self) -> int:
        return int(self.bounds[-1])

    @property
    def num_parts(self) -> int:
        return self.bounds.size - 1

    def slice(self, part: int) -> slice:
        """Columns of part ``part``."""
        return slice(int(self.bounds[part]), int(self.bounds[part + 1]))

    def to_json(self) -> list[int]:
        return [int(b) for b in self.bounds]


_BOOK_KINDS = {cls.kind: cls for cls in (RangeBook, HashBook)}


def book_from_json(d: dict[str, Any]) -> NodeBook:
    """Rebuilds a node book from :meth:`NodeBook.to_json` output.

    Raises:
        ValueError: an unknown kind or missing/invalid fields.
    """
    kind = d.get("kind") if isinstance(d, dict) else None
    if kind not in _BOOK_KINDS:
        raise InvalidValueError(f"unknown node book kind {kind!r}; expected one of "
                                f"{sorted(_BOOK_KINDS)}")
    try:
        return _BOOK_KINDS[kind].from_json(d)
    except (KeyError, TypeError) as exc:
        raise InvalidValueError(f"node book of kind {kind!r} is missing or has a bad field: "
                                f"{exc}") from None
