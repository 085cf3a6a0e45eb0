"""dglx_dist: distributed GNN training strategies for DGL, chosen with one flag."""
import os as _os

# DGL asks for a backend on first import and writes ~/.dgl/config.json otherwise.
_os.environ.setdefault("DGLBACKEND", "pytorch")

from dglx_dist.api import (DataLoader, DistGraph, DistModel, DistNodeDataLoader,  # noqa: E402
                           DistTensor, NeighborSampler, MultiLayerFullNeighborSampler,
                           accuracy, all_reduce, distribute, export_parquet, inference,
                           node_split, parallelize)
from dglx_dist.data import (GraphDataset, builtin_path, from_dgl, read_dataset,  # noqa: E402
                            to_dgl, write_dataset)
from dglx_dist.partition import PARTITIONERS, PartitionDir, partition_dataset  # noqa: E402
from dglx_dist.registry import Registry  # noqa: E402
from dglx_dist.runtime import PeerError, Session, current_session, init  # noqa: E402
from dglx_dist.strategies import STRATEGIES, Strategy  # noqa: E402
from dglx_dist.trainer import Batch, Trainer  # noqa: E402

__version__ = "0.1.0"
__all__ = ["GraphDataset", "read_dataset", "write_dataset", "to_dgl", "from_dgl", "builtin_path",
           "PARTITIONERS", "partition_dataset", "PartitionDir", "Registry", "init",
           "current_session", "Session", "PeerError", "STRATEGIES", "Strategy", "Batch",
           "Trainer", "distribute", "DistGraph", "node_split", "DataLoader", "DistNodeDataLoader",
           "parallelize", "DistModel", "accuracy", "all_reduce", "inference", "export_parquet", "DistTensor", "NeighborSampler",
           "MultiLayerFullNeighborSampler", "__version__"]
