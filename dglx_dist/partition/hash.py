"""``hash``: P3's partitioner. A node's owner is a seeded hash of its id; no relabeling."""
from __future__ import annotations

import dataclasses

from dglx_dist.data.dataset import GraphDataset
from dglx_dist.partition.base import PARTITIONERS, Partitioner, PartitionPlan
from dglx_dist.partition.book import HashBook

__all__ = ["HashPartitioner"]


@PARTITIONERS.register("hash")
class HashPartitioner(Partitioner):
    """Owner = ``hash(id, seed) % num_parts``, computable anywhere without a lookup table.

    Each edge lives with its destination node's owner (in-edges), like every partitioner here.
    Ids keep their original values, so results need no mapping back.
    """

    @dataclasses.dataclass(frozen=True)
    class Config:
        seed: int = dataclasses.field(
            default=0, metadata={"help": "Seed of the node-id hash; change it to get another "
                                         "random balanced assignment."})

    def plan(self, ds: GraphDataset, num_parts: int) -> PartitionPlan:
        return PartitionPlan(HashBook(ds.num_nodes, num_parts, self.config.seed))
