"""``distdgl``'s cost: its epoch law, its options chosen (``server_pulls``, ``cache_mb``),
its per-step overhead and its measured memory fits (:class:`~dglx_dist.strategies.cost.Cost`).

- ``server_pulls`` on when a server's ranks would pull the same rows (more than
  :data:`MIN_SAVING` of them);
- ``cache_mb``: half of the memory the server has left after its ranks' estimated peaks, at
  most every remote row; a cache holding a fraction ``f`` of the remote rows serves
  :func:`cache_hits` of the pulls (measured at ogbn-products' size);
- ``reuse_mb`` (:data:`REUSE_MB` unless given; 0 where the memory the server has left after
  the cache does not hold its ranks' copies): the rows a rank keeps from its last steps serve
  :func:`reuse_hits` of the pulls the cache leaves, by how many steps' rows they hold (taken
  as any pull's: optimistic where the cache holds the rows pulled most).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from dglx_dist.kvstore.copies import capacity
from dglx_dist.memory import MemoryModel
from dglx_dist.strategies.cost import Choice, Cost, Situation
from dglx_dist.strategies.cost.counts import (ID, Work, allreduce, kept, ring_rounds,
                                              sampled, sampled_steps, seeds_away)
from dglx_dist.strategies.cost.shapes import Cluster, GraphShape, Workload

__all__ = ["CACHE_SHARE", "COST", "MIN_SAVING", "REUSE_MB", "cache_hits", "epoch",
           "reuse_hits"]

MIN_SAVING = 0.05
"""The share of a server's pulled rows that must be shared by its ranks to pull together."""
CACHE_SHARE = 0.5
"""The share of a server's free memory a cache takes (the rest is slack for what the memory
estimates miss: they count the features, the batches and the activations at the plan's
widths from the graph's sizes, not its degrees)."""
_HITS = ((0.0, 0.0), (0.1, 0.4), (0.2, 0.54), (1.0, 1.0))
REUSE_MB = 64.0
"""The default ``reuse_mb``: per rank, the remote rows of several steps at 1M nodes."""
_REUSE = ((0, 0.0), (1, 0.13), (2, 0.21), (4, 0.32), (8, 0.45), (16, 0.60), (50, 0.77))


def cache_hits(fraction: float) -> float:
    """Share of the remote pulls a cache of ``fraction`` of the remote rows serves: 10% of
    the rows served 40% of the pulls at ogbn-products' size and 20% served 54%
    (docs/benchmarks.md, "A cache of remote rows"); linear between, and to all at 100%."""
    xs, ys = zip(*_HITS)
    return float(np.interp(min(max(fraction, 0.0), 1.0), xs, ys))


def _less_pulled(work: Work, share: float) -> Work:
    """``work`` with ``share`` of its pulled bytes between servers read from copies instead."""
    return dataclasses.replace(work, inter_bytes=work.inter_bytes - share * work.pull_inter_bytes,
                               pull_inter_bytes=(1 - share) * work.pull_inter_bytes)


def reuse_hits(steps: float) -> float:
    """Share of a step's remote rows that one of the ``steps`` steps before it pulled: 13%
    for one, 32% for four, 60% for sixteen at 1M nodes (fanouts 10,25, batch 1000, two
    servers; docs/benchmarks.md, "Rows the last steps pulled"); linear between."""
    xs, ys = zip(*_REUSE)
    return float(np.interp(max(steps, 0.0), xs, ys))


def _reused(s: Situation, work: Work, taken: float) -> tuple[Work, float, dict[str, Any]]:
    """``work`` with the pulls the recent rows (``reuse_mb``) serve taken out, their bytes on
    a rank, and the option where it differs from the default: none (0) where the server's
    free memory less ``taken`` (the cache's) does not hold every rank's."""
    if s.cluster.servers < 2:  # no row is remote: nothing is kept
        return work, 0.0, {}
    budget = float(s.option("reuse_mb", REUSE_MB)) * 2**20
    free = s.free_per_server()
    if ("reuse_mb" not in s.given and free is not None
            and free - taken < budget * s.cluster.ranks_per_server):
        return work, 0.0, {"reuse_mb": 0.0}
    per_row = s.graph.row_bytes + s.graph.learned_bytes + ID
    held = capacity(budget, s.graph.nodes, s.graph.row_bytes)
    if held < 1:  # the budget does not hold a row
        return work, 0.0, {}
    rows = work.pull_inter_bytes / max(work.steps * s.cluster.world, 1) / per_row
    return _less_pulled(work, reuse_hits(held / max(rows, 1.0))), budget, {}


def epoch(graph: GraphShape, work: Workload, cluster: Cluster) -> Work:
    """Owner-compute seeds (the link task's: a share on other servers,
    :func:`~dglx_dist.strategies.cost.counts.seeds_away`); a node h hops out is on another
    server with probability ``1 - (1 - cut(S)) ** h`` (near a remote seed: remote); remote
    feature rows are pulled (on a typed graph, the learned rows of featureless types too, and
    their gradients pushed back), remote frontier nodes are sampled by their owners (ids out,
    edges back); DDP all-reduces the gradients."""
    steps = sampled_steps(graph, work, cluster)
    blocks, base = sampled(graph, work, steps)
    cut = graph.cut(cluster.servers)
    deg = graph.degrees()
    away = seeds_away(graph, work, cut, 1 - 1 / cluster.servers)  # 0: the node task's
    share, row = away / blocks[-1].dst, graph.row_bytes + graph.learned_bytes + ID
    rows, sample = away, away * (ID + 2 * ID * kept(deg, work.fanouts[-1], False))
    for hop, b in enumerate(reversed(blocks), 1):
        remote = b.new * (1 - (1 - share) * (1 - cut) ** hop)  # near a remote seed: remote
        rows += remote
        if hop < len(blocks):  # these nodes are the next block's destinations
            fanout = work.fanouts[len(blocks) - hop - 1]
            sample += remote * (ID + 2 * ID * kept(deg, fanout, True))
    inter, intra = allreduce(graph, work, cluster, steps)
    fetched = steps * cluster.world * (rows * row + sample)
    rounds = steps * 2 * work.layers + ring_rounds(cluster, steps) if cluster.servers > 1 else 0
    return dataclasses.replace(base, inter_bytes=inter + fetched, intra_bytes=intra,
                               pull_inter_bytes=fetched, rounds=rounds)


def _choose(s: Situation, work: Work) -> Choice:
    c, g = s.cluster, s.cluster.ranks_per_server
    options: dict[str, Any] = {}
    remote = s.graph.nodes * (1 - 1 / c.servers)  # rows on other servers
    if c.servers > 1 and g > 1:
        per_row = s.graph.row_bytes + s.graph.learned_bytes + ID
        rows = work.pull_inter_bytes / max(work.steps * c.world, 1) / per_row  # a rank's a step
        union = remote * (1 - (1 - min(rows / max(remote, 1), 1.0)) ** g)
        saving = 1 - union / max(g * rows, 1e-9)
        if s.option("server_pulls", saving >= MIN_SAVING):
            options["server_pulls"] = True
            shared = work.steps * c.servers * union * s.graph.row_bytes  # handed out inside
            work = dataclasses.replace(
                work, inter_bytes=work.inter_bytes - saving * work.pull_inter_bytes,
                pull_inter_bytes=(1 - saving) * work.pull_inter_bytes,
                intra_bytes=work.intra_bytes + shared)
    free = s.free_per_server()
    cache = 0.0
    if c.servers > 1 and free is not None and free > 0:
        cache = min(CACHE_SHARE * free, remote * s.graph.row_bytes)
    cache_mb = float(s.option("cache_mb", math.floor(cache / 2**20)))
    peak = s.peak_per_rank
    if cache_mb >= 1:
        options["cache_mb"] = cache_mb
        share = cache_mb * 2**20 / max(remote * s.graph.row_bytes, 1)
        work = _less_pulled(work, cache_hits(share))
        if "cache_mb" not in s.given:  # a given cache is in the strategy's own estimate
            peak = None if peak is None else peak + cache_mb * 2**20 / g
    work, kept, reuse = _reused(s, work, cache_mb * 2**20 if "cache_mb" in options else 0.0)
    options.update(reuse)
    peak = None if peak is None else peak + kept
    return Choice(options, work, peak, pipelined=True)  # its loader's worker thread


COST = Cost(
    law=epoch, chooser=_choose, overhead_s_per_step=0.0071,
    memory=MemoryModel(base=1250 * 2**20, per_node=0, per_edge=272.8),
    # typed graphs: dglx train's R-GCN on mag-shaped graphs (1/8-1/4 of ogbn-mag, F 128/512,
    # hidden 64/256), docs/cluster_model.md "Graphs with node types"
    typed_memory=MemoryModel(base=843 * 2**20, per_node=0, per_edge=0.0,
                             per_feature_byte=10.5, per_embedding_byte=9.68))
