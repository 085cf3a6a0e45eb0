"""``granndis`` and ``fullgraph``: GraNNDis (2023), its paper's terms and where they live.

* Shared preloading (each server holds its inner nodes' L-hop dependency subgraph, pulled once
  at setup), unified full-graph / mini-batch training, the ``fullgraph`` baseline:
  :mod:`.strategy` (:class:`GraNNDisStrategy`); the convs' row exchange: :mod:`.halo`
  (:class:`HaloConv`).
* Expansion-aware sampling (EAS: external max_hop m, external fanout k): :mod:`.eas`.
* Cooperative batching (fetch-then-split: server-level co-batches split over the server's
  ranks, rows swapped between layers): :mod:`.cobatch`.
* Graphs with node and edge types (a model of ``HeteroGraphConv``s), of which a graph without
  types is the one-type case: the same co-batches, their blocks numbered per node type and the
  row exchange per node type (:mod:`.cobatch`, :mod:`.halo`).
* The cost of each (epoch law, ``co_batches`` chosen, overhead, memory fits): :mod:`.cost`.
"""
from dglx_dist.strategies.granndis.halo import HaloConv
from dglx_dist.strategies.granndis.strategy import GraNNDisStrategy

__all__ = ["GraNNDisStrategy", "HaloConv"]
