"""The package's own block (one layer's message flow graph) in plain torch tensors, and
DGL's ``to_block`` numbering of its nodes, written in torch.

A block has destination nodes and source nodes; the destination nodes come first among the
source nodes, the other sources follow in the order of their first appearance among the
edges (DGL's ``to_block``). With node and edge types, each node has a type and each edge one,
and the numbering holds per node type: a graph without types is the one-type case (DGL's
``_N`` / ``_E``), not a second kind of block. Only DGL's door makes DGL's block of it
(:func:`dglx_dist.dgl.blocks.to_dgl_block`), for a ``dgl.nn`` module or a DGL script.

A block reads and holds rows as DGL's does (:mod:`dglx_dist.graphcore.frames`): ``srcdata``,
``dstdata``, ``edata``, ``srcnodes[ntype].data``, ``dstnodes[ntype].data``,
``edges[etype].data`` (``"_ID"``, DGL's ``dgl.NID`` / ``dgl.EID``, the ids), so the loader's
prefetch, the strategies' degrees and a script's reads are the same on both; its rows go
with it to a device and onto DGL's block at the door. One concept past ~400 lines: the block
and DGL's ``to_block`` numbering that builds it.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import numpy as np
import torch

from dglx_dist.errors import InvalidValueError
from dglx_dist.graphcore.frames import NID, DataView, NodeSpace, TypeLookup, in_form
from dglx_dist.graphcore.types import ONE_ETYPE, ONE_NTYPE

__all__ = ["Block", "IdTable", "relabel", "map_tensors", "plan_of", "group_by", "in_order",
           "UNTYPED", "PLAN"]

UNTYPED = ((ONE_NTYPE,), (ONE_ETYPE,))
"""The node and edge types of a graph without types (DGL's names)."""
PLAN = "_dglx_plan"
"""The attribute of DGL's block that holds the ``plan`` of the package's block it was."""


class IdTable:
    """A table over the node ids below ``num_nodes`` that :func:`relabel` numbers through,
    kept between its calls (a sampler's: its layers' numbering then costs the ids they
    touch, not a fill of every node's entry). Every entry holds ``EMPTY`` between calls
    (:func:`relabel` puts back those it wrote); a call that fails drops its table, and calls
    at once each take their own."""

    EMPTY = torch.iinfo(torch.int32).max
    SPARSE = 16
    """A call reuses a table where its ids are at most ``1 / SPARSE`` of the table's
    entries (else it fills a new one: past that, putting back the entries it wrote, one
    random write each, costs as much as filling them all; measured on products' 2.4M
    nodes, a layer of 17,000 ids took 40% less time through the kept table, one of
    160,000 took about as long)."""

    def __init__(self, num_nodes: int):
        self.num_nodes = num_nodes
        self._free: dict[torch.device, list[torch.Tensor]] = {}

    def take(self, device: torch.device) -> torch.Tensor:
        """A table on ``device``, every entry ``EMPTY`` (int32)."""
        try:  # one pop each: calls at once (a prefetching thread's) never share a table
            return self._free.get(device, []).pop()
        except IndexError:
            return torch.full((self.num_nodes,), self.EMPTY, dtype=torch.int32, device=device)

    def give(self, table: torch.Tensor) -> None:
        """Takes back a table whose entries all hold ``EMPTY`` again."""
        self._free.setdefault(table.device, []).append(table)

    def __getstate__(self) -> dict:
        """A pickled copy (a loader's sampler process's) keeps none of the tables: they
        would go to shared memory, which this one and the copy would both write."""
        return {"num_nodes": self.num_nodes, "_free": {}}


def relabel(dst_nodes: torch.Tensor, *ends: torch.Tensor,
            num_nodes: int | IdTable | None = None, inner: Sequence[torch.Tensor] = ()
            ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """DGL's ``to_block`` numbering: the source nodes are ``dst_nodes`` (unique) followed by
    the other ids of ``ends`` in the order of their first appearance (``ends`` in order);
    returns them and each of ``ends``, then each of ``inner`` (ids that are all among
    ``dst_nodes``, which number nothing new), as indices into them. With ``num_nodes``
    (every id is below it; or an :class:`IdTable` of them, reused), by a table over the ids
    (no sort); else by ``torch.unique``."""
    if num_nodes is None:
        nodes, index = relabel_sorted(dst_nodes, *ends, *inner)
        return nodes, index
    dst = dst_nodes.long()
    new = ends[0].long() if len(ends) == 1 else \
        torch.cat([dst.new_zeros(0), *(e.long() for e in ends)])  # one end: no copy
    num_dst, device = dst.numel(), dst.device
    small = torch.int32 if num_dst + new.numel() < 2 ** 31 else torch.int64  # half the table
    # each id's slot: a destination's rank, else its first position among the ends plus
    # len(dst_nodes) (the minimum over its positions; a rank is below them all)
    where = torch.arange(num_dst, num_dst + new.numel(), dtype=small, device=device)
    size = num_nodes.num_nodes if isinstance(num_nodes, IdTable) else num_nodes
    table = num_nodes if isinstance(num_nodes, IdTable) and small == torch.int32 and \
        (num_dst + new.numel()) * IdTable.SPARSE <= size else None
    first = table.take(device) if table is not None else \
        torch.full((size,), num_dst + new.numel(), dtype=small, device=device)
    first.index_copy_(0, dst, torch.arange(num_dst, dtype=small, device=device))
    first.scatter_reduce_(0, new, where, "amin")
    at = first.index_select(0, new)
    fresh = at == where  # an id's first appearance, not a destination's
    nodes = torch.cat([dst, torch.masked_select(new, fresh)])
    # each slot's number: a destination's rank, then the first appearances in order
    number = torch.cat([torch.arange(num_dst, device=device),
                        torch.cumsum(fresh, 0).add_(num_dst - 1)])
    index = list(torch.split(number.index_select(0, at), [e.numel() for e in ends])) + \
        [first.index_select(0, i.long()).long() for i in inner]
    if table is not None:  # every entry written was a node's: put back
        table.give(first.index_fill_(0, nodes, IdTable.EMPTY))
    return nodes, index


def relabel_sorted(dst_nodes: torch.Tensor, *ends: torch.Tensor
                   ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """:func:`relabel` by ``torch.unique`` (ids of any size)."""
    both = torch.cat([dst_nodes.long(), *(e.long() for e in ends)])
    where = torch.arange(both.numel(), device=both.device)
    unique, inverse = torch.unique(both, return_inverse=True)
    first = torch.full((unique.numel(),), both.numel(), dtype=torch.int64,
                       device=both.device).scatter_reduce_(0, inverse, where, "amin")
    order = torch.argsort(first)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel(), device=order.device)
    nodes, index = unique.index_select(0, order), rank.index_select(0, inverse)
    return nodes, list(torch.split(index[dst_nodes.numel():], [e.numel() for e in ends]))


@dataclasses.dataclass(frozen=True, eq=False)
class Block(TypeLookup):
    """One layer's message flow graph, and the rows on it (its type lookups:
    :class:`~dglx_dist.graphcore.frames.TypeLookup`'s).

    Attributes:
        src_nodes: each source node's id (per-type ids where there are types), type by type,
            the destination nodes of each type first among that type's sources (but where
            ``dst_nodes`` are given).
        src_type: each source node's type (an index into ``ntypes``).
        num_dst: the number of destination nodes of each type.
        src: each edge's source, its index among the source nodes of its type.
        dst: each edge's destination, its index among the destination nodes of its type.
        eid: each edge's id in the user's graph (per-type ids where there are types; None:
            edges the block builds itself, without ids, as DGL's ``create_block``).
        etype: each edge's type (an index into ``canonical_etypes``; the edges come type by
            type).
        ntypes: the node types' names.
        canonical_etypes: the edge types (source type, name, destination type).
        dst_nodes: the destination nodes' ids where they are not the first sources (a block
            of a strategy whose layers name nodes without edges; one type), else None.
        plan: a strategy's plan of this block where the block is static (GraNNDis's row
            exchange of a co-batch's layer), None for a drawn one; DGL's block carries it as
            the attribute ``PLAN`` (:func:`plan_of` reads it from either).
        frames: the rows on the block by side and type (read them through ``srcdata`` and
            the other views below).
        all_etypes: DGL's block keeps every edge type, also those without edges (a
            co-batch's, whose model sees the whole graph's relations); else only the types
            with edges, as DGL's distributed sampler gives them.
        forms: the structure in another library's form, by the library's name, kept by
            whoever made it (DGL's door: DGL's graph index), shared by the local copies: a
            static block is converted once, its formats built once.
        layout: the edges grouped by destination and by source
            (:class:`~dglx_dist.graphcore.aggregate.Layout`), once a conv's sum built it (shared
            by the local copies, as ``forms``; a copy on another device builds its own).
    """

    kind = "block"  # in errors (not a field)
    src_nodes: torch.Tensor
    src_type: torch.Tensor
    num_dst: tuple[int, ...]
    src: torch.Tensor
    dst: torch.Tensor
    eid: torch.Tensor | None
    etype: torch.Tensor
    ntypes: tuple[str, ...] = UNTYPED[0]
    canonical_etypes: tuple[tuple[str, str, str], ...] = UNTYPED[1]
    dst_nodes: torch.Tensor | None = None
    plan: object = None
    all_etypes: bool = False
    frames: dict = dataclasses.field(default_factory=dict, repr=False)
    forms: dict = dataclasses.field(default_factory=dict, repr=False)
    layout: list = dataclasses.field(default_factory=list, repr=False)

    @classmethod
    def untyped(cls, dst_nodes: torch.Tensor, src: torch.Tensor, dst: torch.Tensor,
                eid: torch.Tensor, num_nodes: int | IdTable | None = None) -> "Block":
        """The one-type case of :meth:`typed` (DGL's ``_N`` / ``_E``): the block whose
        destinations are ``dst_nodes`` and whose edges ``src -> dst`` (ids, below
        ``num_nodes`` when it is given: a number, or a reused :class:`IdTable`) have ids
        ``eid``."""
        return cls.numbered(dst_nodes, src, dst, lambda n: (torch.zeros_like(n), n),
                            (dst_nodes.numel(),), eid, torch.zeros_like(src), *UNTYPED,
                            num_nodes=num_nodes)

    @classmethod
    def nodes_only(cls, src_nodes: torch.Tensor, dst_nodes: torch.Tensor) -> "Block":
        """A block without edges from ``src_nodes`` to ``dst_nodes`` (one type)."""
        none = torch.zeros(0, dtype=torch.int64, device=src_nodes.device)
        return cls(src_nodes, torch.zeros_like(src_nodes), (dst_nodes.numel(),), none, none,
                   none, none, dst_nodes=dst_nodes)

    @classmethod
    def typed(cls, dst_nodes: Sequence[torch.Tensor], src: torch.Tensor, dst: torch.Tensor,
              etype: torch.Tensor, eid: torch.Tensor, ntypes: Sequence[str],
              etypes: Sequence[tuple[str, str, str]]) -> "Block":
        """The block whose destinations of type ``t`` are ``dst_nodes[t]`` (per-type ids)
        and whose edges ``src -> dst`` (per-type ids) have types ``etype`` and per-type ids
        ``eid``, edges in the order of their types (a node's key: its id times the number
        of node types, plus its type)."""
        index = {t: i for i, t in enumerate(ntypes)}
        n = len(ntypes)
        src_t, dst_t = (torch.tensor([index[e[end]] for e in etypes], dtype=torch.int64)
                        .index_select(0, etype.long()) for end in (0, 2))
        keyed = torch.cat([d.long() * n + t for t, d in enumerate(dst_nodes)])
        return cls.numbered(keyed, src.long() * n + src_t, dst.long() * n + dst_t,
                            lambda k: (k % n, k.div(n, rounding_mode="floor")),
                            [x.numel() for x in dst_nodes], eid, etype, ntypes, etypes)

    @classmethod
    def numbered(cls, dst_keys: torch.Tensor, src: torch.Tensor, dst: torch.Tensor,
                 decode, num_dst: Sequence[int], eid: torch.Tensor, etype: torch.Tensor,
                 ntypes: Sequence[str], etypes: Sequence[tuple[str, str, str]],
                 num_nodes: int | IdTable | None = None, rows: bool = False) -> "Block":
        """DGL's ``to_block`` of edges ``src -> dst`` of types ``etype`` and ids ``eid``
        (edges in the order of their types), their ends given as node keys (one per node of
        any type, below ``num_nodes`` when it is given: :func:`relabel`'s; with ``rows``,
        ``dst`` as indices into ``dst_keys``), whose destinations are ``dst_keys``
        (``num_dst[t]`` of type ``t``, type by type); ``decode(keys)`` is the keys' ``(type
        index, per-type id)``."""
        inner = () if rows else (dst,)
        nodes, (s, *looked_up) = relabel(dst_keys, src, num_nodes=num_nodes, inner=inner)
        kind, ids = decode(nodes)
        order, offsets = group_by(kind, len(ntypes))  # the sources type by type
        d = looked_up[0] if looked_up else dst.long()
        if int((offsets.diff() > 0).sum()) > 1:  # else every node is its type's by number
            within = _rank_within(kind, order, offsets)  # each one's number among its type's
            s, d = within.index_select(0, s), within.index_select(0, d)
        return cls(in_order(ids, order), in_order(kind, order), tuple(int(x) for x in num_dst),
                   s, d, eid.long(), etype.long(), tuple(ntypes), tuple(tuple(e) for e in etypes))

    def __getattr__(self, name: str):
        """What the package's block lacks of DGL's (``local_scope``, ``update_all``...): one
        line saying where DGL's blocks come from."""
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"the package's Block has no {name!r} (DGL's block has): a model "
                             f"of dgl.nn's modules gets DGL's blocks through "
                             f"dglx_dist.parallelize, a DGL script through the loaders of "
                             f"dglx_dist.dgl (docs/porting.md)")

    @property
    def untyped_form(self) -> bool:
        """Whether the block is of a graph without types (DGL's ``_N`` / ``_E``)."""
        return self.ntypes == UNTYPED[0] and self.canonical_etypes == UNTYPED[1]

    @functools.cached_property
    def num_src(self) -> tuple[int, ...]:
        """The number of source nodes of each type."""
        return _per_kind(self.src_type, len(self.ntypes))

    @property
    def edge_index(self) -> torch.Tensor:
        """The edges as PyG's convs take them (``conv((x_src, x_dst), block.edge_index,
        size=block.size)``): a 2 x E int64 tensor, row 0 each edge's source (its index among
        the source rows), row 1 its destination (among the destination rows), in the block's
        edge order (PyG's ``flow="source_to_target"``). One edge type only: on a block with
        types, per relation (``block.relation(etype).edge_index``)."""
        self._one_relation("edge_index")
        return torch.stack([self.src.long(), self.dst.long()])

    @property
    def size(self) -> tuple[int, int]:
        """``(number of source nodes, number of destination nodes)``: PyG's ``size=`` of a
        bipartite conv on :attr:`edge_index` (one edge type, as it)."""
        self._one_relation("size")
        return self.src_nodes.numel(), self.num_dst[0]

    def _one_relation(self, what: str) -> None:
        if len(self.ntypes) > 1 or len(self.canonical_etypes) > 1:
            raise InvalidValueError(
                f"block.{what}: the block has edge types {[e for _, e, _ in self.canonical_etypes]}"
                f"; expected one: take it per relation, block.relation(etype).{what}")

    @functools.cached_property
    def num_edges_by_type(self) -> tuple[int, ...]:
        """The number of edges of each type."""
        return _per_kind(self.etype, len(self.canonical_etypes))

    def _span(self, etype: int) -> slice:
        """Where the edges of type ``etype`` lie among the block's (they come type by
        type)."""
        start = sum(self.num_edges_by_type[:etype])
        return slice(start, start + self.num_edges_by_type[etype])

    def edges_of(self, etype: int) -> torch.Tensor:
        """The positions of the edges of type ``etype`` among the block's edges."""
        span = self._span(etype)
        return torch.arange(span.start, span.stop, device=self.src.device)

    def num_edges(self, etype=None) -> int:
        return self._count(self.num_edges_by_type, etype, self.etype_index)

    def all_edges(self, form: str = "uv", order: str = "eid", etype=None):
        """``block.edges(form, order, etype)``: edge type ``etype``'s edges as ``(src, dst)``
        indices (``form="all"``: and their positions among the type's edges, DGL's
        ``form="all"``; ``form="eid"``: the positions alone)."""
        span = self._span(self.get_etype_id(etype))  # a wrong name refused
        src, dst = self.src[span], self.dst[span]
        return in_form(form, src, dst, torch.arange(src.numel(), device=src.device))

    def nodes_of(self, ntype: int, dst: bool = False) -> torch.Tensor:
        """The ids of the source (``dst``: destination) nodes of type ``ntype``, in order."""
        if dst and self.dst_nodes is not None:
            return self.dst_nodes
        start = sum(self.num_src[:ntype])  # the sources come type by type
        return self.src_nodes[start:start + (self.num_dst if dst else self.num_src)[ntype]]

    def relation_types(self) -> list[int]:
        """The edge types DGL's block of this one has (DGL's door makes it): those with edges
        (every type where none has one, or with ``all_etypes``)."""
        counts = self.num_edges_by_type
        return [i for i, c in enumerate(counts) if c or self.all_etypes] or \
            list(range(len(counts)))

    def relation(self, etype) -> "Block":
        """The one-type block of edge type ``etype`` (DGL's ``block[stype, etype, dtype]``):
        the ``stype`` sources to the ``dtype`` destinations over that type's edges (their
        ids kept), its rows those of this block (shared, as DGL's)."""
        t = self.etype_index(etype)
        s, d = (self.ntype_index(n) for n in self.canonical_etypes[t][::2])
        at = self._span(t)
        src, dst_nodes = self.nodes_of(s), self.dst_nodes if s == d else self.nodes_of(d, True)
        rel = Block(src, torch.zeros_like(src), (self.num_dst[d],), self.src[at], self.dst[at],
                    None if self.eid is None else self.eid[at],
                    torch.zeros_like(self.etype[at]), dst_nodes=dst_nodes)
        rel.frames.update({("src", 0): self.frame("src", s), ("dst", 0): self.frame("dst", d),
                           ("edge", 0): self.frame("edge", t)})
        return rel

    # -- DGL's reading surface (rows by side and type; see frames.py) ----------------------
    def frame(self, side: str, index: int) -> dict:
        """The rows of the sources (``side`` "src"), destinations ("dst") or edges ("edge")
        of type ``index``: a dict of name -> rows, holding at least their ids (``"_ID"``)."""
        key = (side, index)
        if key not in self.frames:
            if side != "edge":
                self.frames[key] = {NID: self.nodes_of(index, dst=side == "dst")}
            else:
                self.frames[key] = {} if self.eid is None else {NID: self.eid[self._span(index)]}
        return self.frames[key]

    @property
    def srcnodes(self) -> NodeSpace:
        return NodeSpace(self, "src")

    @property
    def dstnodes(self) -> NodeSpace:
        return NodeSpace(self, "dst")

    @property
    def srcdata(self) -> DataView:
        return DataView(self, "src")

    @property
    def dstdata(self) -> DataView:
        return DataView(self, "dst")

    @property
    def srctypes(self) -> list[str]:
        return list(self.ntypes)

    @property
    def dsttypes(self) -> list[str]:
        return list(self.ntypes)

    @property
    def device(self) -> torch.device:
        return self.src_nodes.device

    def num_src_nodes(self, ntype: str | None = None) -> int:
        return self._count(self.num_src, ntype, self.ntype_index)

    def num_dst_nodes(self, ntype: str | None = None) -> int:
        return self._count(self.num_dst, ntype, self.ntype_index)

    def local_var(self) -> "Block":
        """The block with rows of its own (the structure and the rows shared; new rows set on
        it stay its own, as DGL's ``local_var``)."""
        return dataclasses.replace(self, frames={k: dict(v) for k, v in self.frames.items()})

    # -- moves ----------------------------------------------------------------------------
    def to(self, device, non_blocking: bool = False) -> "Block":
        """The block, with its rows, on ``device`` (itself where it is there already)."""
        if self.device == torch.device(device):
            return self
        return _mapped(self, lambda t: t.to(device, non_blocking=non_blocking))

    def cpu(self) -> "Block":
        """The block, with its rows, on the host (DGL's ``cpu``)."""
        return self.to("cpu")

    def pin_memory(self) -> "Block":
        """The block and its rows in pinned memory (for ``to(device, non_blocking=True)``)."""
        return _mapped(self, torch.Tensor.pin_memory)


def plan_of(block) -> object:
    """The ``plan`` of a block (the package's, or DGL's it became); None where it has none."""
    return block.plan if isinstance(block, Block) else getattr(block, PLAN, None)


def _mapped(block: Block, fn) -> Block:
    """``block`` with ``fn`` applied to its tensors and to the tensors among its rows; the
    attributes set on it besides its fields (a loader step's state) go with it, as DGL's
    ``to`` keeps a graph's."""
    moved = map_tensors(dataclasses.replace(block, frames={}, forms={}, layout=[]), fn)
    fields = {f.name for f in dataclasses.fields(block)}
    for name, value in vars(block).items():
        if name not in fields:
            object.__setattr__(moved, name, value)
    moved.frames.update({key: {name: fn(v) if isinstance(v, torch.Tensor) else v
                               for name, v in frame.items()}
                         for key, frame in block.frames.items()})
    return moved


def map_tensors(record, fn):
    """A frozen dataclass with ``fn`` applied to each of its tensor fields."""
    return dataclasses.replace(record, **{
        f.name: fn(getattr(record, f.name)) for f in dataclasses.fields(record)
        if isinstance(getattr(record, f.name), torch.Tensor)})


def _rank_within(kind: torch.Tensor, order: torch.Tensor | None, offsets: torch.Tensor
                 ) -> torch.Tensor:
    """Each item's index among the items of its kind (order kept), from :func:`group_by`'s
    ``order`` and ``offsets`` of ``kind``."""
    first = offsets.index_select(0, kind.long())  # where each item's kind starts
    every = torch.arange(kind.numel(), device=kind.device)
    if order is None:
        return every - first
    rank = torch.empty_like(order)
    rank[order] = every - first.index_select(0, order)
    return rank


def _per_kind(kind: torch.Tensor, kinds: int) -> tuple[int, ...]:
    """How many of ``kind`` (integers in ``[0, kinds)``) have each value (one kind: all of
    them, nothing to count)."""
    if kinds == 1:
        return (kind.numel(),)
    return tuple(torch.bincount(kind, minlength=kinds).tolist())


def group_by(key: torch.Tensor, groups: int) -> tuple[torch.Tensor | None, torch.Tensor]:
    """The positions of ``key`` (integers in ``[0, groups)``) grouped by value, each group
    in position order, and where each group starts (and the end: ``groups + 1`` offsets):
    a block's edges grouped by destination (CSC) or by source. For a key in order already
    (a sampler's destinations) the positions are None: nothing to sort or move. Else, on
    CPU with at most 2^16 groups (a mini-batch block's sources), numpy sorts it as 16-bit
    integers, a radix sort (2-3x torch's sort of 60k-1M keys on the 2-core machine); else
    torch sorts it, as int32 where its values allow (half the bytes: about twice as fast on
    CPU)."""
    if key.numel() < 2 or bool((key[1:] >= key[:-1]).all()):
        order = None
    elif key.device.type == "cpu" and groups <= 1 << 16:
        order = torch.from_numpy(np.argsort(key.numpy().astype(np.uint16), kind="stable"))
    else:
        small = groups < 2 ** 31 and key.numel() < 2 ** 31
        order = torch.argsort(key.int() if small else key.long(), stable=True)
    counts = torch.bincount(key.long(), minlength=groups)
    return order, torch.cat([counts.new_zeros(1), counts.cumsum(0)])


def in_order(values: torch.Tensor, order: torch.Tensor | None) -> torch.Tensor:
    """``values`` in the order :func:`group_by` gave (None: as they are)."""
    return values if order is None else values.index_select(0, order)
