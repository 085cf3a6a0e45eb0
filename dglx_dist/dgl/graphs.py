"""DGL's graphs that a :class:`~dglx_dist.api.DistGraph` hands out through DGL's structure
and sampling methods (:mod:`dglx_dist.api.structure`: ``sample_neighbors`` / ``in_subgraph``
frontiers, ``subgraph``, ``edge_subgraph``, ``local_partition``), which only DGL's samplers
and DGL scripts call; the methods find these here when they are called."""
from __future__ import annotations

from typing import Mapping

import dgl
import numpy as np
import torch

from dglx_dist.partition.layout import Partition

__all__ = ["dgl_graph", "dgl_edge_subgraph", "part_graph"]


def dgl_graph(src: torch.Tensor, dst: torch.Tensor, num_nodes: int,
              ndata: Mapping[str, torch.Tensor] | None = None,
              edata: Mapping[str, torch.Tensor] | None = None) -> dgl.DGLGraph:
    """DGL's graph (one type) of the edges ``src -> dst`` over ``num_nodes`` nodes, with node
    and edge data (DGL's names: ``"_ID"``, ``"_TYPE"``...)."""
    g = dgl.graph((src, dst), num_nodes=num_nodes)
    g.ndata.update(ndata or {})
    g.edata.update(edata or {})
    return g


def dgl_edge_subgraph(ends: Mapping[tuple, tuple], eids: Mapping[tuple, torch.Tensor],
                      num_nodes: Mapping[str, int], relabel_nodes: bool) -> dgl.DGLGraph:
    """DGL's ``edge_subgraph`` of a distributed graph: the edges of each type (their ends
    ``ends[type]``, their ids ``eids[type]`` in ``edata[dgl.EID]``) over every node, or with
    ``relabel_nodes`` over their ends alone (``dgl.compact_graphs``: ``ndata[dgl.NID]``)."""
    sub = dgl.heterograph(dict(ends), num_nodes_dict=dict(num_nodes))
    for c, e in eids.items():
        sub.edges[c].data[dgl.EID] = e
    return dgl.compact_graphs(sub) if relabel_nodes else sub


def part_graph(part: Partition) -> dgl.DGLGraph:
    """Part ``part``'s structure as a DGLGraph over its local nodes (core, then HALO):
    ndata ``_ID`` (partitioned ids), ``inner_node`` (core or HALO), ``orig_id``; edata
    ``_ID`` (the edge's row in the dataset). The node rows stay in the part's arrays."""
    n = part.num_core + part.num_halo
    return dgl_graph(torch.from_numpy(part.src), torch.from_numpy(part.dst), n,
                     {"_ID": torch.from_numpy(part.local_gid),
                      "orig_id": torch.from_numpy(np.concatenate([part.core_orig,
                                                                  part.halo_orig])),
                      "inner_node": torch.arange(n) < part.num_core},
                     {"_ID": torch.from_numpy(part.eid)})
