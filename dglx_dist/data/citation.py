"""DGL's citation-dataset shape for the shipped Cora, offline.

``CoraGraphDataset()[0]`` is the DGLGraph DGL's own ``dgl.data.CoraGraphDataset`` gives
(2708 nodes, 10556 directed edges, the Planetoid split) with its features row-normalised as
DGL's loader provides them, and ``num_classes``: numbers computed on it compare with DGL's
directly. Where DGL is not installed it is the package's graph of the same edges and data
(:func:`~dglx_dist.data.convert.user_graph` decides), read through the same API. The shipped dataset directory (``dglx train --data cora``) holds the same
row-normalised features.
"""
from __future__ import annotations

from dglx_dist.data.builtin import builtin_path
from dglx_dist.data.convert import user_graph
from dglx_dist.data.format import read_dataset
from dglx_dist.errors import IdOutOfRangeError

__all__ = ["CoraGraphDataset"]


class CoraGraphDataset:
    """The shipped Cora as DGL's ``CoraGraphDataset`` (no download).

    Args:
        raw_features: keep the 0/1 bag-of-words rows instead of DGL's row-normalised ones.
    """

    name = "cora"

    def __init__(self, raw_features: bool = False):
        ds = read_dataset(builtin_path("cora"))
        g = user_graph(ds)
        if raw_features:  # every word of a row has the same share of it
            g.ndata["feat"] = (g.ndata["feat"] > 0).to(g.ndata["feat"].dtype)
        self._graph, self.num_classes = g, int(ds.num_classes)

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int):
        if index != 0:
            raise IdOutOfRangeError(f"{self.name} holds one graph; got index {index}")
        return self._graph
