"""Node types of a :class:`~dglx_dist.api.DistGraph`: DGL's heterograph names over our partitions.

A typed partitioning numbers every node once, in one homogeneous id space
(:mod:`dglx_dist.partition.types`); users keep their per-type ids. Each node type gets its own
row space, as DistDGL's per-type partition policies do: a type's rows are ordered by part and,
inside a part, by local id, so part ``p`` holds one contiguous range of them (a
:class:`~dglx_dist.partition.book.RangeBook` per type). A :class:`NodeSpace` maps a type's
per-type ids to those rows; ``g.nodes[ntype].data[name]`` reads and writes through it, and
``g.get_node_partition_policy(ntype)`` hands it to ``DistTensor`` and ``DistEmbedding``.

A graph without types has one space, every node, under DGL's default type name ``"_N"``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from dglx_dist.api.ndata import MASKS, NodeDataView, NodeSpace
from dglx_dist.errors import InvalidValueError, UnknownNameError
from dglx_dist.kvstore import ColumnPolicy, RowPolicy
from dglx_dist.partition.book import RangeBook

if TYPE_CHECKING:
    from dglx_dist.api.graph import DistGraph
    from dglx_dist.partition.load import PartitionDir

__all__ = ["typed_spaces", "NodeTypeView", "store_typed_node_data", "space_for"]


def typed_spaces(pdir: PartitionDir) -> dict[str, NodeSpace]:
    """One :class:`NodeSpace` per node type of a typed partition directory."""
    types = pdir.types
    counts = np.stack([np.asarray(pdir.ntype_counts(p), np.int64)
                       for p in range(pdir.num_parts)])  # (parts, types)
    spaces = {}
    for t, ntype in enumerate(types.ntypes):
        offsets = np.concatenate([[0], np.cumsum(counts[:, t])]).astype(np.int64)
        lo, hi = int(types.ntype_offsets[t]), int(types.ntype_offsets[t + 1])
        to_rows = np.full(hi - lo, -1, np.int64)
        to_rows[pdir.type_rows(ntype)] = np.arange(offsets[-1], dtype=np.int64)
        if (to_rows < 0).any():  # every node is some part's core node, once
            raise InvalidValueError(f"{pdir.path}: node type {ntype!r} has nodes no part owns")
        spaces[ntype] = NodeSpace(ntype, RowPolicy(RangeBook(offsets)), hi - lo,
                                  torch.from_numpy(to_rows), lo, typed=True,
                                  names=pdir.ndata_names)
    return spaces


class NodeTypeView:
    """``g.nodes[ntype]``: DGL's node-type view; ``.data[name]`` is one typed data view."""

    def __init__(self, graph: DistGraph, space: NodeSpace):
        self._g, self.space = graph, space

    @property
    def data(self) -> "TypedNodeData":
        return TypedNodeData(self._g, self.space)

    def __repr__(self) -> str:
        return f"NodeTypeView({self.space.ntype!r}, num_nodes={self.space.num_nodes})"


class TypedNodeData:
    """``g.nodes[ntype].data``: the names node type ``ntype`` has."""

    def __init__(self, graph: DistGraph, space: NodeSpace):
        self._g, self._space = graph, space

    def keys(self) -> list[str]:
        prefix = self._space.key("")
        return [self._space.shown(n[len(prefix):]) for n in self._g.store.names()
                if n.startswith(prefix)]

    def __contains__(self, name: object) -> bool:  # a renamed stored name reaches it too
        keys = self.keys()
        return name in keys or self._space.shown(name) in keys

    def __iter__(self):
        return iter(self.keys())

    def __getitem__(self, name: str) -> NodeDataView:
        if name not in self:
            raise UnknownNameError(f"g.nodes[{self._space.ntype!r}].data[{name!r}]: node type "
                                   f"{self._space.ntype!r} has no such data; it has "
                                   f"{self.keys()}")
        return NodeDataView(self._g, name, self._space)

    def __repr__(self) -> str:
        return f"TypedNodeData({self._space.ntype!r}, {self.keys()})"


def store_typed_node_data(store, pdir: PartitionDir, part_id: int, part,
                          spaces: dict[str, NodeSpace]) -> None:
    """Puts part ``part_id``'s rows of every node type into ``store`` (collective): the
    features of each type that has them (under a column layout, the part's column slice of
    every row, in the type's row order), the labels and masks of each labeled type, and the
    partitions' other node data of the types that have it."""
    types, other = pdir.types, pdir.load_node_data(part_id)
    counts = np.asarray(pdir.ntype_counts(part_id), np.int64)
    starts = np.cumsum(counts) - counts
    for t, ntype in enumerate(types.ntypes):
        space, run = spaces[ntype], slice(int(starts[t]), int(starts[t] + counts[t]))
        if types.feat_dims.get(ntype, 0):
            feat = torch.from_numpy(pdir.load_type_feat(part_id, ntype))
            policy = space.policy
            if ntype in pdir.type_slices:  # per-type id order -> row order
                policy = ColumnPolicy(pdir.type_slices[ntype], space.num_nodes)
                feat = feat[torch.argsort(space.to_rows)]
            store.init_data(space.key("feat"), policy, {part_id: feat})
        if ntype in types.labeled:
            label = part.label[run].astype("int64")
            store.init_data(space.key("label"), space.policy, {part_id: torch.from_numpy(label)})
            for name, split in MASKS.items():
                mask = getattr(part, split)[run].astype("uint8")
                store.init_data(space.key(name), space.policy, {part_id: torch.from_numpy(mask)})
        for name, values in other.items():  # what else DGL's partitions had, by type
            if ntype in pdir.node_data[name].get("ntypes", ()):
                rows = torch.from_numpy(np.ascontiguousarray(values[run]))
                store.init_data(space.key(name), space.policy, {part_id: rows})


def space_for(graph: DistGraph, rows: int, part_policy, what: str) -> NodeSpace:
    """The node rows a tensor of ``rows`` rows follows: ``part_policy`` when given (from
    ``g.get_node_partition_policy``), else, as DGL does, the one node type with that many
    nodes. One line saying what would fit otherwise."""
    if part_policy is not None and not isinstance(part_policy, NodeSpace):
        raise InvalidValueError(f"{what}: part_policy={part_policy!r}; expected "
                                "g.get_node_partition_policy(ntype)")
    spaces = [part_policy] if part_policy is not None else \
        [s for s in (graph.spaces.values() if graph.is_typed else [graph.node_space])
         if s.num_nodes == rows]
    if len(spaces) == 1 and spaces[0].num_nodes == rows:
        return spaces[0]
    sizes = {s.ntype: s.num_nodes for s in (graph.spaces.values() if graph.is_typed
                                             else [graph.node_space])}
    if len(spaces) > 1:
        raise InvalidValueError(f"{what}: {rows} rows fit node types "
                                f"{[s.ntype for s in spaces]}; pass "
                                "part_policy=g.get_node_partition_policy(ntype)")
    raise InvalidValueError(f"{what}: {rows} rows; tensors here have one row per node of a "
                            f"type ({sizes})")
