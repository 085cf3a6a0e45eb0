"""Mini-batches of a typed graph: heterogeneous blocks, sampled over a typed partitioning.

A typed partitioning numbers nodes once (partitioned ids, what parts and the node book speak);
users speak per-type ids. :class:`TypeIds` translates: a node type's per-type ids to
partitioned ids and back. :class:`TypedBlockSampler` samples layer by layer as DistDGL does
for heterographs: the frontier's partitioned ids go to their owners, which sample each edge
type's in-edges with that type's fanout (:meth:`PartitionSampler.sample_typed_layer`); the
sampled edges, back in per-type ids, make the package's typed block
(:meth:`~dglx_dist.sampling.block.Block.typed`, numbered as ``dgl.to_block`` numbers a
heterogeneous frontier) whose ``srcdata[dgl.NID]`` / ``dstdata[dgl.NID]`` hold per-type ids
and each edge type's ``edata[dgl.EID]`` its per-type edge ids, as the blocks of DGL's own
``NeighborSampler`` on a heterograph do. Edges a link-prediction batch
excludes (partitioned edge ids) go once to the members that store them, which leave them out
of every layer (:meth:`PartitionSampler.exclusions`).
"""
from __future__ import annotations

from typing import Sequence

import torch

from dglx_dist.errors import InvalidValueError, NotSupportedError, UnknownNameError
from dglx_dist.sampling.block import Block
from dglx_dist.sampling.options import UNIFORM, SampleOptions

__all__ = ["TypeIds", "TypedBlockSampler", "typed_fanouts"]

Etype = tuple[str, str, str]
EMPTY = torch.zeros(0, dtype=torch.int64)


class TypeIds:
    """Per-type ids <-> partitioned ids of a typed partitioning.

    Args:
        ntypes: the node types, in order.
        ntype_offsets: each type's first original homogeneous id (and the total, last).
        orig: ``orig[gid]`` is the original homogeneous id of partitioned id ``gid`` (None:
            the same).
        part: the inverse of ``orig`` (None: the same).
    """

    def __init__(self, ntypes: Sequence[str], ntype_offsets, orig: torch.Tensor | None,
                 part: torch.Tensor | None):
        self.ntypes = list(ntypes)
        self.offsets = torch.tensor([int(o) for o in ntype_offsets])
        self.orig, self.part = orig, part
        self.sizes = {t: int(self.offsets[i + 1] - self.offsets[i])
                      for i, t in enumerate(self.ntypes)}

    @classmethod
    def of(cls, pdir) -> "TypeIds":
        """The translation of a typed partition directory."""
        maps = pdir.relabeling
        orig, part = (torch.from_numpy(m) for m in maps) if maps else (None, None)
        return cls(pdir.types.ntypes, pdir.types.ntype_offsets, orig, part)

    def to_gids(self, ntype: str, ids: torch.Tensor) -> torch.Tensor:
        hom = ids.long() + self.offsets[self.ntypes.index(ntype)]
        return hom if self.part is None else self.part[hom]

    def hom(self, gids: torch.Tensor) -> torch.Tensor:
        """The original homogeneous ids of partitioned ids."""
        return gids.long() if self.orig is None else self.orig[gids.long()]

    def of_gids(self, gids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each partitioned id's type index and per-type id."""
        hom = self.hom(gids)
        t = torch.searchsorted(self.offsets, hom, right=True) - 1
        return t, hom - self.offsets[t]

    def join(self, by_type: dict[str, torch.Tensor]) -> torch.Tensor:
        """The partitioned ids of per-type ids, types in order."""
        return torch.cat([EMPTY] + [self.to_gids(t, by_type[t]) for t in self.ntypes
                                    if t in by_type])

    def split(self, gids: torch.Tensor) -> dict[str, torch.Tensor]:
        """Partitioned ids as per-type ids, by type (order kept within a type)."""
        t, ids = self.of_gids(gids)
        return {name: ids[t == i] for i, name in enumerate(self.ntypes)}


def typed_fanouts(fanouts: Sequence, types) -> tuple[tuple[int, ...], ...]:
    """Per layer (input first), the fanout of each edge type in order (-1: all), from DGL's
    per-layer fanouts: one number for every edge type, or a dict naming every edge type (by
    canonical type, or relation name when unique); ``types``: the partitioning's
    :class:`~dglx_dist.partition.types.GraphTypes`."""
    etypes, out = list(types.canonical_etypes), []
    for layer, f in enumerate(fanouts):
        where = f"NeighborSampler fanouts[{layer}]"
        if not isinstance(f, dict):
            k = -1 if f is None or int(f) < 0 else int(f)
            out.append((k,) * len(etypes))
            continue
        per = {}
        for key, k in f.items():
            try:
                index = types.etype_index(key)
            except UnknownNameError as exc:
                raise InvalidValueError(f"{where}: {exc}") from None
            per[index] = -1 if k is None or int(k) < 0 else int(k)
        missing = [etypes[i] for i in range(len(etypes)) if i not in per]
        if missing:
            raise InvalidValueError(f"{where}: no fanout for edge types {missing}; give every "
                                    "edge type one (0 samples none)")
        out.append(tuple(per[i] for i in range(len(etypes))))
    return tuple(out)


class TypedBlockSampler:
    """Heterogeneous blocks over a typed partitioning (collective, as the sampler it drives).

    Args:
        sampler: the partition sampler, built with the partitioning's edge type offsets.
        ids: the partitioning's :class:`TypeIds`.
        etypes: the canonical edge types, in order.
    """

    def __init__(self, sampler, ids: TypeIds, etypes: Sequence[Etype]):
        self.sampler, self.ids, self.etypes = sampler, ids, [tuple(e) for e in etypes]
        first = {t: int(ids.offsets[i]) for i, t in enumerate(ids.ntypes)}
        self._src_offset, self._dst_offset = (torch.tensor([first[e[end]] for e in self.etypes],
                                                           dtype=torch.int64) for end in (0, 2))
        self._eid_offset = sampler.etype_offsets[:-1]  # each edge type's first homogeneous id

    def draw_blocks(self, seeds: torch.Tensor, fanouts: Sequence[Sequence[int]],
                    exclude: torch.Tensor | None = None,
                    options: SampleOptions = UNIFORM) -> list[Block]:
        """The package's blocks for ``len(fanouts)`` layers whose last destinations are the
        nodes of partitioned ids ``seeds``, by type; ``fanouts[i][e]``: layer i's fanout of
        edge type e. Their node ids are per-type ids. ``exclude``: partitioned edge ids no
        layer may sample (DGL's ``exclude_eids``); ``options``: how each layer draws
        (``prob`` on the edge types that have it; not LABOR's)."""
        if options.labor is not None:
            raise NotSupportedError("LABOR's draws on a graph with edge types are not "
                                    "supported")
        routed = None if exclude is None else self.sampler.exclusions(exclude)
        frontier = self.ids.split(seeds)
        blocks: list[Block] = []
        for layer, fanout in enumerate(reversed(fanouts)):
            src, dst, etype, eid = self.sampler.sample_typed_layer(
                self.ids.join(frontier), fanout, routed, options.stream(layer))
            blocks.insert(0, self._block(frontier, src, dst, etype, eid))
            frontier = {t: blocks[0].nodes_of(i) for i, t in enumerate(self.ids.ntypes)}
        return blocks

    def _block(self, frontier: dict[str, torch.Tensor], src: torch.Tensor, dst: torch.Tensor,
               etype: torch.Tensor, eid: torch.Tensor) -> Block:
        # grouped by edge type (a stable sort keeps each type's edges in order); an edge
        # type says its ends' node types, so only their offsets are subtracted
        etype, order = torch.sort(etype, stable=True)
        s, d = (self.ids.hom(x.index_select(0, order)) for x in (src, dst))
        s, d = s - self._src_offset.index_select(0, etype), \
            d - self._dst_offset.index_select(0, etype)
        eid = eid.index_select(0, order) - self._eid_offset.index_select(0, etype)
        return Block.typed([frontier[t] for t in self.ids.ntypes], s, d, etype, eid,
                           self.ids.ntypes, self.etypes)
