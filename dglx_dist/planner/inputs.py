"""The plan's graph, from what a user has: a dataset directory or built-in name, a dataset in
memory (what :func:`~dglx_dist.api.distribute` converts a DGLGraph to), a partition
directory, or just its sizes (:func:`graph_shape`).

The METIS cuts are not measured here (that takes a partitioning per part count): every graph
gets :data:`DEFAULT_CUTS` unless told. Degrees are the dataset's own where its edges are read
(a directory without types, a dataset in memory); otherwise all nodes have the mean degree.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from dglx_dist.strategies.cost.shapes import DEFAULT_CUTS, GraphShape, degree_quantiles

__all__ = ["graph_of_dataset", "graph_of_directory", "graph_of_partitions",
           "graph_shape"]


def graph_shape(nodes: int, edges: int, feat_dim: int, num_classes: int = 2,
                train_frac: float = 0.1, edge_cuts: tuple[float, ...] = DEFAULT_CUTS,
                node_types: tuple[tuple[float, int], ...] = (),
                embed_dim: int = 0) -> GraphShape:
    """A graph known by its sizes alone (every node of the mean degree)."""
    return GraphShape(nodes=int(nodes), edges=int(edges), feat_dim=int(feat_dim),
                      num_classes=int(num_classes), train_frac=float(train_frac),
                      edge_cuts=tuple(edge_cuts), node_types=node_types, embed_dim=embed_dim)


def _degrees(dst: np.ndarray, nodes: int) -> tuple[float, ...]:
    counts = np.bincount(np.asarray(dst, dtype=np.int64), minlength=nodes)
    return degree_quantiles(counts) if counts.sum() > 0 else (1.0,)


def graph_of_dataset(ds, edge_cuts: tuple[float, ...] = DEFAULT_CUTS,
                     embed_dim: int = 0) -> GraphShape:
    """The shape of a :class:`~dglx_dist.data.dataset.GraphDataset` in memory (its degrees
    and split; a typed one by its node types, learned rows ``embed_dim`` wide)."""
    if not ds.untyped:
        train = ds.nodes[ds.category].train if ds.category else np.zeros(0, bool)
        return _of_types([(n, t.num_nodes, t.feat_dim) for n, t in sorted(ds.nodes.items())],
                         sum(e.num_edges for e in ds.edges.values()), embed_dim,
                         ds.num_classes, np.count_nonzero(train), edge_cuts)
    shape = graph_shape(ds.num_nodes, int(ds.src.size), ds.feat.shape[1],
                        max(int(ds.num_classes), 1),
                        float(np.count_nonzero(ds.train)) / max(ds.num_nodes, 1), edge_cuts)
    return _with_degrees(shape, _degrees(ds.dst, ds.num_nodes))


def _of_types(types: list[tuple[str, int, int]], edges: int, embed_dim: int, num_classes: int,
              train: int, edge_cuts: tuple[float, ...]) -> GraphShape:
    """A graph of node types ``types`` (name, nodes, feature width) with ``train`` training
    nodes."""
    return GraphShape.of_types(types, edges, embed_dim, num_classes=max(int(num_classes), 1),
                               train_frac=float(train) / sum(n for _, n, _ in types),
                               edge_cuts=tuple(edge_cuts))


def _with_degrees(shape: GraphShape, degrees: tuple[float, ...]) -> GraphShape:
    return dataclasses.replace(shape, rel_degrees=degrees)


def graph_of_directory(path: str | os.PathLike, edge_cuts: tuple[float, ...] = DEFAULT_CUTS,
                       embed_dim: int = 0) -> GraphShape:
    """The shape of a dataset directory: meta.json, the training mask and (without types)
    the edges' destinations for the degrees; nothing else is read."""
    import pyarrow.parquet as pq

    from dglx_dist.data import read_meta
    from dglx_dist.data.checked import arrow_numpy
    from dglx_dist.data.format import EDGES_FILE, NODES_FILE, is_hetero, read_hetero_meta

    path = Path(path)
    if is_hetero(path):
        meta = read_hetero_meta(path)
        category = next((t for t, s in meta.ntypes.items() if s.get("labeled")), None)
        train = 0 if category is None else _count_train(path / "nodes" / f"{category}.parquet")
        types = sorted((t, s["num_nodes"], s["feat_dim"]) for t, s in meta.ntypes.items())
        return _of_types(types, sum(meta.num_edges), embed_dim, meta.num_classes, train,
                         edge_cuts)
    meta = read_meta(path)
    dst = arrow_numpy(pq.read_table(path / EDGES_FILE, columns=["dst"]).column("dst"))
    shape = graph_shape(meta.num_nodes, meta.num_edges, meta.feat_dim, meta.num_classes,
                        _count_train(path / NODES_FILE) / meta.num_nodes, edge_cuts)
    return _with_degrees(shape, _degrees(dst, meta.num_nodes))


def _count_train(file: Path) -> int:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    return int(pc.sum(pq.read_table(file, columns=["train"]).column("train")).as_py() or 0)


def graph_of_partitions(pdir, edge_cuts: tuple[float, ...] = DEFAULT_CUTS,
                        embed_dim: int = 0) -> GraphShape:
    """The shape of a :class:`~dglx_dist.partition.PartitionDir`: its manifest's sizes and
    the parts' training masks (every node of the mean degree)."""
    types, train = pdir.types, pdir.train_nodes()
    if types is None:
        return graph_shape(pdir.num_nodes, pdir.num_edges, pdir.feat_dim, pdir.num_classes,
                           train / pdir.num_nodes, edge_cuts)
    counts = [int(n) for n in types.ntype_offsets[1:] - types.ntype_offsets[:-1]]
    return _of_types([(t, n, types.feat_dims.get(t, 0)) for t, n in zip(types.ntypes, counts)],
                     types.num_edges, embed_dim, pdir.num_classes, train, edge_cuts)
