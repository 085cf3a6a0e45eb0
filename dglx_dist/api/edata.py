"""``g.edata``: the edge data of a :class:`~dglx_dist.api.DistGraph`, one view per name.

Each edge's row lives with the part that stores the edge; ``g.edata[name][eids]`` reads rows
by this rank alone and ``g.edata[name][eids] = rows`` writes them, as DGL's ``DistGraph.edata``
(docs/porting.md). On a graph of several edge types ``g.edata`` is refused and
``g.edges[etype].data[name]`` takes per-type ids (docs/heterographs.md). As in
:mod:`~dglx_dist.api.ndata`, ``graph`` is the DistGraph, not imported here.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from dglx_dist.api.ndata import (EDGE_PREFIX as PREFIX, DataViews, as_node_ids, fit_rows,
                                 stored_tensor)
from dglx_dist.errors import InvalidValueError
from dglx_dist.kvstore import RowPolicy
from dglx_dist.kvstore.policy import rows_at

__all__ = ["EdgeData", "EdgeDataView", "EdgeTypes", "EdgeSpace", "edge_tensor", "PREFIX"]


@dataclasses.dataclass(frozen=True)
class EdgeSpace:
    """The rows of one edge type (DGL's edge partition policy, what
    ``g.get_edge_partition_policy(etype)`` gives): ``index`` is the type's index (0: the one
    type ``_E`` of a graph without types)."""

    etype: tuple[str, str, str]
    num_edges: int
    index: int = 0

    @property
    def policy_str(self) -> str:
        return "edge~" + ":".join(self.etype)  # DGL's name of an edge policy

    @property
    def type_name(self) -> tuple[str, str, str]:
        return self.etype

    def get_size(self) -> int:
        """Rows of the type (DGL's ``PartitionPolicy.get_size``)."""
        return self.num_edges


def edge_tensor(graph, shape: tuple[int, ...], dtype: torch.dtype, name: str,
                init: Callable | None, space: EdgeSpace) -> "EdgeDataView":
    """DGL's ``DistTensor`` with an edge policy: one row per edge of ``space``'s type, stored
    with the edges (collective to create); a view of it, also ``g.edata[name]`` (of its
    type). An existing name attaches when the shape and dtype are the same."""
    if not shape or shape[0] != space.num_edges:
        raise InvalidValueError(f"DistTensor {shape}: part_policy {space.policy_str} has "
                                f"{space.num_edges} rows; expected shape[0] = {space.num_edges}")
    stored_tensor(graph.store, PREFIX + name, RowPolicy(graph.pdir.edge_book()), shape, dtype,
                  init, name)
    return EdgeDataView(graph.edata, name, space.index)


class EdgeData(DataViews):
    """``g.edata`` (``space`` None: the graph's one edge type) or ``g.edges[etype].data``
    (``space`` the type's): a view per edge-data name of one edge type, as
    :class:`~dglx_dist.api.ndata.NodeData` is for node types."""

    kind = "edge"

    def __init__(self, graph, space: EdgeSpace | None = None):
        self._g, self._space = graph, space
        self._part: torch.Tensor | None = None  # the graph's edge id -> partitioned edge id
        self._ids: torch.Tensor | None = None  # and back

    def stored(self) -> list[str]:
        """Every edge-data name the partitions hold (of any edge type)."""
        return [n[len(PREFIX):] for n in self._g.store.names() if n.startswith(PREFIX)]

    def keys(self) -> list[str]:
        if self._space is None:  # DGL's rule: g.edata is for a graph of one edge type
            return [] if self._several() else self.stored()
        return [n for n in self.stored() if self._g.types.has_edge_data(self._space.index, n)]

    def _several(self) -> list[str]:
        several = self._space is None and len(self._g.canonical_etypes) > 1
        return self._g.etypes if several else []

    def _missing(self, name: str) -> str:
        if self._space is None:
            return f"g.edata[{name!r}]: no such edge data; this graph has {self.keys()}"
        etype = self._space.etype
        return (f"g.edges[{etype}].data[{name!r}]: edge type {etype} has no such edge data; "
                f"it has {self.keys()}")

    def view(self, name: str) -> "EdgeDataView":
        space = self._space or self._g.get_edge_partition_policy(None)
        return EdgeDataView(self._g.edata, name, space.index)

    def part_ids(self, eids: torch.Tensor) -> torch.Tensor:
        """The partitioned ids (the KVStore's rows) of the graph's edge ids ``eids``."""
        if self._part is None:
            self._part = torch.from_numpy(self._g.pdir.edge_part_ids())
        return rows_at(self._part, eids)

    def ids(self, part_eids: torch.Tensor) -> torch.Tensor:
        """The graph's edge ids of partitioned edge ids (:meth:`part_ids` reversed)."""
        if self._ids is None:
            self.part_ids(torch.zeros(0, dtype=torch.int64))
            self._ids = torch.empty_like(self._part)
            self._ids[self._part] = torch.arange(self._part.numel())
        return self._ids[part_eids]


class EdgeTypes:
    """``g.edges``: DGL's edge-type view; ``g.edges[etype].data`` is one edge type's
    :class:`EdgeData`."""

    def __init__(self, graph):
        self._g = graph

    def __getitem__(self, etype) -> EdgeData:
        return EdgeData(self._g, self._g.get_edge_partition_policy(etype))

    def __repr__(self) -> str:
        return f"EdgeTypes({self._g.canonical_etypes})"


class EdgeDataView:
    """One edge-data name (of one edge type: ``etype``, its index): ``view[eids]`` reads
    rows, ``view[eids] = rows`` writes them."""

    def __init__(self, edata: EdgeData, name: str, etype: int = 0):
        self._edata, self.name = edata, name
        self._store, types = edata._g.store, edata._g.types
        self._first = int(types.etype_offsets[etype])  # the type's edges: a run of the
        self._count = int(types.etype_offsets[etype + 1]) - self._first  # homogeneous ids
        several = len(types.canonical_etypes) > 1  # DGL's rule: g.edata on one edge type
        self._what = f"g.edges[{types.canonical_etypes[etype]}].data[{name!r}]" if several \
            else f"g.edata[{name!r}]"

    @property
    def shape(self) -> torch.Size:
        return torch.Size([self._count, *self._store.shape(PREFIX + self.name)[1:]])

    @property
    def dtype(self) -> torch.dtype:
        return self._store.dtype(PREFIX + self.name)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key) -> torch.Tensor:
        return self._store.pull(PREFIX + self.name, self._ids(key), collective=False)

    def __setitem__(self, key, values: torch.Tensor) -> None:
        ids = self._ids(key)
        values = fit_rows(values, (ids.numel(), *self.shape[1:]), self.dtype, self._what)
        self._store.push(PREFIX + self.name, ids, values, "assign", collective=False)

    def _ids(self, key) -> torch.Tensor:
        if isinstance(key, slice):
            ids = torch.arange(self._count)[key]
        else:
            ids = as_node_ids(key, self._count, f"{self._what}[...]", kind="edge")
        return self._edata.part_ids(ids + self._first)

    def __repr__(self) -> str:
        return f"EdgeDataView({self.name!r}, shape={tuple(self.shape)}, dtype={self.dtype})"
