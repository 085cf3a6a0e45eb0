"""The ids of a partitioning's node and edge types, as blocks speak them.

A typed partitioning numbers nodes once (partitioned ids, what parts and the node book speak);
users speak per-type ids. :class:`TypeIds` translates: a node type's per-type ids to
partitioned ids and back, and a layer's drawn edges (partitioned node ids, homogeneous edge
ids) into the package's typed block (:meth:`~dglx_dist.graphcore.block.Block.typed`, numbered
as ``dgl.to_block`` numbers a heterogeneous frontier) whose ``srcdata[dgl.NID]`` /
``dstdata[dgl.NID]`` hold per-type ids and each edge type's ``edata[dgl.EID]`` its per-type
edge ids, as the blocks of DGL's own ``NeighborSampler`` on a heterograph do. A partitioning
without types is the one-type case (DGL's ``_N`` / ``_E``, :meth:`TypeIds.one`) whose ids are
the partitioned ids themselves: nothing is translated, and its block is numbered by a table
over the ids (:meth:`~dglx_dist.graphcore.block.Block.untyped`).
"""
from __future__ import annotations

from typing import Sequence

import torch

from dglx_dist.graphcore.block import UNTYPED, Block, IdTable

__all__ = ["TypeIds"]

EMPTY = torch.zeros(0, dtype=torch.int64)


class TypeIds:
    """Per-type ids <-> partitioned ids of a partitioning.

    Args:
        ntypes: the node types, in order.
        ntype_offsets: each type's first original homogeneous id (and the total, last).
        orig: ``orig[gid]`` is the original homogeneous id of partitioned id ``gid`` (None:
            the same).
        part: the inverse of ``orig`` (None: the same).
        etypes: the canonical edge types, in order.
        etype_offsets: each edge type's first homogeneous edge id (and the total, last).
    """

    def __init__(self, ntypes: Sequence[str], ntype_offsets, orig: torch.Tensor | None,
                 part: torch.Tensor | None, etypes: Sequence[tuple[str, str, str]] = UNTYPED[1],
                 etype_offsets=(0, 0)):
        self.ntypes, self.etypes = list(ntypes), tuple(tuple(e) for e in etypes)
        self.offsets = torch.tensor([int(o) for o in ntype_offsets])
        self.etype_offsets = torch.tensor([int(o) for o in etype_offsets])
        self.orig, self.part = orig, part
        self.sizes = {t: int(self.offsets[i + 1] - self.offsets[i])
                      for i, t in enumerate(self.ntypes)}
        self.untyped = (tuple(self.ntypes), self.etypes) == UNTYPED and orig is None
        index = {t: i for i, t in enumerate(self.ntypes)}
        self._src_offset, self._dst_offset = (self.offsets.index_select(0, torch.tensor(
            [index[e[end]] for e in self.etypes], dtype=torch.int64)) for end in (0, 2))

    @classmethod
    def of(cls, pdir) -> "TypeIds":
        """The translation of a partition directory (:meth:`one` without types)."""
        types = pdir.types
        if types is None:
            return cls.one(pdir.num_nodes)
        maps = pdir.relabeling
        orig, part = (torch.from_numpy(m) for m in maps) if maps else (None, None)
        return cls(types.ntypes, types.ntype_offsets, orig, part, types.canonical_etypes,
                   types.etype_offsets)

    @classmethod
    def one(cls, num_nodes: int) -> "TypeIds":
        """The one type of a graph without types (DGL's ``_N`` / ``_E``): its per-type ids
        are the partitioned ids."""
        return cls(UNTYPED[0], (0, num_nodes), None, None)

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

    def join(self, by_type: Sequence[torch.Tensor]) -> torch.Tensor:
        """The partitioned ids of per-type ids, by type index."""
        if self.untyped:
            return by_type[0]
        return torch.cat([EMPTY] + [self.to_gids(t, ids) for t, ids in zip(self.ntypes, by_type)])

    def split(self, gids: torch.Tensor) -> list[torch.Tensor]:
        """Partitioned ids as per-type ids, by type index (order kept within a type)."""
        if self.untyped:
            return [gids]
        t, ids = self.of_gids(gids)
        return [ids[t == i] for i in range(len(self.ntypes))]

    def block(self, frontier: Sequence[torch.Tensor], src: torch.Tensor, dst: torch.Tensor,
              eid: torch.Tensor, etype: torch.Tensor, num_nodes: int | IdTable | None = None
              ) -> Block:
        """The block of a layer's drawn edges ``src -> dst`` (partitioned ids, below
        ``num_nodes``: a number, or an :class:`~dglx_dist.graphcore.block.IdTable` of them)
        of types ``etype`` and homogeneous ids ``eid``, whose destinations are ``frontier``
        (per-type ids, by type index): in per-type ids."""
        if self.untyped:
            return Block.untyped(frontier[0], src, dst, eid, num_nodes)
        # grouped by edge type (a stable sort keeps each type's edges in order); an edge
        # type says its ends' node types, so only their offsets are subtracted
        etype, order = torch.sort(etype, stable=True)
        s, d = (self.hom(x.index_select(0, order)) for x in (src, dst))
        s, d = s - self._src_offset.index_select(0, etype), \
            d - self._dst_offset.index_select(0, etype)
        eid = eid.index_select(0, order) - self.etype_offsets.index_select(0, etype)
        return Block.typed(frontier, s, d, etype, eid, self.ntypes, self.etypes)
