"""``dorylus``'s cost (:class:`~dglx_dist.strategies.cost.Cost`): its epoch law, its per-step
overhead (its executor's round trips among it) and its measured memory fit; no options are
chosen."""
from __future__ import annotations

import dataclasses

from dglx_dist.memory import MemoryModel
from dglx_dist.strategies.cost import Cost
from dglx_dist.strategies.cost.counts import F32, Work, full_compute, halo_rows, split
from dglx_dist.strategies.cost.shapes import Cluster, GraphShape, Workload

__all__ = ["COST", "epoch"]


def epoch(graph: GraphShape, work: Workload, cluster: Cluster) -> Work:
    """Each rank is a graph server of one METIS part with ghost rows: after every layer but the
    last its scatter sends the new rows to the ghosts that read them (gradients back);
    tensor tasks ship each interval's rows to the executor and back (inside the server)."""
    w = cluster.world
    total = halo_rows(graph, w, graph.cut(w))
    base = full_compute(graph, work, graph.nodes / w, total / w, graph.edges / w)
    dims = work.dims(graph)
    ghosts = total * 2 * sum(dims[1:-1]) * F32
    inter_frac = graph.cut(cluster.servers) / graph.cut(w) if w > 1 else 0.0
    inter, intra = split(ghosts, inter_frac)
    tasks = graph.nodes * 2 * sum(a + b for a, b in zip(dims, dims[1:])) * F32
    rounds = 2 * (work.layers - 1) if cluster.servers > 1 else 0
    return dataclasses.replace(base, inter_bytes=inter, intra_bytes=intra, offload_bytes=tasks,
                               rounds=rounds)


COST = Cost(law=epoch, full_graph=True, overhead_s_per_step=0.126,
            memory=MemoryModel(base=631 * 2**20, per_node=5880, per_edge=122.1))
