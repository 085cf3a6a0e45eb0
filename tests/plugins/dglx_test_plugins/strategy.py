"""``range_distdgl``: DistDGL's mini-batch training on ``range`` parts.

A strategy plug-in names the partitions it needs (:meth:`partition_spec`) and inherits the
rest; here it asks for another plug-in's partitioner by its registered name.
"""
from __future__ import annotations

import dataclasses

from dglx_dist.runtime.topology import Topology
from dglx_dist.strategies.base import PartitionSpec
from dglx_dist.strategies.distdgl import DistDGLStrategy
from dglx_dist.strategies.minibatch import MiniBatchConfig


class RangeDistDGLStrategy(DistDGLStrategy):
    """DistDGL (sampling, KVStore, DDP) with one contiguous id range per server."""

    @dataclasses.dataclass(frozen=True)
    class Config(MiniBatchConfig):
        """DistDGL's options without METIS's balance constraints."""

    def partition_spec(self, topology: Topology) -> PartitionSpec:
        return PartitionSpec("range", topology.num_servers, {})
