"""``p3``: P3 (OSDI'21), its paper's terms and where they live.

* Hash partitioning of structure, feature-dimension partitioning of features: the
  ``feature_dim`` partitioner over ``hash`` (:mod:`dglx_dist.partition.feature_dim`), asked for
  by :class:`P3Strategy`.
* Push-pull parallelism (layer 1 model parallel on feature slices "1M", partial activations
  reduced to their owners, "1D" and layers 2..k data parallel): :mod:`.strategy`
  (:class:`P3Strategy`) and the split first layer in :mod:`.layer` (:class:`P3FirstLayer`,
  :class:`ColumnSlice`).
* Pipelining (2-forward-2-backward, staleness bound 3, weight stashing): :mod:`.layer`
  (``pipeline=true``).
* Caching (structure and feature slices replicated on every server within a budget):
  :func:`plan_cache` and :class:`CachePlan` in :mod:`.strategy` (``cache_mb``).
* Graphs with node and edge types (an R-GCN): the featured types' input projections split by
  feature columns, :mod:`.projections` (:class:`~.projections.SplitProjections`; not the
  one-type case of the first layer's split, which splits a graph conv).
* Its cost (epoch law, ``pipeline`` chosen, overhead, memory fits): :mod:`.cost`.
"""
from dglx_dist.strategies.p3.layer import ColumnSlice, P3FirstLayer
from dglx_dist.strategies.p3.strategy import CachePlan, P3Strategy, plan_cache

__all__ = ["P3Strategy", "P3FirstLayer", "ColumnSlice", "CachePlan", "plan_cache"]
