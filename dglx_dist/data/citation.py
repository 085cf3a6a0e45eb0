"""DGL's citation-dataset shape for the shipped Cora, offline.

``CoraGraphDataset()[0]`` is the DGLGraph DGL's own ``dgl.data.CoraGraphDataset`` gives
(2708 nodes, 10556 directed edges, the Planetoid split) with its features row-normalised as
DGL's loader provides them, and ``num_classes``: numbers computed on it compare with DGL's
directly. (The shipped dataset directory keeps Cora's raw 0/1 features.)
"""
from __future__ import annotations

from dglx_dist.data.builtin import builtin_path
from dglx_dist.data.convert import to_dgl
from dglx_dist.data.format import read_dataset

__all__ = ["CoraGraphDataset"]


class CoraGraphDataset:
    """The shipped Cora as DGL's ``CoraGraphDataset`` (no download).

    Args:
        raw_features: keep the 0/1 bag-of-words rows instead of DGL's row-normalised ones.
    """

    name = "cora"

    def __init__(self, raw_features: bool = False):
        ds = read_dataset(builtin_path("cora"))
        g = to_dgl(ds)
        if not raw_features:
            x = g.ndata["feat"]
            total = x.sum(1, keepdim=True)
            g.ndata["feat"] = x / total.clamp(min=1e-12)
        self._graph, self.num_classes = g, int(ds.num_classes)

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int):
        if index != 0:
            raise IndexError(f"{self.name} holds one graph; got index {index}")
        return self._graph
