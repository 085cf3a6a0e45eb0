"""``p3``'s cost (:class:`~dglx_dist.strategies.cost.Cost`): its epoch law, its ``pipeline``
chosen (on with 3 or more steps an epoch: the layer-1 exchange of the next batches overlaps
the training of this one, staleness up to 3 steps), its per-step overhead and its measured
memory fits. It trains GCN, GraphSAGE and GAT, not ResGCN+ (whose features pass a Linear
first)."""
from __future__ import annotations

import dataclasses

from dglx_dist.memory import MemoryModel
from dglx_dist.strategies.cost import Choice, Cost, Situation
from dglx_dist.strategies.cost.counts import (F32, ID, Work, allreduce, kept, ring_rounds,
                                              sampled, sampled_steps, seeds_away, split)
from dglx_dist.strategies.cost.shapes import WEIGHTS, Cluster, GraphShape, Workload

__all__ = ["COST", "epoch"]


def epoch(graph: GraphShape, work: Workload, cluster: Cluster) -> Work:
    """One hash part and one feature slice per rank: the first block's structure goes to every
    rank, every rank's partial layer-1 rows of each batch are summed at its owner and the
    gradients go back, both in two stages (once across servers, then inside each); remote
    frontier nodes are sampled by their owners; the layers above the first are all-reduced (on
    a typed graph, the learned rows of featureless types are pulled and pushed as distdgl's)."""
    steps = sampled_steps(graph, work, cluster)
    blocks, base = sampled(graph, work, steps)
    w, s, g, deg = cluster.world, cluster.servers, cluster.ranks_per_server, graph.degrees()
    first = blocks[0]
    ids = 4 if graph.nodes < 2**31 else ID  # the packed block's id type
    block = (first.edges + first.src + first.dst) * ids
    partials = 2 * first.dst * work.hidden * F32  # this rank's partials out, gradients back
    # both go in two stages: across servers once per server, then inside every server
    staged = steps * w * (block + partials)
    sample = steps * w * sum(b.new * (w - 1) / w * (ID + 2 * ID * kept(deg, f, True))
                             for b, f in zip(blocks[1:], work.fanouts))
    away = seeds_away(graph, work, (w - 1) / w, (w - 1) / w)  # sampled by their owners
    sample += steps * w * away * (ID + 2 * ID * kept(deg, work.fanouts[-1], False))
    inter_frac = (w - g) / (w - 1) if w > 1 else 0.0
    sample_inter, sample_intra = split(sample, inter_frac)
    learned = steps * w * first.src * (w - 1) / w * (2 * graph.learned_bytes)
    learned_inter, learned_intra = split(learned, inter_frac)
    inter = staged * (s - 1) + sample_inter + learned_inter
    intra = staged * s * (g - 1) + sample_intra + learned_intra
    upper = work.params(graph) - WEIGHTS[work.model] * graph.feat_dim * work.hidden
    ar_inter, ar_intra = allreduce(graph, work, cluster, steps, upper)
    rounds = steps * (2 * work.layers + 1) + ring_rounds(cluster, steps) if s > 1 else 0
    return dataclasses.replace(base, inter_bytes=inter + ar_inter, intra_bytes=intra + ar_intra,
                               pull_inter_bytes=sample_inter + learned_inter, rounds=rounds)


def _choose(s: Situation, work: Work) -> Choice:
    typed = bool(s.graph.node_types)  # p3 refuses its pipeline on a typed graph
    on = s.option("pipeline", work.steps >= 3 and s.cluster.world > 1 and not typed)
    # its own pipeline takes the steps in turn; without it the loader's worker thread draws
    return Choice({"pipeline": True} if on else {}, work, s.peak_per_rank, overlap=bool(on),
                  pipelined=not on)


COST = Cost(
    law=epoch, models=("gcn", "sage", "gat"), chooser=_choose, overhead_s_per_step=0.0353,
    memory=MemoryModel(base=1126 * 2**20, per_node=0, per_edge=303.3),
    # typed graphs: docs/cluster_model.md "Graphs with node types" (R-GCN, mag-shaped)
    typed_memory=MemoryModel(base=753 * 2**20, per_node=0, per_edge=0.0,
                             per_feature_byte=6.95, per_embedding_byte=12.33))
