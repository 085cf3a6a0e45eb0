"""The package's own block (one layer's message flow graph) in plain torch tensors, and
DGL's ``to_block`` numbering of its nodes, written in torch.

A block has destination nodes and source nodes; the destination nodes come first among the
source nodes, the other sources follow in the order of their first appearance among the
edges (DGL's ``to_block``). With node and edge types, each node has a type and each edge one,
and the numbering holds per node type: a graph without types is the one-type case (DGL's
``_N`` / ``_E``), not a second kind of block. :meth:`Block.to_dgl` gives DGL's block at the
edge of the package, where DGL is installed.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import torch

__all__ = ["Block", "relabel", "map_tensors", "UNTYPED"]

UNTYPED = (("_N",), (("_N", "_E", "_N"),))
"""The node and edge types of a graph without types (DGL's names)."""


def relabel(dst_nodes: torch.Tensor, *ends: torch.Tensor, num_nodes: int | None = None
            ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """DGL's ``to_block`` numbering: the source nodes are ``dst_nodes`` (unique) followed by
    the other ids of ``ends`` in the order of their first appearance (``ends`` in order);
    returns them and each of ``ends`` as indices into them. With ``num_nodes`` (every id is
    below it), by a table over the ids (no sort); else by ``torch.unique``."""
    both = torch.cat([dst_nodes.long(), *(e.long() for e in ends)])
    where = torch.arange(both.numel(), device=both.device)
    if num_nodes is not None:  # each id's first position, read back where it is first
        first = torch.full((num_nodes,), both.numel(), dtype=torch.int64, device=both.device)
        first.scatter_reduce_(0, both, where, "amin")
        nodes = both[first.index_select(0, both) == where]
        rank = first  # reused: now each id's new number
        rank.index_copy_(0, nodes, torch.arange(nodes.numel(), device=both.device))
        index = rank.index_select(0, both)
    else:
        unique, inverse = torch.unique(both, return_inverse=True)
        first = torch.full((unique.numel(),), both.numel(), dtype=torch.int64,
                           device=both.device).scatter_reduce_(0, inverse, where, "amin")
        order = torch.argsort(first)
        rank = torch.empty_like(order)
        rank[order] = torch.arange(order.numel(), device=order.device)
        nodes, index = unique.index_select(0, order), rank.index_select(0, inverse)
    return nodes, list(torch.split(index[dst_nodes.numel():], [e.numel() for e in ends]))


@dataclasses.dataclass(frozen=True)
class Block:
    """One layer's message flow graph.

    Attributes:
        src_nodes: each source node's id (per-type ids where there are types), the
            destination nodes of each type first among that type's sources.
        src_type: each source node's type (an index into ``ntypes``).
        num_dst: the number of destination nodes of each type.
        src: each edge's source, its index among the source nodes of its type.
        dst: each edge's destination, its index among the destination nodes of its type.
        eid: each edge's id in the user's graph (per-type ids where there are types).
        etype: each edge's type (an index into ``etypes``).
        ntypes: the node types' names.
        etypes: the canonical edge types.
    """

    src_nodes: torch.Tensor
    src_type: torch.Tensor
    num_dst: tuple[int, ...]
    src: torch.Tensor
    dst: torch.Tensor
    eid: torch.Tensor
    etype: torch.Tensor
    ntypes: tuple[str, ...] = UNTYPED[0]
    etypes: tuple[tuple[str, str, str], ...] = UNTYPED[1]

    @classmethod
    def untyped(cls, dst_nodes: torch.Tensor, src: torch.Tensor, dst: torch.Tensor,
                eid: torch.Tensor, num_nodes: int | None = None) -> "Block":
        """The block whose destinations are ``dst_nodes`` and whose edges ``src -> dst``
        (ids, below ``num_nodes`` when it is given) have ids ``eid``."""
        nodes, (s, d) = relabel(dst_nodes, src, dst, num_nodes=num_nodes)
        zeros = torch.zeros_like
        return cls(nodes, zeros(nodes), (dst_nodes.numel(),), s, d, eid.long(), zeros(s))

    @classmethod
    def typed(cls, dst_nodes: Sequence[torch.Tensor], src: torch.Tensor, dst: torch.Tensor,
              etype: torch.Tensor, eid: torch.Tensor, ntypes: Sequence[str],
              etypes: Sequence[tuple[str, str, str]]) -> "Block":
        """The block whose destinations of type ``t`` are ``dst_nodes[t]`` (per-type ids)
        and whose edges ``src -> dst`` (per-type ids) have types ``etype`` and per-type ids
        ``eid``, edges in the order of their types."""
        etypes = tuple(tuple(e) for e in etypes)
        index = {t: i for i, t in enumerate(ntypes)}
        src_t, dst_t = (torch.tensor([index[e[end]] for e in etypes], dtype=torch.int64)
                        .index_select(0, etype.long()) for end in (0, 2))
        keyed = torch.cat([d.long() * len(ntypes) + t for t, d in enumerate(dst_nodes)])
        nodes, (s, d) = relabel(keyed, src.long() * len(ntypes) + src_t,
                                dst.long() * len(ntypes) + dst_t)
        kind = nodes % len(ntypes)
        within = _rank_within(kind, len(ntypes))
        return cls(nodes.div(len(ntypes), rounding_mode="floor"), kind,
                   tuple(int(x.numel()) for x in dst_nodes), within.index_select(0, s),
                   within.index_select(0, d), eid.long(), etype.long(), tuple(ntypes), etypes)

    @property
    def num_src(self) -> tuple[int, ...]:
        """The number of source nodes of each type."""
        return tuple(torch.bincount(self.src_type, minlength=len(self.ntypes)).tolist())

    def nodes_of(self, ntype: int, dst: bool = False) -> torch.Tensor:
        """The ids of the source (``dst``: destination) nodes of type ``ntype``, in order."""
        ids = self.src_nodes[self.src_type == ntype]
        return ids[:self.num_dst[ntype]] if dst else ids

    def to(self, device, non_blocking: bool = False) -> "Block":
        """The block on ``device``."""
        return map_tensors(self, lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> "Block":
        """The block in pinned memory (for ``to(device, non_blocking=True)``)."""
        return map_tensors(self, torch.Tensor.pin_memory)

    def to_dgl(self, kept_etypes: bool = True):
        """DGL's block of the same structure: ``srcdata`` / ``dstdata[dgl.NID]`` the ids,
        ``edata[dgl.EID]`` the edges' ids. With types, only the edge types with edges are
        kept (``kept_etypes``; every type when none has one), as DGL's distributed sampler
        gives them."""
        import dgl  # noqa: PLC0415 - the edge: only here does a block become DGL's

        if self.ntypes == UNTYPED[0] and self.etypes == UNTYPED[1]:
            block = dgl.create_block((self.src, self.dst), num_src_nodes=self.src_nodes.numel(),
                                     num_dst_nodes=self.num_dst[0])
            block.srcdata[dgl.NID] = self.src_nodes
            block.dstdata[dgl.NID] = self.src_nodes[:self.num_dst[0]]
            block.edata[dgl.EID] = self.eid
            return block
        return self._typed_dgl(dgl, kept_etypes)

    def _typed_dgl(self, dgl, kept_etypes: bool):
        counts = torch.bincount(self.etype, minlength=len(self.etypes)).tolist()
        kept = [i for i, c in enumerate(counts) if c or not kept_etypes] or \
            list(range(len(counts)))
        cut = list(zip(*(torch.split(x, counts) for x in (self.src, self.dst, self.eid))))
        block = dgl.create_block({self.etypes[i]: cut[i][:2] for i in kept},
                                 num_src_nodes=dict(zip(self.ntypes, self.num_src)),
                                 num_dst_nodes=dict(zip(self.ntypes, self.num_dst)))
        for t, name in enumerate(self.ntypes):
            block.srcnodes[name].data[dgl.NID] = self.nodes_of(t)
            block.dstnodes[name].data[dgl.NID] = self.nodes_of(t, dst=True)
        for i in kept:
            block.edges[self.etypes[i]].data[dgl.EID] = cut[i][2]
        return block


def map_tensors(record, fn):
    """A frozen dataclass with ``fn`` applied to each of its tensor fields."""
    return dataclasses.replace(record, **{
        f.name: fn(getattr(record, f.name)) for f in dataclasses.fields(record)
        if isinstance(getattr(record, f.name), torch.Tensor)})


def _rank_within(kind: torch.Tensor, types: int) -> torch.Tensor:
    """Each item's index among the items of its kind (order kept)."""
    order = torch.argsort(kind, stable=True)
    count = torch.bincount(kind, minlength=types)
    first = torch.cumsum(count, 0) - count
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel(), device=order.device) - \
        first.index_select(0, kind.index_select(0, order))
    return rank
