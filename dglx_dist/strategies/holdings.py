"""What a rank holds at the job's widths (:class:`Holdings`): feature rows (its share of the
graph, a halo, a preload, a step's input rows), activations at the model's widths, the
parameters with their optimizer state, and the fixed budgets its options add (a cache); and
the job it is counted for (:class:`JobSize`: its graph, a
:class:`~dglx_dist.strategies.cost.shapes.GraphShape`, its ranks, and the model's widths in
:class:`ModelSize`).

Each :class:`~dglx_dist.strategies.abilities.Costed` strategy says which of these it
holds (its ``holdings``, in its own folder) with the plain functions here, counted from the
graph's sizes alone (every node of the mean degree). The measured fits of the strategies were
taken at one width (:data:`REFERENCE_FEAT_DIM`, :data:`REFERENCE`);
:func:`~dglx_dist.strategies.footprint.peak_per_rank` adds to a fit what the strategy holds
beyond what it held at those widths (docs/choosing.md, "Memory at the plan's widths").
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from dglx_dist.errors import InvalidValueError
from dglx_dist.strategies.cost import counts
from dglx_dist.strategies.cost.shapes import DEFAULT_CUTS, GraphShape, Workload

__all__ = ["ACTIVATION_COPIES", "BATCH_COPIES", "CHECK_CUTS", "PARAM_COPIES", "REFERENCE",
           "REFERENCE_FEAT_DIM", "Holdings", "JobSize", "ModelSize", "activation_bytes",
           "feature_bytes", "halo_rows", "minibatch_step_bytes",
           "param_bytes", "sampled_blocks", "sampled_step_bytes"]

F32 = 4
ACTIVATION_COPIES = 3
"""Activations a rank holds per layer and row: outputs, saved inputs, gradients (the plan's
co-batch chooser counts the same)."""
BATCH_COPIES = 3
"""A sampled step's input rows a rank holds at once: the step's, the next step's (the
loader's lookahead, P3's pipeline) and the pull's receive buffers. With 3, distdgl at 1M
nodes / 20M edges, F = 1024, 2 x 2 ranks comes to 5.9 GB a rank; about 6 GB was measured
(docs/cluster_model.md, "Memory per rank")."""
PARAM_COPIES = 4
"""Copies of the parameters: the weights, their gradients and Adam's two moments."""
REFERENCE_FEAT_DIM = 128
"""The feature width the fits for graphs without types were measured at."""
CHECK_CUTS = DEFAULT_CUTS[:1]
"""The cuts of a graph the memory check sizes (``dglx train``, :meth:`JobSize.homogeneous`):
the synthetic graph's cut into 2, the same fraction again at every bisection (above its
measured cuts into 4 and 8: an estimate on the high side)."""


@dataclasses.dataclass(frozen=True)
class ModelSize:
    """The model's widths, which the strategies' options do not know (their depth and
    batching come from the options: ``num_layers``, ``fanouts``, ``batch_size``).

    Attributes:
        hidden: width of the hidden layers.
        out: width of the output (the classes; the link task: its embeddings).
        weights: weight matrices a layer (GCN 1, GraphSAGE 2, GAT's 4 heads 4).
    """

    hidden: int = 64
    out: int = 16
    weights: int = 1

    def __post_init__(self):
        if min(self.hidden, self.out, self.weights) < 1:
            raise InvalidValueError(f"ModelSize(hidden={self.hidden}, out={self.out}, weights="
                                    f"{self.weights}): expected every width and count >= 1")

    def dims(self, feat_dim: float, layers: int) -> list[float]:
        """Widths of the layers' inputs and of the output: F, hidden..., out."""
        return [feat_dim] + [self.hidden] * (layers - 1) + [self.out]


REFERENCE = ModelSize()
"""The model of the fits' runs: a GCN, hidden 64, 16 classes (``benchmarks/cluster_model.py
memory``; fanouts 10,25 and 1000 seeds a rank, the strategies' defaults)."""


@dataclasses.dataclass(frozen=True)
class JobSize:
    """What a training job's memory estimate needs to know of it.

    Attributes:
        graph: the graph: its nodes and feature widths per node type, edges, learned-row
            width and METIS cuts.
        world: ranks in the job (servers x ranks per server).
        ranks_here: ranks on this machine, which share its memory.
        model: the model's widths (default: the fits' own, :data:`REFERENCE`).
        ranks_per_server: ranks of a server, which share what it preloads and caches
            (None: ``ranks_here``).
    """

    graph: GraphShape
    world: int
    ranks_here: int
    model: ModelSize = REFERENCE
    ranks_per_server: int | None = None

    def __post_init__(self):
        group = self.ranks_here if self.ranks_per_server is None else self.ranks_per_server
        if not 1 <= self.ranks_here <= self.world or not 1 <= group <= self.world:
            raise InvalidValueError(f"JobSize(world={self.world}, ranks_here={self.ranks_here}"
                                    f", ranks_per_server={self.ranks_per_server}): expected "
                                    "1 <= ranks_here <= world (and ranks_per_server)")

    @classmethod
    def homogeneous(cls, nodes: int, edges: int, world: int, ranks_here: int) -> "JobSize":
        """A job on a graph without types (sized by its nodes and edges, as measured at
        F = 128; cut by :data:`CHECK_CUTS`)."""
        return cls(GraphShape(int(nodes), int(edges), REFERENCE_FEAT_DIM,
                              edge_cuts=CHECK_CUTS), world, ranks_here)

    @property
    def group(self) -> int:
        """Ranks of a server."""
        return self.ranks_here if self.ranks_per_server is None else self.ranks_per_server

    @property
    def servers(self) -> int:
        return max(1, self.world // self.group)

    @property
    def nodes(self) -> float:
        return float(self.graph.nodes)

    @property
    def flat(self) -> GraphShape:
        """Its graph with every node of the mean degree, as what a rank holds is counted."""
        return dataclasses.replace(self.graph, rel_degrees=(1.0,))

    @property
    def degree(self) -> float:
        """Edges per node."""
        return self.graph.edges / self.nodes

    @property
    def row_bytes(self) -> float:
        """Mean bytes of a node's float32 feature row."""
        return self.graph.feature_bytes / self.nodes

    @property
    def feat_dim(self) -> float:
        """Mean feature width over the nodes."""
        return self.row_bytes / F32

    def at_reference(self) -> "JobSize":
        """This job at the widths the fits were measured at: features
        :data:`REFERENCE_FEAT_DIM` wide (every featured type), the :data:`REFERENCE` model."""
        types = tuple((share, REFERENCE_FEAT_DIM if w else 0)
                      for share, w in self.graph.node_types)
        graph = dataclasses.replace(self.graph, feat_dim=REFERENCE_FEAT_DIM, node_types=types)
        return dataclasses.replace(self, graph=graph, model=REFERENCE)


@dataclasses.dataclass(frozen=True)
class Holdings:
    """Bytes one rank holds that its fit does not scale with the widths.

    Attributes:
        features: float32 feature rows (its share, halo, preload, a step's input rows).
        activations: the layers' outputs at the model's widths, saved for backward, and
            their gradients.
        params: the parameters, their gradients and the optimizer's state.
        fixed: budgets its options set whatever the widths (a cache), which the fits'
            runs (default options) did not hold.
    """

    features: float = 0.0
    activations: float = 0.0
    params: float = 0.0
    fixed: float = 0.0

    @property
    def scaled(self) -> float:
        """What grows with the widths: features, activations and parameters."""
        return self.features + self.activations + self.params


def feature_bytes(job: JobSize, rows: float) -> float:
    """Bytes of ``rows`` feature rows of ``job``'s graph."""
    return rows * job.row_bytes


def param_bytes(job: JobSize, layers: int, first_share: float = 1.0) -> float:
    """The parameters of ``layers`` layers with their gradients and Adam's state (the first
    layer's weights: ``first_share`` of them, e.g. a feature-column slice)."""
    dims = job.model.dims(job.feat_dim, layers)
    weights = [a * b * (first_share if i == 0 else 1.0) + b
               for i, (a, b) in enumerate(zip(dims, dims[1:]))]
    return F32 * PARAM_COPIES * job.model.weights * sum(weights)


def activation_bytes(job: JobSize, rows: Sequence[float]) -> float:
    """Activations of ``len(rows)`` layers whose outputs have ``rows[i]`` rows at layer
    ``i``, with :data:`ACTIVATION_COPIES` copies."""
    widths = job.model.dims(job.feat_dim, len(rows))[1:]
    return F32 * ACTIVATION_COPIES * sum(r * w for r, w in zip(rows, widths))


def sampled_blocks(job: JobSize, fanouts: Sequence[int],
                   seeds: float) -> list[tuple[float, float]]:
    """(source rows, destination rows) of each sampled block of a step of ``seeds`` seeds,
    input layer first (-1: every in-edge; sources include the destinations): the plan's
    :func:`~dglx_dist.strategies.cost.counts.expansion` on :attr:`JobSize.flat`."""
    blocks = counts.expansion(job.flat, Workload(fanouts=tuple(fanouts)),
                              min(float(seeds), job.nodes))
    return [(b.src, b.dst) for b in blocks]


def sampled_step_bytes(job: JobSize, fanouts: Sequence[int], seeds: float,
                       copies: int = BATCH_COPIES) -> tuple[float, float]:
    """(feature bytes, activation bytes) of a sampled step: ``copies`` of its input rows,
    and its blocks' outputs."""
    blocks = sampled_blocks(job, fanouts, seeds)
    act = activation_bytes(job, [dst for _, dst in blocks])
    return copies * feature_bytes(job, blocks[0][0]), act


def halo_rows(job: JobSize, parts: int, own: float, pool: float | None = None) -> float:
    """Rows of the other ``parts - 1`` parts (of ``pool`` nodes, default all) that a part
    of ``own`` rows reads over its in-edges, with the job's cut into ``parts``."""
    reach = counts.halo_rows(job.flat, parts, job.graph.cut(parts), own)
    return max(0.0, min(reach, (job.nodes if pool is None else pool) - own))


def minibatch_step_bytes(job: JobSize, config) -> tuple[float, float]:
    """(feature bytes, activation bytes) of the larger sampled step of a mini-batch
    strategy's ``config`` (its ``fanouts``, ``batch_size``, ``eval_fanouts`` and
    ``eval_batch_size``): a training step, :data:`BATCH_COPIES` copies of its input rows, or
    an evaluation step, one copy (empty ``eval_fanouts``: every in-edge)."""
    train = sampled_step_bytes(job, config.fanouts, config.batch_size)
    fanouts = config.eval_fanouts or (-1,) * len(config.fanouts)
    evaluate = sampled_step_bytes(job, fanouts, config.eval_batch_size, copies=1)
    return max(train, evaluate, key=sum)
