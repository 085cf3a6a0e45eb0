"""Partitioners, the partition book, and the partition directory format.

Importing this package registers the built-in partitioners: ``hash``, ``metis``, ``feature_dim``.
Typed datasets are partitioned over their homogeneous view (:mod:`~dglx_dist.partition.base`);
:class:`GraphTypes` maps a typed partitioning's ids between that view and per-type ids.
:func:`import_dgl_partitions` turns the output of DGL's ``dgl.distributed.partition_graph`` into
a partition directory without repartitioning.
"""
from dglx_dist.partition import feature_dim as _feature_dim  # noqa: F401  (registers)
from dglx_dist.partition import hash as _hash  # noqa: F401  (registers)
from dglx_dist.partition import metis as _metis  # noqa: F401  (registers)
from dglx_dist.partition.base import PARTITIONERS, Partitioner, PartitionPlan
from dglx_dist.partition.book import FeatureSlices, HashBook, NodeBook, RangeBook
from dglx_dist.partition.dgl_import import NodeDataKeys, import_dgl_partitions
from dglx_dist.partition.driver import check_memory, partition_dataset
from dglx_dist.partition.layout import Partition
from dglx_dist.partition.load import PartitionDir
from dglx_dist.partition.quality import QualityReport
from dglx_dist.partition.types import GraphTypes

__all__ = ["PARTITIONERS", "Partitioner", "PartitionPlan", "NodeBook", "RangeBook", "HashBook",
           "FeatureSlices", "partition_dataset", "check_memory", "PartitionDir", "Partition",
           "QualityReport", "import_dgl_partitions", "NodeDataKeys", "GraphTypes"]
