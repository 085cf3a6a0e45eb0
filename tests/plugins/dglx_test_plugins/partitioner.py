"""``range``: part ``p`` owns the ``p``-th of ``num_parts`` contiguous id ranges, no relabeling.

The smallest useful partitioner: right for a graph whose ids already follow its locality (a
crawl order, a previous METIS run). Everything after the plan (HALO nodes, files) is dglx's.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from dglx_dist.data.dataset import GraphDataset
from dglx_dist.partition import PartitionPlan, Partitioner
from dglx_dist.partition.book import RangeBook


class RangePartitioner(Partitioner):
    """Equal contiguous ranges of node ids (the first ``num_nodes % num_parts`` one longer)."""

    @dataclasses.dataclass(frozen=True)
    class Config:
        pass

    def plan(self, ds: GraphDataset, num_parts: int) -> PartitionPlan:
        sizes = np.full(num_parts, ds.num_nodes // num_parts, dtype=np.int64)
        sizes[: ds.num_nodes % num_parts] += 1
        return PartitionPlan(RangeBook(np.concatenate([[0], np.cumsum(sizes)])))
