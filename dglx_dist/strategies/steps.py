"""What a step of the drop-in API carries: its blocks (:class:`Blocks`: a plain list that also
holds the step's :class:`StepState`, never kept on the strategy, so prefetched and lazily
consumed batches train alike), the loader's spec and plan, and a sampled loader's epochs. The
blocks are the package's from the draw to the model (DGL's door makes them DGL's for a DGL
script's loader and at the edge of a model of ``dgl.nn``'s modules); docs/architecture.md,
"One batch, step by step".
"""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, Callable, Iterator, NamedTuple, Protocol

import torch

from dglx_dist.errors import InvalidValueError
from dglx_dist.graphcore.block import Block
from dglx_dist.graphcore.frames import NID
from dglx_dist.sampling.options import UNIFORM, SampleOptions

if TYPE_CHECKING:
    from dglx_dist.graphcore.heterograph import Graph

# DGL's DGLGraph (a user sampler's blocks or subgraph) is annotated ``Any``: only dglx_dist/dgl/
# imports DGL (issue 78).

__all__ = ["Blocks", "StepState", "Step", "EdgeStep", "UnderWay", "EdgeBatch", "PairMaker",
           "LoaderSpec", "LoaderPlan", "full_graph_loaders", "equal_step_sizes", "agreed_steps",
           "sampled_plan", "epoch_batches", "epoch_seed", "step_seed", "seeded_batches",
           "sampled_epoch", "step_graphs", "place_step", "node_blocks", "state_of", "OUT_DEGREE",
           "PREFETCH_FACTOR"]

OUT_DEGREE = "_dglx_out_degree"
"""``block.srcdata`` key of the sources' out-degrees in the whole graph, on blocks that hold
only a share of their sources' out-edges (the full-graph form over a rank's nodes): a conv
that normalises by source degrees is given rows rescaled to them."""
PREFETCH_FACTOR = 2
"""Steps a loader draws ahead of its loop by default, on its worker thread or on the calling
thread (DGL's ``prefetch_factor``)."""


@dataclasses.dataclass(frozen=True)
class StepState:
    """Per-step state read by the strategy's forward.

    Attributes:
        rows: which rows of the model's output are this step's output nodes (None: all).
        weight: the weight of this rank's (mean) loss in the job's gradient, applied to the
            output's gradient by strategies whose gradients cross ranks inside the model
            (None: none; DDP averages instead).
        epoch: the epoch the step belongs to (seeds dropout masks computed off the model).
        plan: strategy-specific handle of the step (a co-batch's output node type; P3's
            first layer, launched ahead of the step's forward).
    """

    rows: torch.Tensor | None = None
    weight: float | None = None
    epoch: int = 0
    plan: object = None


_STATE = "_dglx_step_state"  # a yielded block's attribute: the state of its step


class Blocks(list):
    """The blocks of one step (input layer first), with its :class:`StepState`.

    Each block is a local copy (``local_var()``: structure and data shared, its own frames) of
    the drawn one (which may be a strategy's static block, yielded again at later steps,
    whose frames a step's rows must not fill). A DGL block carries the state as an attribute,
    so the state survives what a script does to its blocks: DGL's ``block.to(device)``,
    ``.int()`` and ``.long()`` copy a graph's attributes, and ``[b.to(device) for b in
    blocks]`` keeps the blocks (:meth:`of` finds the state again); the package's block
    carries it the same way (its ``to`` keeps it)."""

    def __init__(self, blocks=(), state: StepState | None = None):
        state = state or StepState()
        super().__init__(_carrying(b, state) for b in blocks)
        self.state = state

    @classmethod
    def of(cls, blocks) -> "Blocks":
        """``blocks`` as a model got them: a :class:`Blocks`, or a list of one step's blocks
        (moved or cast by the script) with their step's state; blocks that did not come from
        a loader carry none (the default state)."""
        if isinstance(blocks, Blocks):
            return blocks
        blocks = list(blocks)
        states = [s for s in map(state_of, blocks) if s is not None]
        if any(s is not states[0] for s in states):
            raise InvalidValueError("model(blocks, x): the blocks come from different steps of "
                                    "the loader; pass the blocks of one step")
        return cls(blocks, states[0] if states else None)


def state_of(block) -> StepState | None:
    """The state of the step a block (as a model gets it) belongs to; None for a block that
    did not come from a loader."""
    return getattr(block, _STATE, None)


def _carrying(block, state: StepState):
    if not hasattr(block, "local_var"):
        return block
    block = block.local_var()  # shares the structure and the data; a step's writes to its
    object.__setattr__(block, _STATE, state)  # frames (the loader's prefetched rows) stay its
    return block  # own; the package's block is frozen, its attribute set past that


def node_blocks(inputs: torch.Tensor, outputs: torch.Tensor, num_layers: int) -> list[Block]:
    """Blocks without edges that name a step's nodes for a script to read
    (``blocks[0].srcdata[dgl.NID]``, ``blocks[-1].dstdata[dgl.NID]``,
    ``number_of_dst_nodes()``), for a strategy whose forward does not run on blocks (the
    edges stay where it computes): every layer maps ``inputs`` to ``inputs``, the last one
    to ``outputs``."""
    ends = [inputs] * num_layers + [outputs]
    return [Block.nodes_only(src, dst) for src, dst in zip(ends[:-1], ends[1:])]


class Step(NamedTuple):
    """One mini-batch as DGL's node loaders yield it."""

    input_nodes: torch.Tensor
    output_nodes: torch.Tensor
    blocks: "Blocks | Any"  # a graph: the subgraph of a sampler of subgraphs


class EdgeStep(NamedTuple):
    """One mini-batch as DGL's link-prediction loaders yield it (``neg_pair_graph``: None
    without a negative sampler); the pair graphs are the package's graphs (DGL's loaders in
    :mod:`dglx_dist.dgl` hand a script DGL's)."""

    input_nodes: torch.Tensor
    pair_graph: "Graph"
    neg_pair_graph: "Graph | None"
    blocks: "Blocks | Any"


class UnderWay(NamedTuple):
    """A loader's step whose exchanges have started on every rank."""

    finish: Callable[[], "Step | EdgeStep"]
    """Hands the step over: waits for its rows and may start exchanges of its own (the rows
    the loop will read itself), so every rank must call it at the same point."""
    drain: Callable[[], None]
    """Waits for the exchanges already started, and starts none: a loop left early (by a
    break on every rank, or by an error on one) leaves no peer waiting on this rank."""


class EdgeBatch(NamedTuple):
    """What an edge loader's batch of edge ids becomes before its blocks are sampled.

    Attributes:
        nodes: the pair graphs' nodes (partitioned ids, unique): the blocks' seeds.
        pair_graph / neg_pair_graph: the positive and negative pairs over ``nodes``.
        exclude: partitioned edge ids the blocks must not hold (None: no exclusion).
    """

    nodes: torch.Tensor
    pair_graph: "Graph"
    neg_pair_graph: "Graph | None"
    exclude: torch.Tensor | None


class PairMaker(Protocol):
    """What an edge loader's batch of edge ids becomes (:class:`~dglx_dist.api.link.EdgePairs`).

    Attributes:
        excludes: whether its batches exclude edges from the blocks (DGL's ``exclude``).
    """

    excludes: bool

    def __call__(self, eids: torch.Tensor, seed: int | None = None) -> EdgeBatch:
        """The batch of edge ids ``eids`` (collective); ``seed``: the step's
        (:func:`step_seed`), which its negatives are drawn with (None: torch's generator as
        it stands)."""


@dataclasses.dataclass(frozen=True)
class LoaderSpec:
    """What a :class:`~dglx_dist.api.DataLoader` was asked for.

    Attributes:
        fanouts: neighbours per layer, input layer first (-1: all), from the user's sampler;
            on a graph with types, per layer one fanout per edge type.
        batch_size: output nodes per batch.
        shuffle: reshuffle the ids every epoch.
        drop_last: drop the last, partial batch.
        seed: the shuffling seed (mixed with the epoch and the rank).
        pairs: for a link-prediction loader over edge ids, what makes a batch of them an
            :class:`EdgeBatch` (collective; None: a node loader; see :class:`PairMaker`).
        sampling: how each layer draws a node's in-edges (DGL's ``prob`` / ``mask`` /
            ``replace``).
        draw: a user's own sampler (:class:`~dglx_dist.dgl.samplers.UserSampler`):
            ``draw.draw(sampler, seeds, exclude)`` is the blocks (or one subgraph) it draws
            for ``seeds`` through the strategy's sampler, ``draw.seed(value)`` seeds an
            epoch's draws (None: the fanouts say).
        whole_degrees: the layers that take every in-neighbour (fanout -1) carry their
            sources' out-degrees in the whole graph (``srcdata[OUT_DEGREE]``), so a conv that
            normalises by source degrees (GraphConv) computes what it computes on the whole
            graph rather than on the block (the Trainer's evaluation; DGL's blocks, and so
            this package's by default, count a source's edges within the block).
    """

    fanouts: tuple[int, ...] | tuple[tuple[int, ...], ...]
    batch_size: int
    shuffle: bool = False
    drop_last: bool = False
    seed: int = 0
    pairs: "PairMaker | None" = None
    sampling: SampleOptions = UNIFORM
    draw: Any = None
    whole_degrees: bool = False


@dataclasses.dataclass(frozen=True, eq=False)
class LoaderPlan:
    """What a loader keeps between epochs: its steps per epoch (the same on every rank) and
    the strategy's own data (e.g. this rank's ids)."""

    steps: int
    data: object = None


def full_graph_loaders(num_layers: int, num_nodes: int,
                       seed: int = 0) -> tuple[LoaderSpec, LoaderSpec]:
    """The Trainer's loaders of full-graph training: full neighbourhoods, one batch of every
    rank's ids (a strategy with co-batches steps through them)."""
    full = (-1,) * num_layers
    return (LoaderSpec(full, num_nodes, shuffle=True, seed=seed),
            LoaderSpec(full, num_nodes, seed=seed))


def equal_step_sizes(n: int, steps: int, batch_size: int, drop_last: bool) -> list[int]:
    """Batch sizes that cut ``n`` ids into exactly ``steps`` batches of at most ``batch_size``.

    Every rank takes the same number of steps (sampling and gradient all-reduce are
    collective), so a rank whose ids make fewer batches than the longest rank's cuts them
    more finely: DGL's batches (``batch_size`` each, the last partial) when they come out at
    ``steps``, else ``n`` spread evenly over ``steps`` batches. Fewer ids than steps: some
    batches are empty (0 rows). With ``drop_last`` only whole batches are taken (the caller
    passes the smallest count over the ranks).
    """
    if drop_last:
        return [batch_size] * steps
    if math.ceil(n / batch_size) == steps:
        return [batch_size] * (n // batch_size) + ([n % batch_size] if n % batch_size else [])
    return [n // steps + (1 if i < n % steps else 0) for i in range(steps)]


def agreed_steps(comm, n: int, batch_size: int, drop_last: bool) -> int:
    """The steps every rank takes over its ``n`` items: the most batches any rank has (the
    fewest whole ones with ``drop_last``) (collective on ``comm``, every rank)."""
    mine = n // batch_size if drop_last else math.ceil(n / batch_size)
    counts = [int(c) for c in comm.all_gather(torch.tensor([mine]))]
    return min(counts) if drop_last else max(counts)


def sampled_plan(comm, ids: torch.Tensor, spec: LoaderSpec) -> LoaderPlan:
    """A sampled loader's plan: this rank's ids and the steps every rank takes
    (:func:`agreed_steps`; collective on ``comm``, every rank)."""
    return LoaderPlan(agreed_steps(comm, ids.numel(), spec.batch_size, spec.drop_last), ids)


def epoch_batches(rank: int, plan: LoaderPlan, spec: LoaderSpec,
                  epoch: int) -> Iterator[torch.Tensor]:
    """The ids of each of the epoch's ``plan.steps`` batches over ``plan``'s ids (shuffled
    with a seed of the epoch and rank when ``spec.shuffle``; a user's sampler seeded too)."""
    ids, steps = plan.data, plan.steps
    seed = epoch_seed(spec, epoch, rank)
    if spec.draw is not None:  # each epoch's draws by a user's sampler reproducible too
        spec.draw.seed(seed)
    order = ids
    if spec.shuffle:
        order = ids[torch.randperm(ids.numel(), generator=torch.Generator().manual_seed(seed))]
    sizes = equal_step_sizes(ids.numel(), steps, spec.batch_size, spec.drop_last)
    yield from torch.split(order[:sum(sizes)], sizes)


def epoch_seed(spec: LoaderSpec, epoch: int, rank: int) -> int:
    """The seed of a rank's epoch: its shuffle's, and (with the step's index) each step's
    draws'."""
    return spec.seed * 1_000_003 + epoch * 7919 + rank


def step_seed(spec: LoaderSpec, epoch: int, rank: int, step: int) -> int:
    """The seed of a rank's step: its sampler's draws and an edge loader's negatives are
    drawn from seeds derived from it, so a step draws the same wherever and whenever it is
    taken, and no two ranks (nor steps) draw the same."""
    return (epoch_seed(spec, epoch, rank) * 1_000_003 + step) % 2**62


def seeded_batches(rank: int, plan: LoaderPlan, spec: LoaderSpec, epoch: int
                   ) -> Iterator[tuple[torch.Tensor, int, EdgeBatch | None]]:
    """Each of the epoch's batches (:func:`epoch_batches`) with its step's seed
    (:func:`step_seed`) and, for an edge loader, what ``spec.pairs`` makes of it with that
    seed (collective), else None."""
    for step, ids in enumerate(epoch_batches(rank, plan, spec, epoch)):
        seed = step_seed(spec, epoch, rank, step)
        yield ids, seed, None if spec.pairs is None else spec.pairs(ids, seed)


def sampled_epoch(sampler, rank: int, plan: LoaderPlan, spec: LoaderSpec,
                  epoch: int) -> Iterator[Step | EdgeStep]:
    """One epoch of sampled mini-batches over ``plan``'s ids, nodes or (with
    ``spec.pairs``) edges (``sampler``'s draws are collective: every rank takes
    ``plan.steps`` steps). The blocks are the package's (:class:`Blocks` of
    :class:`~dglx_dist.graphcore.block.Block`), drawn through ``sampler.draw_each`` (a
    loader's sampler processes draw them ahead), or DGL's where ``spec.draw`` draws them; a
    step's ``blocks`` is the one subgraph a ``spec.draw`` of subgraphs (ShaDow-GNN's)
    gives."""
    batches = seeded_batches(rank, plan, spec, epoch)
    if spec.draw is not None:
        drawn = ((batch, spec.draw.draw(sampler, *_seeds(batch))) for batch in batches)
    else:  # each step its own seed: it draws the same wherever and whenever it is taken
        drawn = sampler.draw_each((batch, _draw_args(batch, spec)) for batch in batches)
    for (seeds, _, batch), graphs in drawn:
        nodes = seeds if batch is None else batch.nodes
        if not isinstance(graphs, list):  # an induced subgraph, its seeds among its nodes
            inputs, outputs = graphs.ndata[NID], nodes
        else:  # (typed blocks: ids by type; on the host, where a device sampler drew)
            inputs, outputs = (_on_host(ids) for ids in (graphs[0].srcdata[NID],
                                                          graphs[-1].dstdata[NID]))
            graphs = Blocks(graphs, StepState(epoch=epoch))
        yield Step(inputs, outputs, graphs) if batch is None else \
            EdgeStep(inputs, batch.pair_graph, batch.neg_pair_graph, graphs)


def _seeds(batch: tuple) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A seeded batch's seeds and exclusions (:func:`seeded_batches`)."""
    seeds, _, pairs = batch
    return (seeds, None) if pairs is None else (pairs.nodes, pairs.exclude)


def _draw_args(batch: tuple, spec: LoaderSpec) -> tuple:
    """``draw_blocks``' arguments for a seeded batch: its seeds, the fanouts, its
    exclusions and the draws' options with the step's seed."""
    nodes, exclude = _seeds(batch)
    return nodes, spec.fanouts, exclude, dataclasses.replace(spec.sampling, seed=batch[1])


def _on_host(ids: torch.Tensor | dict) -> torch.Tensor | dict:
    """A step's ids (by type where they are a dict) on the host."""
    return {t: v.cpu() for t, v in ids.items()} if isinstance(ids, dict) else ids.cpu()


def step_graphs(step: Step | EdgeStep) -> list:
    """A step's blocks, or its subgraph as the one graph of its input and output nodes."""
    return step.blocks if isinstance(step.blocks, list) else [step.blocks]


def place_step(step: Step | EdgeStep, device: torch.device) -> Step | EdgeStep:
    """``step`` with its blocks (in place: they carry the step's state) and pair graphs on
    ``device``; the step itself on the CPU."""
    if device.type == "cpu":
        return step
    if not isinstance(step.blocks, list):  # a subgraph step
        step = step._replace(blocks=step.blocks.to(device))
    else:
        step.blocks[:] = [b.to(device) for b in step.blocks]
    if isinstance(step, EdgeStep):
        neg = step.neg_pair_graph
        return step._replace(pair_graph=step.pair_graph.to(device),
                             neg_pair_graph=None if neg is None else neg.to(device))
    return step
