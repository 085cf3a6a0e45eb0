"""What the cluster model measures here: one rank's
:class:`~dglx_dist.strategies.cost.shapes.Units` (DGL's neighbour sampling and ``to_block``, a
feature-row gather, DGL's ``copy_u_sum``, a dense ``torch.mm``, TCP over loopback; each on one
thread, the median of ``repeat`` timings) and a dataset's
:class:`~dglx_dist.strategies.cost.shapes.GraphShape` (its degrees and METIS's 2-way cut)."""
from __future__ import annotations

import math
import os

import numpy as np

from dglx_dist.strategies.cost.shapes import GraphShape, Units, degree_quantiles
from dglx_dist.planner.units import DEFAULT_UNITS, loopback_s_per_byte, median_s
from dglx_dist.data.dataset import GraphDataset

__all__ = ["measure_graph", "measure_units", "metis_layout"]


def metis_layout(ds: GraphDataset, parts: int):
    """The :class:`~dglx_dist.partition.layout.Layout` of our ``metis`` into ``parts`` (every
    edge's owners; nothing written)."""
    from dglx_dist.partition import PARTITIONERS
    from dglx_dist.partition.layout import Layout

    return Layout(ds, PARTITIONERS.build("metis").plan(ds, parts))


def measure_graph(data: str | os.PathLike | GraphDataset, parts: int = 8) -> GraphShape:
    """The shape of a dataset (a directory or in memory), with our ``metis``'s cuts into 2, 4,
    ... ``parts`` parts."""
    from dglx_dist.data.format import read_dataset

    ds = data if isinstance(data, GraphDataset) else read_dataset(data)
    cuts = tuple(round(metis_layout(ds, 2 ** i).edge_cut() / ds.num_edges, 5)
                 for i in range(1, int(math.log2(parts)) + 1))
    degrees = np.bincount(ds.dst, minlength=ds.num_nodes)
    return GraphShape(nodes=ds.num_nodes, edges=int(ds.src.size), feat_dim=ds.feat.shape[1],
                      num_classes=int(ds.label.max()) + 1,
                      train_frac=float(np.count_nonzero(ds.train)) / ds.num_nodes,
                      edge_cuts=cuts, rel_degrees=degree_quantiles(degrees))


def measure_units(nodes: int = 200_000, edges: int = 2_000_000, repeat: int = 5,
                  seed: int = 0, loopback_bytes: int = 64 << 20) -> Units:
    """The unit costs on a random graph of ``nodes`` and ``edges`` (one thread)."""
    import dgl
    import torch

    torch.manual_seed(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = dgl.rand_graph(nodes, edges)
        seeds = torch.randperm(nodes)[:min(nodes, 2000)]
        counted = dgl.sampling.sample_neighbors(g, seeds, 10).num_edges()
        sample = median_s(lambda: dgl.to_block(dgl.sampling.sample_neighbors(g, seeds, 10),
                                                seeds), repeat) / counted
        table = torch.randn(nodes, 128)
        rows = torch.randint(0, nodes, (min(nodes, 50_000),))
        gather = median_s(lambda: table.index_select(0, rows), repeat) / (rows.numel() * 512)
        x = torch.randn(nodes, 64)
        spmm = median_s(lambda: dgl.ops.copy_u_sum(g, x), repeat) / (edges * 64)
        a, b = torch.randn(20_000, 128), torch.randn(128, 64)
        dense = median_s(lambda: torch.mm(a, b), repeat) / (2 * a.shape[0] * 128 * 64)
    finally:
        torch.set_num_threads(threads)
    return Units(sample_s_per_edge=sample, gather_s_per_byte=gather,
                 spmm_s_per_edge_dim=spmm, dense_s_per_flop=dense,
                 intra_s_per_byte=loopback_s_per_byte(loopback_bytes, repeat),
                 round_s=DEFAULT_UNITS.round_s)  # not measured on one rank: the plan's
