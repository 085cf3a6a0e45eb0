"""What a strategy's cost is counted from: the shape of a graph, the training workload, the
cluster, and the unit costs of one rank. All are frozen dataclasses; none imports torch or DGL
(the research tooling that measures and checks them, ``benchmarks/costmodel``, imports them
from here)."""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import numpy as np

from dglx_dist.errors import InvalidValueError

__all__ = ["DEFAULT_CUTS", "EMBEDDING_COPIES", "HELDOUT", "TASK_NAMES", "Cluster", "GraphShape",
           "Units", "Workload", "degree_quantiles", "split_sizes"]

TASK_NAMES = ("node", "link")
"""What a run learns (``--task``): node classification or link prediction; the plan models
both."""

HELDOUT = (0.05, 0.10)
"""The link task's shares of the pairs held out for validation and for test
(:func:`dglx_dist.tasks.link.split_pairs`)."""


def split_sizes(pairs: int) -> tuple[int, int, int]:
    """(validation, test, training) pairs of ``pairs`` undirected pairs."""
    val, test = (int(share * pairs) for share in HELDOUT)
    return val, test, pairs - val - test

QUANTILES = 512
"""Points of a degree distribution a :class:`GraphShape` keeps."""


def degree_quantiles(degrees: np.ndarray, points: int = QUANTILES) -> tuple[float, ...]:
    """``points`` evenly spaced quantiles of ``degrees`` divided by their mean (so the tuple
    averages about 1): the shape of a degree distribution, apart from its scale."""
    deg = np.asarray(degrees, dtype=np.float64)
    if deg.size == 0 or deg.mean() <= 0:
        raise InvalidValueError("degree_quantiles: expected degrees with a positive mean")
    q = np.quantile(deg, (np.arange(points) + 0.5) / points) / deg.mean()
    return tuple(round(float(x), 6) for x in q)


DEFAULT_CUTS = (0.106, 0.161, 0.193)
"""Fractions of the edges METIS cuts into 2, 4 and 8 parts, measured on the 100k-node
synthetic graph of docs/cluster_model.md (a DC-SBM graph: community structure, as most real
graphs have; a graph with less locality is cut more)."""
EMBEDDING_COPIES = 3
"""Copies of a featureless type's learned rows a job holds: the rows and SparseAdam's two
moment estimates."""


@dataclasses.dataclass(frozen=True)
class GraphShape:
    """A graph as the cost laws and the memory estimates see it: sizes (per node type where
    it has types), split, the METIS cut and the degree distribution."""

    nodes: int
    edges: int
    """Directed edges of every edge type (both directions of an undirected edge count)."""
    feat_dim: int
    num_classes: int = 2
    train_frac: float = 0.1
    edge_cuts: tuple[float, ...] = DEFAULT_CUTS
    """Fractions of edges METIS cuts into 2, 4, 8, ... parts (measured; :meth:`cut` goes on
    from the last two, linear in log2 of the parts)."""
    rel_degrees: tuple[float, ...] = (1.0,)
    """In-degree quantiles over the mean (:func:`degree_quantiles`); ``(1.0,)``: all equal."""
    node_types: tuple[tuple[float, int], ...] = ()
    """A graph with node types: ``(share of the nodes, feature width)`` per type, 0 for a type
    without features, whose rows are learned ``embed_dim`` wide (pulled like features, their
    gradients pushed back); ``()``: every node has ``feat_dim`` features."""
    embed_dim: int = 0
    """Width of the learned rows of the featureless types."""
    type_names: tuple[str, ...] = ()
    """The node types' names, in the order of ``node_types`` (for messages; ``()``: type0,
    type1, ...)."""

    @classmethod
    def of_types(cls, types: Sequence[tuple[str, int, int]], edges: int, embed_dim: int = 0,
                 **fields: Any) -> "GraphShape":
        """A graph with node types, from each type's (name, nodes, feature width; 0: learned
        rows ``embed_dim`` wide) and the edges of every edge type; ``fields``: the rest."""
        nodes = sum(n for _, n, _ in types)
        widths = tuple((n / max(nodes, 1), int(w)) for _, n, w in types)
        return cls(int(nodes), int(edges), max(w for _, w in widths) or 1, **fields,
                   node_types=widths, type_names=tuple(t for t, _, _ in types),
                   embed_dim=embed_dim if any(w == 0 for _, w in widths) else 0)

    def __post_init__(self) -> None:
        bad = [n for n in ("nodes", "edges", "feat_dim", "num_classes") if getattr(self, n) < 1]
        bad += [n for n in ("train_frac",) if not 0 <= getattr(self, n) <= 1]
        if not self.edge_cuts or not all(0 <= c <= 1 for c in self.edge_cuts):
            bad.append("edge_cuts")
        if self.node_types and (abs(sum(f for f, _ in self.node_types) - 1) > 1e-6 or min(
                w for _, w in self.node_types) < 0 or self.embed_dim < 0):
            bad.append("node_types (shares summing to 1, widths >= 0)")
        if self.type_names and len(self.type_names) != len(self.node_types):
            bad.append("type_names (one per node type)")
        if bad:
            raise InvalidValueError(f"GraphShape: {', '.join(bad)} out of range (sizes >= 1, "
                                    f"fractions in [0, 1])")

    def _types(self) -> tuple[tuple[float, int], ...]:
        """Each node type's (share, feature width): a graph without types is one type."""
        return self.node_types or ((1.0, self.feat_dim),)

    @property
    def row_bytes(self) -> float:
        """Mean bytes of a node's input row: its features, or its learned row where its type
        has none."""
        return 4.0 * sum(f * (w or self.embed_dim) for f, w in self._types())

    @property
    def learned_bytes(self) -> float:
        """Mean bytes of a node's learned row (0 where it has features): what its gradient
        pushes back."""
        return 4.0 * self.embed_dim * sum(f for f, w in self.node_types if w == 0)

    @property
    def typed(self) -> bool:
        """Whether the graph has node types (a typed dataset or partition)."""
        return bool(self.node_types)

    def _type_sizes(self) -> list[tuple[int, int]]:
        """(nodes, feature width) of each node type (the whole graph where it has none)."""
        return [(round(share * self.nodes), w) for share, w in self._types()]

    @property
    def feature_bytes(self) -> int:
        """float32 feature rows of the featured types: sum of ``nodes x feat_dim x 4``."""
        return sum(4 * n * w for n, w in self._type_sizes())

    @property
    def embedding_bytes(self) -> int:
        """Learned rows of the featureless types with their optimizer state: sum of ``nodes x
        embed_dim x 4 x`` :data:`EMBEDDING_COPIES`."""
        return sum(4 * EMBEDDING_COPIES * n * self.embed_dim
                   for n, w in self._type_sizes() if w == 0)

    def describe(self) -> str:
        """``N nodes and M edges``, with the types when it has them."""
        text = f"{self.nodes:,} nodes and {self.edges:,} edges"
        if not self.typed:
            return text
        names = self.type_names or [f"type{i}" for i in range(len(self.node_types))]
        kinds = ", ".join(f"{t} {n:,}" + (f" F={w}" if w else f" learned {self.embed_dim}")
                          for t, (n, w) in zip(names, self._type_sizes()))
        return f"{text} ({kinds})"

    @property
    def mean_degree(self) -> float:
        return self.edges / self.nodes

    def degrees(self) -> np.ndarray:
        """The degree quantiles at this graph's mean degree."""
        return np.asarray(self.rel_degrees) * self.mean_degree

    def cut(self, parts: int) -> float:
        """Fraction of edges between different parts of a METIS partition into ``parts``:
        the measured cuts, interpolated and extrapolated linearly in log2(parts), at most a
        random partition's ``1 - 1 / parts``."""
        if parts <= 1:
            return 0.0
        xs = np.arange(1, len(self.edge_cuts) + 1, dtype=np.float64)
        x, ys = math.log2(parts), np.asarray(self.edge_cuts)
        if len(ys) == 1 or x <= xs[-1]:
            value = float(np.interp(x, xs, ys)) if x >= 1 else ys[0] * x
            if len(ys) == 1 and x > 1:  # one point: recursive bisection, same fraction a level
                value = 1 - (1 - ys[0]) ** x
        else:
            value = ys[-1] + (ys[-1] - ys[-2]) * (x - xs[-1])
        return float(min(max(value, 0.0), 1 - 1 / parts))

    def public(self) -> dict[str, Any]:
        skip = {"rel_degrees", "type_names"} | (set() if self.node_types else
                                                  {"node_types", "embed_dim"})
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in skip}


@dataclasses.dataclass(frozen=True)
class Workload:
    """The model, its batching and the task: ``model`` one of :data:`WEIGHTS`, ``fanouts``
    input layer first (their count is the depth; the full-graph strategies use the depth
    alone), ``task`` one of :data:`TASK_NAMES`."""

    model: str = "gcn"
    hidden: int = 64
    fanouts: tuple[int, ...] = (10, 25)
    batch_size: int = 1000
    """Seeds per rank per step (sampled strategies); the link task: training edges per rank
    per step (every strategy)."""
    task: str = "node"
    """``node`` classification, or ``link`` prediction on the graph's edges
    (:mod:`dglx_dist.tasks.link`: the training graph holds the training pairs' two
    directions, a step scores its edges and ``negatives`` uniform negatives each)."""
    negatives: int = 1
    """The link task: uniform negatives per training edge."""
    train_edges: int | None = None
    """The link task: training edges an epoch (None: every edge of the training graph)."""
    loaders: bool = False
    """Trained under the drop-in API's DataLoaders (a script's, the runner's): a full-graph
    strategy (granndis, fullgraph) takes a co-batch per batch of the loader (their
    ``co_batches=-1``), as many steps as sampled mini-batches; else (``dglx train``'s
    Trainer) one full-graph step an epoch."""

    def __post_init__(self) -> None:
        if self.model not in WEIGHTS:
            raise InvalidValueError(f"Workload: model {self.model!r}; the cluster model knows "
                                    f"{', '.join(WEIGHTS)}")
        if self.task not in TASK_NAMES or self.batch_size < 1 or self.negatives < 1 or (
                self.train_edges is not None and self.train_edges < 1):
            raise InvalidValueError(f"Workload: task {self.task!r}, batch_size "
                                    f"{self.batch_size}, negatives {self.negatives}, "
                                    f"train_edges {self.train_edges}; expected a task of "
                                    f"{', '.join(TASK_NAMES)} and counts >= 1 (train_edges: or "
                                    f"None, all)")

    @property
    def layers(self) -> int:
        return len(self.fanouts)

    @property
    def link(self) -> bool:
        return self.task == "link"

    def dims(self, graph: GraphShape) -> list[int]:
        """Widths of the layers' inputs and of the output: F, hidden..., classes (the link
        task: embeddings ``hidden`` wide)."""
        out = self.hidden if self.link else graph.num_classes
        return [graph.feat_dim] + [self.hidden] * (self.layers - 1) + [out]

    def params(self, graph: GraphShape) -> int:
        dims = self.dims(graph)
        return sum(WEIGHTS[self.model] * a * b + b for a, b in zip(dims, dims[1:]))

    def trained(self, graph: GraphShape) -> GraphShape:
        """The graph messages pass over: ``graph``; for the link task its training graph,
        both directions of the training pairs of its ``edges / 2`` undirected pairs
        (:func:`split_sizes`)."""
        if not self.link:
            return graph
        return dataclasses.replace(graph, edges=max(1, 2 * split_sizes(graph.edges // 2)[2]))

    def epoch_items(self, graph: GraphShape) -> float:
        """What an epoch trains on, of ``graph`` as :meth:`trained` gives it: its training
        nodes; for the link task its edges (``train_edges`` of them, at most all)."""
        if not self.link:
            return graph.nodes * graph.train_frac
        return float(min(self.train_edges or graph.edges, graph.edges))


WEIGHTS = {"gcn": 1, "sage": 2, "gat": 4, "resgcn": 1}
"""Weight matrices per layer of each model the cluster model knows (SAGE: self and neighbour;
GAT: its 4 heads, their attention scores not counted; ResGCN+: a GCN layer, its norms and
residuals not counted). Only ``gcn`` was checked against measured runs
(docs/cluster_model.md)."""


@dataclasses.dataclass(frozen=True)
class Cluster:
    """``servers`` x ``ranks_per_server`` ranks; servers joined by ``link_gbit`` links."""

    servers: int
    ranks_per_server: int
    link_gbit: float = 1.0
    latency_s: float = 0.0
    """One-way latency between servers, paid once per round of messages that crosses them
    (:attr:`~dglx_dist.strategies.cost.counts.Work.rounds`)."""
    memory_bytes: float | None = None
    """Memory of one server, shared by its ranks (None: not checked)."""
    shared_cores: int | None = None
    """All ranks share this many cores (one machine emulating the cluster, as in validation);
    None: every rank has its own."""
    server_cores: int | None = None
    """Cores of one server, shared by its ranks (where ``shared_cores`` is None; None: not
    known, each rank taken to have a core for its loader's worker thread beside its model's
    and none for sampler processes)."""
    compute_speedup: float = 1.0
    """How much faster a rank runs the model's math than one core of the machine the units
    were measured on (a GPU, or the threads of a many-core server)."""
    sample_speedup: float = 1.0
    """The same for sampling and gathering rows (sampler processes, threads)."""

    def __post_init__(self) -> None:
        if min(self.servers, self.ranks_per_server) < 1 or not self.link_gbit > 0 or \
                self.latency_s < 0 or (self.memory_bytes is not None and self.memory_bytes <= 0) \
                or any(c is not None and c < 1 for c in (self.shared_cores, self.server_cores)):
            raise InvalidValueError(f"Cluster{(self.servers, self.ranks_per_server)}: expected "
                                    f">= 1 servers and ranks per server, a link rate > 0, a "
                                    f"latency >= 0, memory > 0 and >= 1 cores (link "
                                    f"{self.link_gbit} Gbit/s, latency {self.latency_s} s, memory "
                                    f"{self.memory_bytes}, cores {self.shared_cores} shared, "
                                    f"{self.server_cores} a server)")

    @property
    def world(self) -> int:
        return self.servers * self.ranks_per_server

    def contention(self) -> float:
        """How many ranks share each core (1 where each has its own)."""
        return 1.0 if self.shared_cores is None else max(1.0, self.world / self.shared_cores)

    def cores_per_rank(self) -> float | None:
        """The cores each rank has for its model, its loader's worker thread and its sampler
        processes (None: not known)."""
        if self.shared_cores is not None:
            return self.shared_cores / self.world
        return None if self.server_cores is None else self.server_cores / self.ranks_per_server


@dataclasses.dataclass(frozen=True)
class Units:
    """One rank's unit costs (:mod:`dglx_dist.planner.units`: documented defaults, or measured
    on this machine)."""

    sample_s_per_edge: float
    """Neighbour sampling and block building, per sampled edge."""
    gather_s_per_byte: float
    """Gathering feature rows from a local table, per byte."""
    spmm_s_per_edge_dim: float
    """Message passing (sum over in-edges), per edge and feature column."""
    dense_s_per_flop: float
    """Dense matrix products, per floating-point operation."""
    intra_s_per_byte: float
    """Sending to another process of the same server (TCP over loopback), per byte."""
    round_s: float = 0.0
    """A round of messages that crosses servers, beyond the link's latency: the collective's
    own software and the network stack of both ends (CPU time: x ranks per core where
    shared)."""

    def public(self) -> dict[str, float]:
        return {k: float(f"{v:.4g}") for k, v in dataclasses.asdict(self).items()}
