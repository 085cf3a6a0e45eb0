"""A synthetic heterograph shaped like ogbn-mag: ``dglx datagen --preset mag`` (or ``mag-small``).

The node and edge counts are ogbn-mag's times ``scale``, each rounded and at least 1 (at scale
1 exactly OGB's; :func:`mag_sizes` computes them without generating anything). The typed
dataset holds papers (features, labels, train/val/test), authors, institutions and fields of
study (neither features nor labels), ogbn-mag's four relations and the reverse of each.

The model gives the labels signal in the features *and* in the structure, so that a model
reading neighbours beats one reading features alone:

* **Papers** belong to classes whose shares fall off as ``rank ** -CLASS_SKEW`` (a few large
  subjects, many small ones). Each paper has a popularity (capped Pareto) that makes some
  papers cited, written and tagged far more often than others.
* **Features**: the paper's class centroid (:func:`~dglx_dist.data.dcsbm.centroids`) plus
  ``feature_noise`` times Gaussian noise: with hundreds of classes and the default noise,
  features alone are clearly imperfect.
* **cites**: a citing paper drawn at random cites, with probability ``homophily``, a paper of
  its own class, else any paper, by popularity; self citations are drawn again.
* **writes**: authors have a main class (the class of a random paper) and a productivity; an
  author drawn by productivity writes, with probability ``author_focus``, a paper of their
  main class, else any paper, by popularity.
* **has_topic**: fields of study have a class and a popularity; each paper gets its even
  share of the topics, each a field of its class with probability ``topic_focus``, else any
  field, by popularity.
* **affiliated_with**: institutions have a class and a size; distinct authors take the
  affiliations first (most authors have one), each at an institution of their class with
  probability ``INSTITUTION_FOCUS``, else any, by size.
* **Reverse relations**: ``(dst, "rev-" + relation, src)`` for each of the four, as DGL's
  distributed R-GCN example (``examples/distributed/rgcn/partition_graph.py``) builds its
  ogbn-mag graph: it reverses every canonical edge type, ``cites`` included.
* **Split**: random, with ogbn-mag's counts scaled (train takes what val and test leave).

A draw whose group is empty (a class without institutions at a small scale) takes any item.
Repeated pairs are drawn again a few rounds; where a class holds few papers (small scales)
that moves some edges out of it: mag-small has 38% of its citations inside a class at the
default ``homophily`` of 0.5 (scale 1: 50%).
Each purpose draws from its own RNG stream of ``seed``, so the same config gives the same
arrays, and changing one purpose's knob leaves the other draws as they were.
"""
from __future__ import annotations

import dataclasses
import enum
import logging
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import psutil

from dglx_dist.cli_flags import option
from dglx_dist.data.atomic import check_disk
from dglx_dist.data.dataset import EdgeTable, GraphDataset, NodeTable
from dglx_dist.graphcore.types import Etype
from dglx_dist.data.dcsbm import Picker, centroids, check_numbers, rng as _rng, split_masks
from dglx_dist.data.format import hetero_meta, write_dataset
from dglx_dist.memory import check_memory
from dglx_dist.registry import Bounds

__all__ = ["MagConfig", "MagSizes", "MAG_PRESETS", "OGBN_MAG_NODES", "OGBN_MAG_EDGES",
           "OGBN_MAG_SPLIT", "REVERSE_PREFIX", "mag_sizes", "mag_dataset", "write_mag",
           "estimate_mag_peak_bytes", "estimate_mag_disk_bytes", "reverse_etype"]

log = logging.getLogger(__name__)

# ogbn-mag (a subset of the Microsoft Academic Graph): its counts as OGB lists them
OGBN_MAG_NODES = {"paper": 736_389, "author": 1_134_649, "institution": 8_740,
                  "field_of_study": 59_965}
OGBN_MAG_EDGES: dict[Etype, int] = {
    ("author", "affiliated_with", "institution"): 1_043_998,
    ("author", "writes", "paper"): 7_145_660,
    ("paper", "cites", "paper"): 5_416_271,
    ("paper", "has_topic", "field_of_study"): 7_505_078}
OGBN_MAG_SPLIT = {"train": 629_571, "val": 64_879, "test": 41_939}  # its time split
OGBN_MAG_CLASSES = 349
REVERSE_PREFIX = "rev-"  # DGL's distributed R-GCN example's name for a reversed relation

CLASS_SKEW = 0.7
"""Class ``r`` (from 0) holds a share of papers proportional to ``(r + 1) ** -CLASS_SKEW``."""
INSTITUTION_FOCUS = 0.6
"""Share of affiliations at an institution of the author's main class."""
POPULARITY_EXPONENT, POPULARITY_CAP = 2.5, 100.0
"""Popularity, productivity and size: Pareto with density ``~ x ** -2.5`` from 1, capped."""
_FEAT_CHUNK = 1 << 16  # feature rows per in-place update (bounds the temporary)
_REDRAW_ROUNDS = 4


class _Stream(enum.IntEnum):
    """The generator's independent RNG streams (their values are part of the output)."""

    LABELS, SPLIT, CENTROIDS, FEATURES, POPULARITY, CLASSES, CITES, WRITES, TOPICS, \
        AFFILIATIONS = range(10)


@dataclass(frozen=True)
class MagConfig:
    """Parameters of the ogbn-mag-shaped generator (checked on construction).

    Raises:
        InvalidValueError: a field out of range, naming the flag, its value and the range.
    """

    scale: float = option(1.0, "size relative to ogbn-mag: every node and edge count times "
                          "this, rounded (1: ogbn-mag's exact counts)",
                          bounds=Bounds(1e-5, 100))
    seed: int = option(0, "random seed", bounds=Bounds(0))
    feat_dim: int = option(128, "paper feature width", bounds=Bounds(1))
    num_classes: int = option(OGBN_MAG_CLASSES, "paper classes", bounds=Bounds(2))
    feature_noise: float = option(0.75, "std of the Gaussian noise added to a paper's class "
                                  "centroid", bounds=Bounds(0))
    homophily: float = option(0.5, "share of citations to a paper of the citing paper's "
                              "class", bounds=Bounds(0, 1))
    author_focus: float = option(0.5, "share of an author's papers in their main class",
                                 bounds=Bounds(0, 1))
    topic_focus: float = option(0.5, "share of a paper's fields of study tied to its class",
                                bounds=Bounds(0, 1))

    def __post_init__(self) -> None:
        check_numbers(self, ("seed", "feat_dim", "num_classes"))


MAG_PRESETS: dict[str, MagConfig] = {
    "mag": MagConfig(),
    "mag-small": MagConfig(scale=1 / 256),  # 2,877 papers, 4,432 authors: well under a second
}
"""Typed graphs shaped like ogbn-mag: ``dglx datagen --preset NAME``."""


@dataclass(frozen=True)
class MagSizes:
    """Node counts by type, edge counts by canonical edge type (reverses included) and the
    split's paper counts."""

    nodes: dict[str, int]
    edges: dict[Etype, int]
    split: dict[str, int]


def _scaled(count: int, scale: float) -> int:
    return max(1, int(math.floor(count * scale + 0.5)))


def reverse_etype(etype: Etype) -> Etype:
    """``(dst, "rev-" + relation, src)``: a relation's reverse, named as DGL's distributed
    R-GCN example names it."""
    src, rel, dst = etype
    return dst, REVERSE_PREFIX + rel, src


def mag_sizes(scale: float) -> MagSizes:
    """The counts :func:`mag_dataset` generates at ``scale``, without generating."""
    nodes = {t: _scaled(n, scale) for t, n in OGBN_MAG_NODES.items()}
    edges = {e: _scaled(m, scale) for e, m in OGBN_MAG_EDGES.items()}
    edges.update({reverse_etype(e): m for e, m in edges.items()})
    val, test = (_scaled(OGBN_MAG_SPLIT[s], scale) for s in ("val", "test"))
    split = {"train": nodes["paper"] - val - test, "val": val, "test": test}
    assert split["train"] >= 1, scale  # MagConfig's lower bound on scale keeps it so
    return MagSizes(nodes, {e: edges[e] for e in sorted(edges)}, split)


def _popularity(rng: np.random.Generator, n: int) -> np.ndarray:
    u = rng.random(n)
    return np.minimum((1.0 - u) ** (-1.0 / (POPULARITY_EXPONENT - 1.0)), POPULARITY_CAP)


def _spread(rng: np.random.Generator, n: int, m: int) -> np.ndarray:
    """``m`` items of ``n`` as evenly as possible: each ``m // n`` times, and ``m % n``
    distinct random items once more."""
    extra = rng.choice(n, m % n, replace=False) if m % n else np.zeros(0, np.int64)
    return np.concatenate([np.repeat(np.arange(n, dtype=np.int64), m // n), extra])


def _labels(config: MagConfig, n: int) -> np.ndarray:
    share = np.arange(1, config.num_classes + 1, dtype=np.float64) ** -CLASS_SKEW
    rng = _rng(config, _Stream.LABELS)
    return rng.choice(config.num_classes, n, p=share / share.sum()).astype(np.int64)


def _features(config: MagConfig, label: np.ndarray) -> np.ndarray:
    """Class centroid plus noise, float32, updated in place chunk by chunk."""
    means = centroids(_rng(config, _Stream.CENTROIDS), config.num_classes, config.feat_dim)
    feat = _rng(config, _Stream.FEATURES).standard_normal((label.size, config.feat_dim),
                                                          dtype=np.float32)
    noise = np.float32(config.feature_noise)
    for lo in range(0, label.size, _FEAT_CHUNK):
        rows = feat[lo:lo + _FEAT_CHUNK]
        rows *= noise
        rows += means[label[lo:lo + _FEAT_CHUNK]]
    return feat


def _relation(rng: np.random.Generator, src: np.ndarray, groups: np.ndarray,
              picker: Picker, focus: float, self_loops: bool = True) -> EdgeTable:
    """Edges from each ``src`` to an item of its group in ``groups`` (with probability
    ``focus``, else any item); repeated pairs (and self loops, unless ``self_loops``) are
    drawn again, a few rounds, and what is still repeated stays (a small class cannot always
    give an author or a paper enough distinct partners)."""
    dst = picker.draw(rng, groups, focus)
    for _ in range(_REDRAW_ROUNDS):
        _, first = np.unique(src * picker.order.size + dst, return_index=True)
        again = np.ones(src.size, bool)
        again[first] = False
        if not self_loops:
            again |= src == dst
        positions = np.flatnonzero(again)
        if positions.size == 0:
            break
        dst[positions] = picker.draw(rng, groups[positions], focus)
    return EdgeTable(src, dst)


def _typed_edges(config: MagConfig, sizes: MagSizes, label: np.ndarray) -> dict[Etype,
                                                                               EdgeTable]:
    """ogbn-mag's four relations (see the module docstring)."""
    n, k = sizes.nodes, config.num_classes
    rng = _rng(config, _Stream.CLASSES)
    author_class, field_class, inst_class = (label[rng.integers(0, label.size, n[t])]
                                             for t in ("author", "field_of_study",
                                                       "institution"))
    rng = _rng(config, _Stream.POPULARITY)
    papers = Picker(label, _popularity(rng, n["paper"]), k)
    authors = Picker(np.zeros(n["author"], np.int64), _popularity(rng, n["author"]), 1)
    fields = Picker(field_class, _popularity(rng, n["field_of_study"]), k)
    institutions = Picker(inst_class, _popularity(rng, n["institution"]), k)
    m = {rel: count for (_, rel, _), count in sizes.edges.items()}

    rng = _rng(config, _Stream.WRITES)
    writer = authors.draw(rng, np.zeros(m["writes"], np.int64), 1.0)
    writes = _relation(rng, writer, author_class[writer], papers, config.author_focus)
    rng = _rng(config, _Stream.TOPICS)
    paper = _spread(rng, n["paper"], m["has_topic"])
    topics = _relation(rng, paper, label[paper], fields, config.topic_focus)
    rng = _rng(config, _Stream.AFFILIATIONS)
    member = _spread(rng, n["author"], m["affiliated_with"])
    affiliated = _relation(rng, member, author_class[member], institutions, INSTITUTION_FOCUS)
    rng = _rng(config, _Stream.CITES)
    citing = rng.integers(0, n["paper"], m["cites"])
    cites = _relation(rng, citing, label[citing], papers, config.homophily, self_loops=False)
    if n["paper"] > 1:  # a self citation left after the rounds cites the next paper
        cites.dst[:] = np.where(cites.src == cites.dst, (cites.src + 1) % n["paper"],
                                cites.dst)
    return {("author", "writes", "paper"): writes, ("paper", "cites", "paper"): cites,
            ("paper", "has_topic", "field_of_study"): topics,
            ("author", "affiliated_with", "institution"): affiliated}


def _provenance(config: MagConfig) -> dict[str, Any]:
    return {"name": "mag-synthetic", "generator": "mag", "seed": config.seed,
            "config": dataclasses.asdict(config)}


def mag_dataset(config: MagConfig) -> GraphDataset:
    """Generates the ogbn-mag-shaped typed graph in memory.

    Args:
        config: the generator parameters.

    Returns:
        The dataset: :func:`mag_sizes`'s counts, category ``"paper"``; a reverse relation
        shares its forward relation's arrays (src and dst swapped).
    """
    sizes = mag_sizes(config.scale)
    n = sizes.nodes
    label = _labels(config, n["paper"])
    edges = _typed_edges(config, sizes, label)
    edges.update({reverse_etype(e): EdgeTable(t.dst, t.src) for e, t in list(edges.items())})
    masks = split_masks(_rng(config, _Stream.SPLIT), n["paper"], list(sizes.split.values()))
    paper = NodeTable(n["paper"], _features(config, label), label, *masks)
    nodes = {t: NodeTable(c) for t, c in n.items() if t != "paper"} | {"paper": paper}
    return GraphDataset.typed(nodes, edges, config.num_classes, "paper", _provenance(config))


# write_mag's peak above its starting memory, measured: 1,223 MiB at scale 1 with F = 128
# (these constants say 1,758) and 131 MiB at scale 1/16 with F = 64 (they say 237)
_FIXED_BYTES, _BYTES_PER_EDGE, _BYTES_PER_NODE = 160 << 20, 40, 40


def estimate_mag_peak_bytes(config: MagConfig, start: int | None = None) -> int:
    """About the peak resident memory of :func:`write_mag` in a process whose resident
    memory is ``start`` (default: this process's now): the edges (forward ones; a reverse
    shares their arrays) with the draws that make them, the per-node arrays, and the paper
    features twice (the array and its Arrow copy)."""
    start = psutil.Process().memory_info().rss if start is None else start
    sizes = mag_sizes(config.scale)
    edges = sum(m for (_, rel, _), m in sizes.edges.items()
                if not rel.startswith(REVERSE_PREFIX))
    features = 8 * sizes.nodes["paper"] * config.feat_dim
    return (start + _FIXED_BYTES + _BYTES_PER_EDGE * edges
            + _BYTES_PER_NODE * sum(sizes.nodes.values()) + features)


def estimate_mag_disk_bytes(config: MagConfig) -> int:
    """About the typed directory's size: float32 features (noise does not compress), about
    8 bytes per stored edge (each relation and its reverse; 7.6 measured at scale 1), 5 per
    paper for the rest."""
    sizes = mag_sizes(config.scale)
    papers = sizes.nodes["paper"]
    raw = 4 * papers * config.feat_dim + 8 * sum(sizes.edges.values()) + 5 * papers
    return int(1.03 * raw) + (1 << 20)


def write_mag(config: MagConfig, out_dir: str | os.PathLike, overwrite: bool = False,
              memory_limit: int | None = None) -> dict[str, Any]:
    """Generates the graph and writes it as a typed dataset directory, atomically.

    Args:
        config: the generator parameters.
        out_dir: the directory to create.
        overwrite: replace an existing dataset directory once the new one is complete.
        memory_limit: refuse when :func:`estimate_mag_peak_bytes` exceeds it (default: the
            memory available now).

    Returns:
        meta.json's contents.

    Raises:
        InsufficientMemoryError, DiskFullError: before anything is written.
    """
    check_memory(estimate_mag_peak_bytes(config), memory_limit, "generating this graph",
                 "use a machine with more memory, or a smaller --scale or --feat-dim")
    check_disk(estimate_mag_disk_bytes(config), out_dir, "dglx datagen")
    ds = mag_dataset(config)
    log.info("ogbn-mag-shaped graph at scale %g: %d nodes, %d edges; writing %s",
             config.scale, ds.num_nodes, ds.num_edges, out_dir)
    write_dataset(ds, out_dir, overwrite=overwrite)
    return hetero_meta(ds)
