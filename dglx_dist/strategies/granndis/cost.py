"""The cost of ``granndis`` and ``fullgraph`` (:class:`~dglx_dist.strategies.cost.Cost`), by
the strategy's ``scope`` (:data:`COSTS`): the epoch law of each, their ``co_batches`` chosen,
their per-step overheads and measured memory fits.

``co_batches`` R > 1 where one co-batch does not fit: R co-batches hold 1/R of the
activations (the preload, or the part and its halo, stays whole), for R steps an epoch. Under
the drop-in API's DataLoaders (``Workload.loaders``) R is at least the loader's batches, as
their default ``co_batches=-1`` takes. Never for the link task: each of its steps is one
co-batch over the whole graph.
"""
from __future__ import annotations

import dataclasses

from dglx_dist.memory import MemoryModel
from dglx_dist.strategies.cost import Choice, Cost, Situation
from dglx_dist.strategies.cost.counts import (F32, Work, allreduce, closure_rows,
                                              exchange_dims, full_compute, halo_rows,
                                              ring_rounds, sampled_steps, split)
from dglx_dist.strategies.cost.shapes import Cluster, GraphShape, Workload
from dglx_dist.strategies.holdings import ACTIVATION_COPIES

__all__ = ["COSTS", "GRANNDIS_EAS", "fullgraph", "granndis"]

GRANNDIS_EAS = (1, 15)
"""GraNNDis's expansion-aware sampling defaults, (m, k): external nodes up to m hops from a
server's inner nodes, k external in-neighbours admitted per node and hop (-1: all)."""


def fullgraph(graph: GraphShape, work: Workload, cluster: Cluster) -> Work:
    """One METIS part per rank; before each conv every rank reads its halo rows from their
    owners (their gradients go back), across servers too."""
    w = cluster.world
    total = halo_rows(graph, w, graph.cut(w))
    base = full_compute(graph, work, graph.nodes / w, total / w, graph.edges / w)
    inter_frac = graph.cut(cluster.servers) / graph.cut(w) if w > 1 else 0.0
    inter, intra = split(total * exchange_dims(graph, work) * F32, inter_frac)
    ar_inter, ar_intra = allreduce(graph, work, cluster, 1)
    features = total * graph.feat_dim * F32 * inter_frac  # the first conv's input rows
    rounds = 2 * work.layers - 1 + ring_rounds(cluster, 1) if cluster.servers > 1 else 0
    return dataclasses.replace(base, inter_bytes=inter + ar_inter, intra_bytes=intra + ar_intra,
                               pull_inter_bytes=features, rounds=rounds)


def granndis(graph: GraphShape, work: Workload, cluster: Cluster) -> Work:
    """Each server preloads its part and the external nodes EAS admits (:data:`GRANNDIS_EAS`)
    once, at setup, and trains them full-graph, its ranks swapping halo rows inside the
    server; gradients cross servers once per step (all-reduce by server)."""
    s, g = cluster.servers, cluster.ranks_per_server
    inner = graph.nodes / s
    held = inner + closure_rows(graph, inner, graph.cut(s), *GRANNDIS_EAS)
    halo = halo_rows(graph, g, graph.cut(g), held)
    base = full_compute(graph, work, held / g, halo / g, graph.edges * held / graph.nodes / g)
    inter, _ = allreduce(graph, work, Cluster(s, 1), 1)  # one rank of each server
    intra = s * halo * exchange_dims(graph, work) * F32
    return dataclasses.replace(base, inter_bytes=inter, intra_bytes=intra,
                               rounds=ring_rounds(Cluster(s, 1), 1))


def _co_batches(s: Situation, work: Work) -> Choice:
    c, peak = s.cluster, s.peak_per_rank
    given = s.given.get("co_batches")
    if s.work.link:  # a link step: one co-batch
        return Choice({}, work, peak)
    nodes = work.gather_bytes / s.graph.row_bytes  # the rank's share of the held nodes
    act = nodes * F32 * ACTIVATION_COPIES * sum(s.work.dims(s.graph)[1:])
    fits = [] if peak is None or c.memory_bytes is None else [
        r for r in range(1, 65)
        if c.ranks_per_server * (peak - act * (1 - 1 / r)) <= c.memory_bytes]
    loader = sampled_steps(s.graph, s.work, c) if s.work.loaders else 1  # co_batches=-1
    chosen = max(loader, fits[0] if fits else 1)
    r = given if given is not None and given > 0 else chosen
    if r == 1:
        return Choice({}, work, peak)
    return Choice({} if r == loader and given is None else {"co_batches": r},
                  dataclasses.replace(work, steps=work.steps * r, rounds=work.rounds * r),
                  None if peak is None else peak - act * (1 - 1 / r))


COSTS = {"server": Cost(granndis, full_graph=True, chooser=_co_batches,
                        overhead_s_per_step=0.0053,
                        memory=MemoryModel(1508 * 2**20, 9921, 167.8),
                        typed_memory=MemoryModel(549 * 2**20, 0, 491.2, 5.08, 19.46)),
         "world": Cost(fullgraph, full_graph=True, chooser=_co_batches,
                       memory=MemoryModel(716 * 2**20, 8358, 122.2),
                       typed_memory=MemoryModel(636 * 2**20, 0, 440.4, 2.8, 13.21))}
"""The cost by ``scope``: ``server`` (``granndis``), ``world`` (``fullgraph``: nothing
preloaded); fits: peak RSS per rank, docs/cluster_model.md "Memory per rank"."""
