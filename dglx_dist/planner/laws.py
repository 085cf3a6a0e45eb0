"""What each strategy does in one epoch, counted from the shapes alone (:class:`Work`): sampled
edges, gathered bytes, message passing, dense FLOPs per rank, the bytes every rank sends
inside and across servers, and the rounds of messages that cross servers. One law per
strategy in :data:`LAWS` (:func:`law` registers one); each follows the strategy's own
description (``dglx_dist.strategies``) and the paper's.

The counts use expected values over the degree distribution: a seed (a uniform training node)
keeps ``min(degree, fanout)`` in-edges, a sampled node (reached by an edge, so chosen in
proportion to its degree) keeps the degree-weighted mean of it; ``e`` draws of sampled nodes
hit ``sum_i 1 - exp(-e * d_i / edges)`` distinct nodes.

The link task (:attr:`Workload.task <dglx_dist.planner.shapes.Workload.task>`) is counted on
its training graph (:meth:`~dglx_dist.planner.shapes.Workload.trained`): an epoch is its
training edges over ``batch_size`` x world steps; a step's seeds are the distinct ends of its
edges (drawn by degree) and of their negatives (uniform), and its dense part adds the pairs'
dot products; a full-graph strategy takes its full-graph step at every one of those steps and
fetches the pairs' rows from the ranks that computed them (:func:`pair_steps`).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np

from dglx_dist.planner.shapes import WEIGHTS, Cluster, GraphShape, Workload

__all__ = ["GRANNDIS_EAS", "LAWS", "Block", "Law", "Work", "expansion", "halo_rows", "law",
           "pair_steps", "sampled_steps", "step_seeds"]

F32 = 4
ID = 8


@dataclasses.dataclass(frozen=True)
class Block:
    """One sampled block: source and destination nodes, edges; how many of the sources are
    new at this hop."""

    src: float
    dst: float
    edges: float
    new: float


@dataclasses.dataclass(frozen=True)
class Work:
    """One epoch of a strategy: per-rank work and all ranks' bytes."""

    steps: int
    sample_edges: float = 0.0
    gather_bytes: float = 0.0
    spmm_edge_dims: float = 0.0
    """Forward message passing (backward is counted as twice the forward)."""
    flops: float = 0.0
    """Forward dense FLOPs (backward: twice)."""
    inter_bytes: float = 0.0
    intra_bytes: float = 0.0
    offload_bytes: float = 0.0
    """Rows to tensor-task executors and back (Dorylus; not in the comm layer's counters)."""
    pull_inter_bytes: float = 0.0
    """The part of ``inter_bytes`` that fetches input rows from their owners (and the
    sampling requests that go with them); the rest exchanges activations and gradients."""
    rounds: float = 0.0
    """Rounds of messages that cross servers, one after the other (each waits a latency)."""


def _kept(deg: np.ndarray, fanout: int, weighted: bool) -> float:
    kept = np.minimum(deg, fanout if fanout > 0 else np.inf)  # -1: every in-edge
    return float((deg * kept).sum() / deg.sum() if weighted else kept.mean())


def _distinct(graph: GraphShape, draws: float, pool: float | None = None,
              uniform: float = 0.0) -> float:
    """Distinct nodes among ``draws`` degree-biased draws and ``uniform`` uniform ones (from
    ``pool`` nodes, default all)."""
    pool = graph.nodes if pool is None else pool
    q = np.asarray(graph.rel_degrees)
    return float(pool * np.mean(1 - np.exp(-(draws * q + uniform) / graph.nodes)))


def step_seeds(graph: GraphShape, work: Workload) -> tuple[float, float]:
    """A step's seeds, (chosen uniformly, chosen by degree): the batch's training nodes; for
    the link task, the distinct ends of its edges (by degree) and the distinct others of
    their negatives (uniform), fewer than ``batch_size x (2 + negatives)`` by collisions."""
    if not work.link:
        return float(work.batch_size), 0.0
    ends = _distinct(graph, 2 * work.batch_size)
    every = _distinct(graph, 2 * work.batch_size, uniform=work.batch_size * work.negatives)
    return every - ends, ends


def _seeds_away(graph: GraphShape, work: Workload, cut: float, away: float) -> float:
    """A step's seeds another part holds: none for the node task (a rank's seeds are its
    own); for the link task, an edge's source ``cut`` of the time (an edge is with its
    destination), a negative ``away`` of the time."""
    if not work.link:
        return 0.0
    uniform, ends = step_seeds(graph, work)
    return ends / 2 * cut + uniform * away


def _scoring(work: Workload) -> float:
    """Dense FLOPs of a step's link scores: a dot product of ``hidden`` columns per pair."""
    return 2.0 * work.batch_size * (1 + work.negatives) * work.hidden if work.link else 0.0


def expansion(graph: GraphShape, work: Workload, seeds: float,
              biased: float = 0.0) -> list[Block]:
    """The sampled blocks of ``seeds`` seeds chosen uniformly and ``biased`` chosen by degree,
    input layer first (as DGL's ``sample_neighbors`` + ``to_block`` build them: sources
    include the destinations)."""
    deg = graph.degrees()
    uniform, biased = float(seeds), float(biased)  # destinations chosen uniformly / by degree
    blocks: list[Block] = []
    for fanout in reversed(work.fanouts):
        dst = uniform + biased
        edges = uniform * _kept(deg, fanout, False) + biased * _kept(deg, fanout, True)
        new = _distinct(graph, edges) * (1 - dst / graph.nodes)
        blocks.append(Block(src=dst + new, dst=dst, edges=edges, new=new))
        biased += new
    return blocks[::-1]


def halo_rows(graph: GraphShape, parts: int, cut: float, nodes: float | None = None) -> float:
    """Rows all ``parts`` parts read from the others (a node counted once per part its
    out-edges reach), with ``cut`` of the edges between parts, over ``nodes`` nodes."""
    if parts <= 1 or cut <= 0:
        return 0.0
    deg = graph.degrees()
    per_node = (parts - 1) * (1 - (1 - cut / (parts - 1)) ** deg)
    return float((graph.nodes if nodes is None else nodes) * per_node.mean())


def _compute(work: Workload, dims: list[int], blocks: list[Block]) -> tuple[float, float]:
    """(message passing edge-dims, dense FLOPs) of a forward over ``blocks``: GraphConv
    multiplies first where that narrows the rows (DGL's order), SAGE likewise per weight."""
    spmm = flops = 0.0
    for b, d_in, d_out in zip(blocks, dims, dims[1:]):
        spmm += b.edges * min(d_in, d_out)
        rows = b.src if d_in > d_out else b.dst
        flops += 2 * WEIGHTS[work.model] * rows * d_in * d_out
    return spmm, flops


def _allreduce(graph: GraphShape, work: Workload, cluster: Cluster, steps: int,
               params: int | None = None) -> tuple[float, float]:
    """(inter, intra) bytes of ring all-reduces of the parameters, ``steps`` of them: each rank
    sends 2 (W-1)/W of them to its neighbour, ``servers`` of the W hops cross servers."""
    w, s = cluster.world, cluster.servers
    if w == 1:
        return 0.0, 0.0
    per_hop = 2 * (w - 1) / w * (params or work.params(graph)) * F32 * steps
    return (s if s > 1 else 0) * per_hop, (w - (s if s > 1 else 0)) * per_hop


def _split(total: float, inter_frac: float) -> tuple[float, float]:
    return total * inter_frac, total * (1 - inter_frac)


def _ring_rounds(cluster: Cluster, steps: int) -> float:
    """Rounds of ``steps`` ring all-reduces that cross servers (2 (W - 1) hops each)."""
    return 2.0 * (cluster.world - 1) * steps if cluster.servers > 1 else 0.0


@dataclasses.dataclass(frozen=True)
class Law:
    """A strategy's law and what kind of training it is.

    Attributes:
        work: the epoch's :class:`Work` from the graph, the workload and the cluster.
        full_graph: one optimizer step per epoch over full neighbourhoods (so more epochs to
            the same accuracy than sampled mini-batches: :func:`sampled_steps` of theirs).
        models: the models it trains (None: every one the model knows).
    """

    work: Callable[[GraphShape, Workload, Cluster], Work]
    full_graph: bool = False
    models: tuple[str, ...] | None = None

    def __call__(self, graph: GraphShape, work: Workload, cluster: Cluster) -> Work:
        trained = work.trained(graph)
        epoch = self.work(trained, work, cluster)
        return pair_steps(trained, work, cluster, epoch) if self.full_graph and work.link \
            else epoch

    def steps_once(self, work: Workload) -> bool:
        """One optimizer step an epoch: full-graph training of the node task (a link epoch
        takes a step per batch of edges under every strategy)."""
        return self.full_graph and not work.link


LAWS: dict[str, Law] = {}
"""The law of each strategy the model knows, by strategy name."""


def law(name: str, full_graph: bool = False, models: tuple[str, ...] | None = None):
    """Registers the decorated function as strategy ``name``'s law."""
    def register(fn):
        LAWS[name] = Law(fn, full_graph, models)
        return fn
    return register


def sampled_steps(graph: GraphShape, work: Workload, cluster: Cluster) -> int:
    """Steps an epoch of sampled mini-batches: its training nodes (or edges) over the batch
    of every rank."""
    return max(1, math.ceil(work.epoch_items(graph) / (work.batch_size * cluster.world)))


def _sampled(graph: GraphShape, work: Workload, steps: int) -> tuple[list[Block], Work]:
    """Blocks of one step and the per-rank compute of an epoch of sampled mini-batches."""
    blocks = expansion(graph, work, *step_seeds(graph, work))
    spmm, flops = _compute(work, work.dims(graph), blocks)
    flops += _scoring(work)
    return blocks, Work(steps=steps, sample_edges=steps * sum(b.edges for b in blocks),
                        gather_bytes=steps * blocks[0].src * graph.row_bytes,
                        spmm_edge_dims=steps * spmm, flops=steps * flops)


@law("distdgl")
def distdgl(graph: GraphShape, work: Workload, cluster: Cluster) -> Work:
    """Owner-compute seeds (the link task's: a share on other servers, :func:`_seeds_away`);
    a node h hops out is on another server with probability ``1 - (1 - cut(S)) ** h`` (near
    a remote seed: remote); remote feature rows are pulled (on a typed graph, the learned rows of featureless types
    too, and their gradients pushed back), remote frontier nodes are sampled by their owners
    (ids out, edges back); DDP all-reduces the gradients."""
    steps = sampled_steps(graph, work, cluster)
    blocks, base = _sampled(graph, work, steps)
    cut = graph.cut(cluster.servers)
    deg = graph.degrees()
    away = _seeds_away(graph, work, cut, 1 - 1 / cluster.servers)  # 0: the node task's
    share, row = away / blocks[-1].dst, graph.row_bytes + graph.learned_bytes + ID
    rows, sample = away, away * (ID + 2 * ID * _kept(deg, work.fanouts[-1], False))
    for hop, b in enumerate(reversed(blocks), 1):
        remote = b.new * (1 - (1 - share) * (1 - cut) ** hop)  # near a remote seed: remote
        rows += remote
        if hop < len(blocks):  # these nodes are the next block's destinations
            fanout = work.fanouts[len(blocks) - hop - 1]
            sample += remote * (ID + 2 * ID * _kept(deg, fanout, True))
    inter, intra = _allreduce(graph, work, cluster, steps)
    fetched = steps * cluster.world * (rows * row + sample)
    rounds = steps * 2 * work.layers + _ring_rounds(cluster, steps) if cluster.servers > 1 else 0
    return dataclasses.replace(base, inter_bytes=inter + fetched, intra_bytes=intra,
                               pull_inter_bytes=fetched, rounds=rounds)


@law("p3", models=("gcn", "sage", "gat"))  # not ResGCN+: its features pass a Linear first
def p3(graph: GraphShape, work: Workload, cluster: Cluster) -> Work:
    """One hash part and one feature slice per rank: the first block's structure goes to every
    rank, every rank's partial layer-1 rows of each batch are summed at its owner and the
    gradients go back, both in two stages (once across servers, then inside each); remote
    frontier nodes are sampled by their owners; the layers above the first are all-reduced (on
    a typed graph, the learned rows of featureless types are pulled and pushed as distdgl's)."""
    steps = sampled_steps(graph, work, cluster)
    blocks, base = _sampled(graph, work, steps)
    w, s, g, deg = cluster.world, cluster.servers, cluster.ranks_per_server, graph.degrees()
    first = blocks[0]
    ids = 4 if graph.nodes < 2**31 else ID  # the packed block's id type
    block = (first.edges + first.src + first.dst) * ids
    partials = 2 * first.dst * work.hidden * F32  # this rank's partials out, gradients back
    # both go in two stages: across servers once per server, then inside every server
    staged = steps * w * (block + partials)
    sample = steps * w * sum(b.new * (w - 1) / w * (ID + 2 * ID * _kept(deg, f, True))
                             for b, f in zip(blocks[1:], work.fanouts))
    away = _seeds_away(graph, work, (w - 1) / w, (w - 1) / w)  # sampled by their owners
    sample += steps * w * away * (ID + 2 * ID * _kept(deg, work.fanouts[-1], False))
    inter_frac = (w - g) / (w - 1) if w > 1 else 0.0
    sample_inter, sample_intra = _split(sample, inter_frac)
    learned = steps * w * first.src * (w - 1) / w * (2 * graph.learned_bytes)
    learned_inter, learned_intra = _split(learned, inter_frac)
    inter = staged * (s - 1) + sample_inter + learned_inter
    intra = staged * s * (g - 1) + sample_intra + learned_intra
    upper = work.params(graph) - WEIGHTS[work.model] * graph.feat_dim * work.hidden
    ar_inter, ar_intra = _allreduce(graph, work, cluster, steps, upper)
    rounds = steps * (2 * work.layers + 1) + _ring_rounds(cluster, steps) if s > 1 else 0
    return dataclasses.replace(base, inter_bytes=inter + ar_inter, intra_bytes=intra + ar_intra,
                               pull_inter_bytes=sample_inter + learned_inter, rounds=rounds)


def _full_compute(graph: GraphShape, work: Workload, nodes: float, halo: float,
                  edges: float) -> Work:
    """One full-graph step per epoch over ``nodes`` own nodes, ``halo`` rows read, ``edges``."""
    dims = work.dims(graph)
    blocks = [Block(src=nodes + halo, dst=nodes, edges=edges, new=halo)] * work.layers
    spmm, flops = _compute(work, dims, blocks)
    return Work(steps=1, gather_bytes=nodes * graph.row_bytes, spmm_edge_dims=spmm,
                flops=flops)


def pair_steps(graph: GraphShape, work: Workload, cluster: Cluster, epoch: Work) -> Work:
    """A full-graph strategy's link epoch: its full-graph ``epoch`` at each of the epoch's
    steps; at each, the rows of the pairs' nodes (``hidden`` wide) fetched from the ranks
    that computed them after a round of their ids, their gradients sent back
    (:mod:`dglx_dist.strategies.granndis.pairs`), and the pairs' scores."""
    steps, w, g = sampled_steps(graph, work, cluster), cluster.world, cluster.ranks_per_server
    scaled = {f.name: getattr(epoch, f.name) * steps for f in dataclasses.fields(Work)
              if f.name != "steps"}
    fetched = sum(step_seeds(graph, work)) * (w - 1) / w  # a rank's, computed elsewhere
    inter, intra = _split(steps * w * fetched * (ID + 2 * work.hidden * F32),
                          (w - g) / (w - 1) if w > 1 else 0.0)
    return Work(**{**scaled, "steps": steps, "flops": scaled["flops"] + steps * _scoring(work),
                   "inter_bytes": scaled["inter_bytes"] + inter,
                   "intra_bytes": scaled["intra_bytes"] + intra,
                   "rounds": scaled["rounds"] + (3 * steps if cluster.servers > 1 else 0)})


def _exchange_dims(graph: GraphShape, work: Workload) -> int:
    """Columns a halo row carries per epoch: every conv's input forward, its gradient backward
    except for the features."""
    dims = work.dims(graph)[:-1]
    return dims[0] + 2 * sum(dims[1:])


@law("fullgraph", full_graph=True)
def fullgraph(graph: GraphShape, work: Workload, cluster: Cluster) -> Work:
    """One METIS part per rank; before each conv every rank reads its halo rows from their
    owners (their gradients go back), across servers too."""
    w = cluster.world
    total = halo_rows(graph, w, graph.cut(w))
    base = _full_compute(graph, work, graph.nodes / w, total / w, graph.edges / w)
    inter_frac = graph.cut(cluster.servers) / graph.cut(w) if w > 1 else 0.0
    inter, intra = _split(total * _exchange_dims(graph, work) * F32, inter_frac)
    ar_inter, ar_intra = _allreduce(graph, work, cluster, 1)
    features = total * graph.feat_dim * F32 * inter_frac  # the first conv's input rows
    rounds = 2 * work.layers - 1 + _ring_rounds(cluster, 1) if cluster.servers > 1 else 0
    return dataclasses.replace(base, inter_bytes=inter + ar_inter, intra_bytes=intra + ar_intra,
                               pull_inter_bytes=features, rounds=rounds)


GRANNDIS_EAS = (1, 15)
"""GraNNDis's expansion-aware sampling defaults, (m, k): external nodes up to m hops from a
server's inner nodes, k external in-neighbours admitted per node and hop (-1: all)."""


def _closure(graph: GraphShape, inner: float, cut: float, hops: int, fanout: int) -> float:
    """External nodes a server of ``inner`` nodes preloads: up to ``hops`` hops out, at most
    ``fanout`` (-1: all) external in-neighbours of a node per hop."""
    deg = graph.degrees()
    cap = np.inf if fanout < 0 else fanout
    known, outside = inner, 0.0
    draws = inner * float(np.minimum(deg * cut, cap).mean())
    for _ in range(hops):
        new = _distinct(graph, draws, graph.nodes - known) if known < graph.nodes else 0.0
        outside, known = outside + new, known + new
        weighted = float((deg * np.minimum(deg, cap)).sum() / deg.sum())
        draws = new * weighted * (1 - known / graph.nodes)
    return outside


@law("granndis", full_graph=True)
def granndis(graph: GraphShape, work: Workload, cluster: Cluster) -> Work:
    """Each server preloads its part and the external nodes EAS admits (:data:`GRANNDIS_EAS`)
    once, at setup, and trains them full-graph, its ranks swapping halo rows inside the
    server; gradients cross servers once per step (all-reduce by server)."""
    s, g = cluster.servers, cluster.ranks_per_server
    inner = graph.nodes / s
    held = inner + _closure(graph, inner, graph.cut(s), *GRANNDIS_EAS)
    halo = halo_rows(graph, g, graph.cut(g), held)
    base = _full_compute(graph, work, held / g, halo / g, graph.edges * held / graph.nodes / g)
    inter, _ = _allreduce(graph, work, Cluster(s, 1), 1)  # one rank of each server
    intra = s * halo * _exchange_dims(graph, work) * F32
    return dataclasses.replace(base, inter_bytes=inter, intra_bytes=intra,
                               rounds=_ring_rounds(Cluster(s, 1), 1))


@law("dorylus", full_graph=True)
def dorylus(graph: GraphShape, work: Workload, cluster: Cluster) -> Work:
    """Each rank is a graph server of one METIS part with ghost rows: after every layer but the
    last its scatter sends the new rows to the ghosts that read them (gradients back);
    tensor tasks ship each interval's rows to the executor and back (inside the server)."""
    w = cluster.world
    total = halo_rows(graph, w, graph.cut(w))
    base = _full_compute(graph, work, graph.nodes / w, total / w, graph.edges / w)
    dims = work.dims(graph)
    ghosts = total * 2 * sum(dims[1:-1]) * F32
    inter_frac = graph.cut(cluster.servers) / graph.cut(w) if w > 1 else 0.0
    inter, intra = _split(ghosts, inter_frac)
    tasks = graph.nodes * 2 * sum(a + b for a, b in zip(dims, dims[1:])) * F32
    rounds = 2 * (work.layers - 1) if cluster.servers > 1 else 0
    return dataclasses.replace(base, inter_bytes=inter, intra_bytes=intra, offload_bytes=tasks,
                               rounds=rounds)
