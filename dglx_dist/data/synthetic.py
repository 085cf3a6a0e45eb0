"""A deterministic synthetic node-classification graph with real, learnable signal.

The model is a degree-corrected stochastic block model (DC-SBM):

* **Labels are communities**: ``num_classes`` communities of balanced sizes (differing by at
  most one node), random membership.
* **Degree propensities** ``theta`` follow a Pareto law with density ``~ x**-degree_exponent``
  (``0`` gives uniform propensities), capped at the structural cut-off so that no node's expected
  degree exceeds about ``sqrt(mean_degree * num_nodes)``.
* **Edges**: an undirected edge picks its source proportional to ``theta``; a ``homophily``
  share of the edges take their destination inside the source's community, the rest outside it,
  both proportional to ``theta``, so ``homophily`` is the edge homophily of the labels. Sampling
  is vectorised: with nodes sorted by community, one cumulative-``theta`` array gives every
  community a contiguous mass interval, and a destination is a uniform number inside (or outside)
  that interval mapped back by ``np.searchsorted``. Self loops and repeated pairs are dropped,
  further rounds top up the deficit and a random subset trims the surplus, so the graph has
  exactly ``num_edges // 2`` undirected edges unless the model cannot give that many distinct
  pairs (dense requests). Both directions are listed, in shuffled order: the ``num_edges`` in
  meta.json is the real, even count and may be a little under the request.
* **Features**: class centroids about ``CENTROID_DISTANCE`` apart, plus ``feature_noise`` times
  standard Gaussian noise: separable, but not trivially at the default noise.
* **Split**: disjoint random train/val/test masks of ``floor(frac * num_nodes)`` nodes each.
* **Edge features** (``edge_feat_dim`` > 0, edge data ``feat``): whether the edge joins two
  nodes of one community, as ``+-CENTROID_DISTANCE / 2`` along one fixed random direction,
  plus ``feature_noise`` times standard Gaussian noise: the signal a model that reads edge
  features (or an edge classifier) can learn.

Every draw has its own ``np.random.SeedSequence(seed, spawn_key=(purpose, ...))`` (per purpose,
per edge round and chunk, per fixed-size feature block), so the in-memory
:func:`generate_synthetic` and the streaming :func:`write_synthetic` give identical data whatever
``rows_per_chunk`` is.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import psutil
from tqdm import tqdm

from dglx_dist.data.atomic import atomic_directory, check_disk
from dglx_dist.cli_flags import option
from dglx_dist.data.dcsbm import (CENTROID_DISTANCE, EDGE_CHUNK, Stream, centroids, check_numbers,
                                  edges as _edges, rng as _rng, split_masks)
from dglx_dist.registry import Bounds
from dglx_dist.data.dataset import NodeTable
from dglx_dist.data.format import (DATASET_DIR, EDGES_FILE, DatasetMeta, GraphDataset,
                                   write_edges, write_nodes)
from dglx_dist.errors import InvalidValueError
from dglx_dist.memory import check_memory

__all__ = ["SyntheticConfig", "SYNTHETIC_PRESETS", "estimate_peak_bytes", "estimate_disk_bytes",
           "generate_synthetic", "write_synthetic", "CENTROID_DISTANCE"]

log = logging.getLogger(__name__)

_FEAT_BLOCK = 4096  # rows per feature RNG block: fixed, so output is independent of chunking
_MAX_NODES = 2**31 - 1  # keeps the (min * N + max) pair key inside int64


# the fields' ranges, checked in Python only: on the command line --seed, --homophily, ... are
# MagConfig's flags too, and each generator refuses its own values
_BOUNDS = {"num_nodes": Bounds(2, _MAX_NODES), "num_classes": Bounds(2), "feat_dim": Bounds(1),
           "homophily": Bounds(0, 1), **dict.fromkeys(("train_frac", "val_frac", "test_frac"),
                                                    Bounds(0, 1)),
           **dict.fromkeys(("num_edges", "edge_feat_dim", "seed", "feature_noise",
                            "degree_exponent"), Bounds(0))}


@dataclass(frozen=True)
class SyntheticConfig:
    """Parameters of the DC-SBM generator (validated on construction).

    Raises:
        InvalidValueError: a field out of range; the message names the field, its value and
            the range.
    """

    num_nodes: int = option(10_000, "number of nodes")
    num_edges: int = option(200_000, "requested directed edges (both directions of each "
                            "undirected edge count); the result is even and may be a little "
                            "under")
    num_classes: int = option(8, "number of communities = classes")
    feat_dim: int = option(64, "node feature width")
    homophily: float = option(0.8, "expected fraction of edges inside a community, in [0, 1]")
    degree_exponent: float = option(2.5, "power-law exponent of degree propensities (> 1), "
                                    "or 0 for uniform")
    feature_noise: float = option(1.0, "std of the Gaussian noise added to the class centroid")
    train_frac: float = option(0.1, "fraction of nodes in train")
    val_frac: float = option(0.1, "fraction of nodes in val")
    test_frac: float = option(0.2, "fraction of nodes in test")
    seed: int = option(0, "random seed (>= 0)")
    edge_feat_dim: int = option(0, "width of the edge feature 'feat' (0: no edge data); it "
                                "says, with noise, whether an edge stays inside a community")

    def __post_init__(self) -> None:
        check_numbers(self, ("num_nodes", "num_edges", "num_classes", "feat_dim",
                             "edge_feat_dim", "seed"), _BOUNDS)
        n = self.num_nodes
        for name, value, most in (("num_edges", self.num_edges, n * (n - 1)),
                                  ("num_classes", self.num_classes, n)):
            if value > most:
                raise InvalidValueError(f"{name} = {value!r}; expected at most {most} for "
                                        f"{n} nodes")
        if 0 < self.degree_exponent <= 1:
            raise InvalidValueError(f"degree_exponent = {self.degree_exponent!r}; expected 0 "
                                    "(uniform degrees) or a number > 1")
        fracs = self.train_frac + self.val_frac + self.test_frac
        if fracs > 1 + 1e-9:
            raise InvalidValueError(f"train_frac + val_frac + test_frac = {fracs!r}; expected "
                                    "a sum in [0, 1]")


SYNTHETIC_PRESETS: dict[str, SyntheticConfig] = {
    # ogbn-products' nodes, features, classes and split (8% / 1.6% / 88.4%) with 61.9M directed
    # edges (OGB's count of its edges; DGL lists both directions, 123.7M: --num-edges 123718280)
    "products": SyntheticConfig(num_nodes=2_449_029, num_edges=61_859_140, num_classes=47,
                                feat_dim=100, train_frac=0.08, val_frac=0.016,
                                test_frac=0.884),
    # ogbn-papers100M's shape, for the cluster model: about 60 GB to generate, refused here
    "papers": SyntheticConfig(num_nodes=111_059_956, num_edges=1_615_685_872,
                              num_classes=172, feat_dim=128, train_frac=0.0109,
                              val_frac=0.0011, test_frac=0.0019),
}
"""Graphs shaped like the benchmarks users quote: ``dglx datagen --preset NAME``."""

# write_synthetic's peak above its starting memory, measured at 200k-2.45M nodes, rounded up:
# the edge arrays (29 B per edge with numpy 1.26, 33 with 2.4) and 50-100 MiB of buffers; per
# node 39.7 B measured at 20M nodes and 49.9 B at 200M (the old 40 was 3.5% under the peak)
_FIXED_BYTES, _BYTES_PER_EDGE, _BYTES_PER_NODE = 160 << 20, 36, 56


def estimate_peak_bytes(config: SyntheticConfig, start: int | None = None,
                        rows_per_chunk: int = 65536) -> int:
    """About the peak resident memory of :func:`write_synthetic` for ``config`` in a process
    whose resident memory is ``start`` (default: this process's now). Node features are
    streamed: what counts of them is the class centroids (float64 and float32) and one chunk
    of rows in flight (its RNG blocks, the rows, the Arrow batch and the writer's buffer)."""
    start = psutil.Process().memory_info().rss if start is None else start
    per_edge = _BYTES_PER_EDGE + 4 * config.edge_feat_dim
    chunk = min(rows_per_chunk, config.num_nodes)
    features = config.feat_dim * (12 * config.num_classes + 4 * (_FEAT_BLOCK + 3 * chunk))
    return (start + _FIXED_BYTES + per_edge * config.num_edges
            + _BYTES_PER_NODE * config.num_nodes + features)


def estimate_disk_bytes(config: SyntheticConfig) -> int:
    """About the dataset directory's size: the float32 features do not compress (Gaussian
    noise), the edges' int64 pairs to about 10 bytes, the per-node scalars to 5."""
    raw = (4 * config.num_nodes * config.feat_dim + 4 * config.num_edges * config.edge_feat_dim
           + 12 * config.num_edges + 5 * config.num_nodes)
    return int(1.03 * raw) + (1 << 20)  # Parquet's pages and footers


_Nodes = collections.namedtuple("_Nodes", "label train val test centroids")
"""Per-node arrays (labels, split masks) and the (num_classes, feat_dim) class centroids."""


def _nodes(config: SyntheticConfig) -> _Nodes:
    """Labels (balanced communities), the split masks and the class centroids."""
    n = config.num_nodes
    classes = np.arange(n, dtype=np.int64) % config.num_classes
    label = _rng(config, Stream.LABELS).permutation(classes)
    sizes = [int(math.floor(f * n + 1e-9))
             for f in (config.train_frac, config.val_frac, config.test_frac)]
    return _Nodes(label, *split_masks(_rng(config, Stream.SPLIT), n, sizes),
                  centroids(_rng(config, Stream.CENTROIDS), config.num_classes, config.feat_dim))


def _feature_rows(config: SyntheticConfig, nodes: _Nodes, lo: int, hi: int) -> np.ndarray:
    """Features of rows [lo, hi), from the fixed-size RNG blocks that cover them."""
    b0, b1 = lo // _FEAT_BLOCK, -(-hi // _FEAT_BLOCK)
    out = np.empty((hi - lo, config.feat_dim), dtype=np.float32)
    noise = np.float32(config.feature_noise)
    for b in range(b0, b1):
        start, stop = b * _FEAT_BLOCK, min((b + 1) * _FEAT_BLOCK, config.num_nodes)
        block = _rng(config, Stream.FEATURES, b).standard_normal(
            (stop - start, config.feat_dim), dtype=np.float32)
        s, e = max(start, lo), min(stop, hi)
        rows = block[s - start:e - start]
        rows *= noise
        rows += nodes.centroids[nodes.label[s:e]]
        out[s - lo:e - lo] = rows
    return out


def _edge_features(config: SyntheticConfig, label: np.ndarray, src: np.ndarray,
                   dst: np.ndarray) -> dict[str, np.ndarray]:
    """The edge data (``feat`` when ``edge_feat_dim`` > 0): the community signal along one
    random direction plus noise, drawn in fixed blocks of edges."""
    d = config.edge_feat_dim
    if d == 0:
        return {}
    direction = _rng(config, Stream.EDGE_FEAT).standard_normal(d)
    direction *= CENTROID_DISTANCE / 2 / max(float(np.linalg.norm(direction)), 1e-12)
    sign = np.where(label[src] == label[dst], 1.0, -1.0)
    out = np.empty((src.size, d), dtype=np.float32)
    for block, lo in enumerate(range(0, src.size, EDGE_CHUNK)):
        hi = min(lo + EDGE_CHUNK, src.size)
        noise = _rng(config, Stream.EDGE_FEAT, block + 1).standard_normal((hi - lo, d))
        out[lo:hi] = sign[lo:hi, None] * direction + config.feature_noise * noise
    return {"feat": out}


def _provenance(config: SyntheticConfig) -> dict[str, Any]:
    return {"generator": "dcsbm", "seed": config.seed, "config": dataclasses.asdict(config)}


def generate_synthetic(config: SyntheticConfig) -> GraphDataset:
    """Builds the synthetic graph in memory (for small graphs and tests).

    Args:
        config: the generator parameters.

    Returns:
        The dataset; ``extra`` holds the provenance written to meta.json by
        :func:`write_synthetic`, which produces the same arrays for the same config.
    """
    nodes = _nodes(config)
    src, dst = _edges(config, nodes.label)
    feat = _feature_rows(config, nodes, 0, config.num_nodes)
    return GraphDataset(src, dst, feat, nodes.label, nodes.train, nodes.val, nodes.test,
                        config.num_classes, _provenance(config),
                        _edge_features(config, nodes.label, src, dst))


def write_synthetic(config: SyntheticConfig, out_dir: str | os.PathLike, overwrite: bool = False,
                    rows_per_chunk: int = 65536, progress: bool = False,
                    memory_limit: int | None = None) -> DatasetMeta:
    """Generates the synthetic graph straight into a dataset directory, atomically.

    Node rows are generated and written ``rows_per_chunk`` at a time, so memory holds the
    edge arrays and per-node scalars but never the whole feature matrix. The output equals
    :func:`generate_synthetic` for the same config, whatever ``rows_per_chunk``.

    Args:
        config: the generator parameters.
        out_dir: the dataset directory to create.
        overwrite: replace an existing ``out_dir`` (only once the new one is complete, and
            only a dataset directory).
        rows_per_chunk: node rows per generated chunk and Parquet row group.
        progress: show a tqdm progress bar over the node rows.
        memory_limit: refuse when :func:`estimate_peak_bytes` exceeds it (default: the
            memory available now).

    Returns:
        The meta.json contents; ``num_edges`` is the real (even) count written.

    Raises:
        FileExistsError: ``out_dir`` exists and ``overwrite`` is false, or it is not a
            dataset directory.
        ValueError: ``rows_per_chunk`` < 1.
        InsufficientMemoryError: the estimated peak does not fit, before anything is written.
    """
    if isinstance(rows_per_chunk, bool) or not isinstance(rows_per_chunk, int) or \
            rows_per_chunk < 1:
        raise InvalidValueError(f"rows_per_chunk = {rows_per_chunk!r}; expected an integer >= 1")
    check_memory(estimate_peak_bytes(config, rows_per_chunk=rows_per_chunk), memory_limit,
                 "generating this graph", "use a machine with more memory, or fewer edges "
                 "(--num-edges) or features (--feat-dim)")
    check_disk(estimate_disk_bytes(config), out_dir, "dglx datagen")
    n = config.num_nodes
    with atomic_directory(out_dir, overwrite, kind=DATASET_DIR) as tmp:
        log.info("synthetic graph: %d nodes, generating ~%d edges", n, config.num_edges)
        nodes = _nodes(config)
        src, dst = _edges(config, nodes.label)
        meta = DatasetMeta(n, int(src.size), config.feat_dim, config.num_classes,
                           _provenance(config))
        write_edges(tmp / EDGES_FILE, src, dst, _edge_features(config, nodes.label, src, dst))
        del src, dst
        with tqdm(total=n, unit="node", desc="nodes", disable=None if progress else True) as bar:
            write_nodes(tmp, meta, rows_per_chunk, lambda lo, hi: NodeTable(
                hi - lo, _feature_rows(config, nodes, lo, hi), nodes.label[lo:hi],
                nodes.train[lo:hi], nodes.val[lo:hi], nodes.test[lo:hi]), bar.update)
    log.info("wrote %s: %d nodes, %d directed edges", out_dir, n, meta.num_edges)
    return meta
