"""How a layer draws a node's in-edges beyond its fanout: DGL ``NeighborSampler``'s ``prob``,
``mask`` and ``replace``, and where a sampler finds the edge weights they name.

DGL reads ``prob`` (or ``mask``) from the graph's edge data at every draw. Over partitions,
each edge's row lives with the part that stores the edge (its destination's owner), which is
also the member that samples that node's in-edges, so the weights never travel: the owner
passes its own rows to DGL's ``sample_neighbors``. :class:`PartEdgeWeights` reads them from
the graph's KVStore when it holds them (the store's local tensor: a write through
``g.edata[name][eids] = ...`` is seen by the next draw, as in DGL), else from the partition's
files (read once).
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from dglx_dist.errors import InvalidValueError
from dglx_dist.kvstore.base import EDGE_PREFIX, KVStore, edge_key

__all__ = ["SampleOptions", "UNIFORM", "EdgeWeights", "PartEdgeWeights", "check_weights"]

EdgeWeights = Callable[[str], torch.Tensor]
"""A sampler's edge data by name: one row per edge of the graph it samples, in its order."""


@dataclasses.dataclass(frozen=True)
class SampleOptions:
    """How each layer draws a node's in-edges, beyond its fanout.

    Attributes:
        prob: the edge data whose values weigh each in-edge's chance of being drawn
            (unnormalised; DGL's ``prob``), or whose booleans say which in-edges may be
            drawn (DGL's ``mask``); None: uniform.
        replace: draw with replacement: a node with any in-edge gets exactly ``fanout``.
        labor: LABOR's draw (as DGL's ``sample_labors``, no importance sampling) with these
            random seeds (one, or two with the second's ``seed2`` share), the same on every
            member, so each source node rolls one variate wherever its edges are stored;
            None: DGL's ``sample_neighbors``.
        seed2: ``seed2_contribution`` of ``sample_labors``.
        seed: the seed of this draw's random numbers (a loader gives each step its own, so
            a step draws the same wherever and whenever it is taken); None: torch's global
            generator.
    """

    prob: str | None = None
    replace: bool = False
    labor: tuple[int, ...] | None = None
    seed2: float = 0.0
    seed: int | None = None

    def stream(self, index: int) -> "SampleOptions":
        """The options of the ``index``-th draw made under these (a layer's, or one call's
        within a layer): the same, with a seed of its own derived from this one, so no two
        draws of a step share their random numbers."""
        if self.seed is None:
            return self
        return dataclasses.replace(self, seed=(self.seed * 1_000_003 + index) % 2**62)


UNIFORM = SampleOptions()


class PartEdgeWeights:
    """Part ``part``'s edge data by name (an :data:`EdgeWeights`), row j for its edge j: the
    store's local rows when it holds them (live), else read from ``pdir``'s files on first
    use. A copy sent to a loader's sampler process holds the store's local rows of edge data
    (the same memory, shared: the rank's writes are seen there too) in place of the store."""

    def __init__(self, pdir, part: int, store: KVStore | None = None):
        self.pdir, self.part, self.store = pdir, part, store
        self._read: dict[str, torch.Tensor] = {}

    def __call__(self, name: str) -> torch.Tensor:
        store = self.store
        if store is not None and edge_key(name) in store.names():
            local = store.local_parts(edge_key(name))
            if self.part in local:
                return local[self.part]
        if name not in self._read:
            files = self.pdir.load_edge_data(self.part)
            self._read.update((k, torch.from_numpy(v)) for k, v in files.items()
                              if k not in self._read)
        if name not in self._read:
            raise InvalidValueError(f"edge data {name!r} is not in {self.pdir.path}; it has "
                                    f"{sorted(self._read)}")
        return self._read[name]

    def __getstate__(self) -> dict:
        held = dict(self._read)
        if self.store is not None:
            for key in self.store.names():
                local = self.store.local_parts(key) if key.startswith(EDGE_PREFIX) else {}
                if self.part in local:
                    held[key[len(EDGE_PREFIX):]] = local[self.part]
        return {"pdir": self.pdir, "part": self.part, "store": None, "_read": held}


def check_weights(values: torch.Tensor, what: str) -> None:
    """Refuses edge data that cannot weigh a draw: not one number (or boolean) per edge,
    negative or not finite (DGL leaves the draw undefined there)."""
    if values.dim() != 1 and not (values.dim() == 2 and values.shape[1] == 1):
        raise InvalidValueError(f"{what}: edge data of shape {tuple(values.shape)}; expected "
                                "one number per edge")
    if values.dtype == torch.bool:
        return
    if not values.dtype.is_floating_point:
        raise InvalidValueError(f"{what}: edge data of dtype {values.dtype}; expected floats "
                                "(prob) or booleans (mask)")
    bad = ~torch.isfinite(values) | (values < 0)
    if bool(bad.any()):
        first = values.reshape(-1)[bad.reshape(-1)][:3].tolist()
        raise InvalidValueError(f"{what}: {int(bad.sum())} edge weights are negative or not "
                                f"finite (e.g. {first}); expected finite weights >= 0")
