"""What a strategy does in one epoch, counted from the shapes alone (:class:`Work`): sampled
edges, gathered bytes, message passing, dense FLOPs per rank, the bytes every rank sends
inside and across servers, and the rounds of messages that cross servers. Each strategy's
own law (its folder's ``cost.py``) is built from the counts here and follows the strategy's
description and the paper's.

The counts use expected values over the degree distribution: a seed (a uniform training node)
keeps ``min(degree, fanout)`` in-edges, a sampled node (reached by an edge, so chosen in
proportion to its degree) keeps the degree-weighted mean of it; ``e`` draws of sampled nodes
hit ``sum_i 1 - exp(-e * d_i / edges)`` distinct nodes.

The link task (:attr:`Workload.task <dglx_dist.strategies.cost.shapes.Workload.task>`) is
counted on its training graph (:meth:`~dglx_dist.strategies.cost.shapes.Workload.trained`):
an epoch is its training edges over ``batch_size`` x world steps; a step's seeds are the
distinct ends of its edges (drawn by degree) and of their negatives (uniform), and its dense
part adds the pairs' dot products; a full-graph strategy takes its full-graph step at every
one of those steps and fetches the pairs' rows from the ranks that computed them
(:func:`pair_steps`).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from dglx_dist.nn.graphconv import cheaper_first
from dglx_dist.strategies.cost.shapes import WEIGHTS, Cluster, GraphShape, Workload

__all__ = ["F32", "ID", "Block", "Work", "allreduce", "closure_rows", "compute", "distinct",
           "exchange_dims",
           "expansion", "full_compute", "halo_rows", "kept", "pair_steps", "ring_rounds",
           "sampled", "sampled_steps", "seeds_away", "split", "step_seeds"]

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


def kept(deg: np.ndarray, fanout: int, weighted: bool) -> float:
    """In-edges a node keeps at ``fanout`` (-1: every in-edge): a uniform node's mean, or
    (``weighted``) a node reached by an edge's."""
    keep = np.minimum(deg, fanout if fanout > 0 else np.inf)
    return float((deg * keep).sum() / deg.sum() if weighted else keep.mean())


def distinct(graph: GraphShape, draws: float, pool: float | None = None,
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
    ends = distinct(graph, 2 * work.batch_size)
    every = distinct(graph, 2 * work.batch_size, uniform=work.batch_size * work.negatives)
    return every - ends, ends


def seeds_away(graph: GraphShape, work: Workload, cut: float, away: float) -> float:
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
        edges = uniform * kept(deg, fanout, False) + biased * kept(deg, fanout, True)
        new = distinct(graph, edges) * (1 - dst / graph.nodes)
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


def closure_rows(graph: GraphShape, inner: float, cut: float, hops: int, fanout: int) -> float:
    """External nodes a server of ``inner`` nodes preloads: up to ``hops`` hops out over its
    in-edges, ``cut`` of a node's in-edges external, at most ``fanout`` (-1: all) external
    in-neighbours of a node per hop (GraNNDis's expansion-aware sampling)."""
    deg = graph.degrees()
    cap = np.inf if fanout < 0 else fanout
    known, outside = inner, 0.0
    draws = inner * float(np.minimum(deg * cut, cap).mean())
    for _ in range(hops):
        new = distinct(graph, draws, graph.nodes - known) if known < graph.nodes else 0.0
        outside, known = outside + new, known + new
        weighted = float((deg * np.minimum(deg, cap)).sum() / deg.sum())
        draws = new * weighted * (1 - known / graph.nodes)
    return outside


def compute(work: Workload, dims: list[int], blocks: list[Block]) -> tuple[float, float]:
    """(message passing edge-dims, dense FLOPs) of a forward over ``blocks`` on a CPU:
    GraphConv and SAGE (per weight) map the rows before the sum or after it as the package's
    convs choose (:func:`~dglx_dist.nn.graphconv.cheaper_first`: mostly after it on a
    sampled block); GAT projects first where that narrows the rows."""
    spmm = flops = 0.0
    for b, d_in, d_out in zip(blocks, dims, dims[1:]):
        first = d_in > d_out and (work.model == "gat" or
                                  cheaper_first(b.src, b.dst, b.edges, d_in, d_out))
        spmm += b.edges * (d_out if first else d_in)
        rows = b.src if first else b.dst
        flops += 2 * WEIGHTS[work.model] * rows * d_in * d_out
    return spmm, flops


def allreduce(graph: GraphShape, work: Workload, cluster: Cluster, steps: int,
              params: int | None = None) -> tuple[float, float]:
    """(inter, intra) bytes of ring all-reduces of the parameters, ``steps`` of them: each rank
    sends 2 (W-1)/W of them to its neighbour, ``servers`` of the W hops cross servers."""
    w, s = cluster.world, cluster.servers
    if w == 1:
        return 0.0, 0.0
    per_hop = 2 * (w - 1) / w * (params or work.params(graph)) * F32 * steps
    return (s if s > 1 else 0) * per_hop, (w - (s if s > 1 else 0)) * per_hop


def split(total: float, inter_frac: float) -> tuple[float, float]:
    """``total`` as (across servers, inside them)."""
    return total * inter_frac, total * (1 - inter_frac)


def ring_rounds(cluster: Cluster, steps: int) -> float:
    """Rounds of ``steps`` ring all-reduces that cross servers (2 (W - 1) hops each)."""
    return 2.0 * (cluster.world - 1) * steps if cluster.servers > 1 else 0.0


def sampled_steps(graph: GraphShape, work: Workload, cluster: Cluster) -> int:
    """Steps an epoch of sampled mini-batches: its training nodes (or edges) over the batch
    of every rank."""
    return max(1, math.ceil(work.epoch_items(graph) / (work.batch_size * cluster.world)))


def sampled(graph: GraphShape, work: Workload, steps: int) -> tuple[list[Block], Work]:
    """Blocks of one step and the per-rank compute of an epoch of sampled mini-batches."""
    blocks = expansion(graph, work, *step_seeds(graph, work))
    spmm, flops = compute(work, work.dims(graph), blocks)
    flops += _scoring(work)
    return blocks, Work(steps=steps, sample_edges=steps * sum(b.edges for b in blocks),
                        gather_bytes=steps * blocks[0].src * graph.row_bytes,
                        spmm_edge_dims=steps * spmm, flops=steps * flops)


def full_compute(graph: GraphShape, work: Workload, nodes: float, halo: float,
                 edges: float) -> Work:
    """One full-graph step per epoch over ``nodes`` own nodes, ``halo`` rows read, ``edges``."""
    dims = work.dims(graph)
    blocks = [Block(src=nodes + halo, dst=nodes, edges=edges, new=halo)] * work.layers
    spmm, flops = compute(work, dims, blocks)
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
    inter, intra = split(steps * w * fetched * (ID + 2 * work.hidden * F32),
                         (w - g) / (w - 1) if w > 1 else 0.0)
    return Work(**{**scaled, "steps": steps, "flops": scaled["flops"] + steps * _scoring(work),
                   "inter_bytes": scaled["inter_bytes"] + inter,
                   "intra_bytes": scaled["intra_bytes"] + intra,
                   "rounds": scaled["rounds"] + (3 * steps if cluster.servers > 1 else 0)})


def exchange_dims(graph: GraphShape, work: Workload) -> int:
    """Columns a halo row carries per epoch: every conv's input forward, its gradient backward
    except for the features."""
    dims = work.dims(graph)[:-1]
    return dims[0] + 2 * sum(dims[1:])
