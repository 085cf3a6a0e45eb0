"""DGL's own METIS, the ``metis`` partitioner's ``backend="dgl"``
(:class:`~dglx_dist.partition.metis.MetisPartitioner`): ``dgl.metis_partition_assignment``
with DistDGL's constraints. The partitioner's default, the package's METIS binding
(:mod:`~dglx_dist.partition.metis_lib`), needs no DGL.
"""
from __future__ import annotations

import dgl
import numpy as np
import torch

__all__ = ["metis_assignment"]


def metis_assignment(src: np.ndarray, dst: np.ndarray, num_nodes: int,
                     categories: np.ndarray | None, num_parts: int, balance_edges: bool,
                     objective: str) -> np.ndarray:
    """Each node's part by DGL's METIS (k-way) on the graph of edges ``src`` -> ``dst``,
    balancing the nodes of each of ``categories`` (DGL's ``balance_ntypes``; None: all
    nodes as one) and, with ``balance_edges``, the edges; ``objective`` is DGL's
    ``objtype``."""
    g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=num_nodes)
    parts = dgl.metis_partition_assignment(
        g, num_parts, balance_ntypes=None if categories is None else
        torch.from_numpy(categories),
        balance_edges=balance_edges, mode="k-way",
        objtype=objective)
    return parts.numpy().astype(np.int64)
