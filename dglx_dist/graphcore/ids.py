"""The ids of a partitioning's node and edge types, as blocks speak them.

A typed partitioning numbers nodes once (partitioned ids, what parts and the node book speak);
users speak per-type ids. :class:`TypeIds` translates: a node type's per-type ids to
partitioned ids and back, and a layer's drawn edges (partitioned node ids, homogeneous edge
ids) into the package's typed block (:meth:`~dglx_dist.graphcore.block.Block.typed`, numbered
as ``dgl.to_block`` numbers a heterogeneous frontier) whose ``srcdata[dgl.NID]`` /
``dstdata[dgl.NID]`` hold per-type ids and each edge type's ``edata[dgl.EID]`` its per-type
edge ids, as the blocks of DGL's own ``NeighborSampler`` on a heterograph do. A block is
numbered by a table over the partitioned ids. A partitioning without types is the one-type
case (DGL's ``_N`` / ``_E``, :meth:`TypeIds.one`) whose per-type ids are the partitioned ids.
"""
from __future__ import annotations

import copy
from typing import Sequence

import torch

from dglx_dist.graphcore.block import UNTYPED, Block, IdTable, group_by, in_order

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
        # DGL's graph without types (its user's edge: tensors, not dicts by type)
        self.untyped = (tuple(self.ntypes), self.etypes) == UNTYPED and orig is None

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

    def to(self, device: torch.device) -> "TypeIds":
        """The translation with its tables on ``device``: what a sampler drawing there
        translates with (the ids it is given and returns are on ``device``)."""
        other = copy.copy(self)
        for name in ("offsets", "etype_offsets", "orig", "part"):
            table = getattr(self, name)
            setattr(other, name, None if table is None else table.to(device))
        return other

    def hom(self, gids: torch.Tensor) -> torch.Tensor:
        """The original homogeneous ids of partitioned ids."""
        return gids.long() if self.orig is None else self.orig[gids.long()]

    def of_gids(self, gids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each partitioned id's type index and per-type id."""
        hom = self.hom(gids)
        t = torch.searchsorted(self.offsets[1:-1], hom, right=True)
        return t, hom - self.offsets.index_select(0, t)

    def etype_of(self, eid: torch.Tensor) -> torch.Tensor:
        """Each homogeneous edge id's type index."""
        return torch.searchsorted(self.etype_offsets[1:-1], eid.long(), right=True)

    def join(self, by_type: Sequence[torch.Tensor]) -> torch.Tensor:
        """The partitioned ids of per-type ids, by type index."""
        hom = torch.cat([EMPTY.to(self.offsets.device)] +
                        [ids.long() + self.offsets[t] for t, ids in enumerate(by_type)])
        return hom if self.part is None else self.part[hom]

    def split(self, gids: torch.Tensor) -> list[torch.Tensor]:
        """Partitioned ids as per-type ids, by type index (order kept within a type)."""
        t, ids = self.of_gids(gids)
        return [ids[t == i] for i in range(len(self.ntypes))]

    def block(self, frontier: Sequence[torch.Tensor], nodes: torch.Tensor, src: torch.Tensor,
              row: torch.Tensor, eid: torch.Tensor, num_nodes: int | IdTable | None = None
              ) -> Block:
        """The block of a layer's drawn edges ``src -> nodes[row]`` (partitioned ids, below
        ``num_nodes``: a number, or an :class:`~dglx_dist.graphcore.block.IdTable` of them)
        of homogeneous ids ``eid``, whose destinations are ``frontier`` (per-type ids, by
        type index; ``nodes``: their partitioned ids, :meth:`join`'s): in per-type ids."""
        etype = self.etype_of(eid)
        order, _ = group_by(etype, len(self.etypes))  # each type's edges in order
        src, row, eid, etype = (in_order(x, order) for x in (src, row, eid, etype))
        eid = eid - self.etype_offsets.index_select(0, etype)
        return Block.numbered(nodes, src, row, self.of_gids, [f.numel() for f in frontier],
                              eid, etype, self.ntypes, self.etypes, num_nodes, rows=True)
