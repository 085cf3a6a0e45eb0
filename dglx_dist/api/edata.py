"""``g.edata``: the edge data of a :class:`~dglx_dist.api.DistGraph`, one view per name.

Edge data travels with the graph given to :func:`~dglx_dist.distribute` (and with datasets whose
edges.parquet has edge-data columns) into the partitions, where each edge's row lives with the
part that stores the edge (its destination's owner). ``g.edata[name][eids]`` gives the rows of
``eids`` (the graph's own edge ids, in the order asked), pulled through the KVStore by this rank
alone; ``g.edata[name][eids] = rows`` writes them (seen by other ranks after
:meth:`~dglx_dist.api.DistGraph.barrier`), as DGL's ``DistGraph.edata`` does.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from dglx_dist.api.ndata import EDGE_PREFIX as PREFIX, DataViews, as_node_ids, fit_rows

if TYPE_CHECKING:
    from dglx_dist.api.graph import DistGraph

__all__ = ["EdgeData", "EdgeDataView", "PREFIX"]


class EdgeData(DataViews):
    """``g.edata``: a view per edge-data name."""

    kind = "edge"

    def __init__(self, graph: DistGraph):
        self._g = graph
        self._part: torch.Tensor | None = None  # the graph's edge id -> partitioned edge id

    def keys(self) -> list[str]:
        return [n[len(PREFIX):] for n in self._g.store.names() if n.startswith(PREFIX)]

    def view(self, name: str) -> "EdgeDataView":
        return EdgeDataView(self, name)

    def part_ids(self, eids: torch.Tensor) -> torch.Tensor:
        """The partitioned ids (the KVStore's rows) of the graph's edge ids ``eids``."""
        if self._part is None:
            self._part = torch.from_numpy(self._g.pdir.edge_part_ids())
        return self._part[eids]


class EdgeDataView:
    """One edge-data name: ``view[eids]`` reads rows, ``view[eids] = rows`` writes them."""

    def __init__(self, edata: EdgeData, name: str):
        self._edata, self.name = edata, name
        self._store = edata._g.store

    @property
    def shape(self) -> torch.Size:
        return torch.Size(self._store.shape(PREFIX + self.name))

    @property
    def dtype(self) -> torch.dtype:
        return self._store.dtype(PREFIX + self.name)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key) -> torch.Tensor:
        return self._store.pull(PREFIX + self.name, self._ids(key), collective=False)

    def __setitem__(self, key, values: torch.Tensor) -> None:
        ids = self._ids(key)
        values = fit_rows(values, (ids.numel(), *self.shape[1:]), self.dtype,
                          f"g.edata[{self.name!r}]")
        self._store.push(PREFIX + self.name, ids, values, "assign", collective=False)

    def _ids(self, key) -> torch.Tensor:
        num_edges = self.shape[0]
        if isinstance(key, slice):
            ids = torch.arange(num_edges)[key]
        else:
            ids = as_node_ids(key, num_edges, f"g.edata[{self.name!r}][...]", kind="edge")
        return self._edata.part_ids(ids)

    def __repr__(self) -> str:
        return f"EdgeDataView({self.name!r}, shape={tuple(self.shape)}, dtype={self.dtype})"
