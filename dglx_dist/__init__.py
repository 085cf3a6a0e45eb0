"""dglx_dist: distributed GNN training strategies for DGL, chosen with one flag.

The public names below are imported on first use (PEP 562), so that ``import dglx_dist.runtime``
does not pull in ``dglx_dist.api``. Nothing needs DGL to import: the drop-in API, the Trainer
and the reference models train without it, link prediction included;
``tests/unit/test_import_boundary.py`` keeps it that way.
"""
import importlib as _importlib
import os as _os
import typing as _typing

# DGL asks for a backend on first import and writes ~/.dgl/config.json otherwise.
_os.environ.setdefault("DGLBACKEND", "pytorch")

# public name -> the module that defines it
_EXPORTS = {
    **dict.fromkeys(["DataLoader", "DistGraph", "DistModel", "DistNodeDataLoader",
                     "DistEdgeDataLoader", "DistTensor", "NeighborSampler",
                     "MultiLayerFullNeighborSampler", "as_edge_prediction_sampler",
                     "negative_sampler", "accuracy", "ranking_metrics", "all_reduce",
                     "distribute", "export_parquet", "inference", "node_split", "edge_split",
                     "parallelize"], "dglx_dist.api"),
    **dict.fromkeys(["GraphDataset", "builtin_path", "from_dgl", "read_dataset", "to_dgl",
                     "to_graph", "write_dataset", "Graph", "graph", "heterograph"],
                    "dglx_dist.data"),
    **dict.fromkeys(["PARTITIONERS", "PartitionDir", "partition_dataset"],
                    "dglx_dist.partition"),
    "Registry": "dglx_dist.registry",
    **dict.fromkeys(["DistEmbedding", "SparseAdam", "SparseAdagrad"], "dglx_dist.api.embedding"),
    **dict.fromkeys(["RunConfig", "OptimizerConfig"], "dglx_dist.config"),
    **dict.fromkeys(["PeerError", "Session", "current_session", "init"], "dglx_dist.runtime"),
    **dict.fromkeys(["STRATEGIES", "Strategy"], "dglx_dist.strategies"),
    **dict.fromkeys(["Batch", "Trainer"], "dglx_dist.trainer"),
    "plan": "dglx_dist.planner",
}

if _typing.TYPE_CHECKING:  # what type checkers and the API docs see; at run time, __getattr__ below
    from dglx_dist.api import (DataLoader, DistEdgeDataLoader, DistGraph, DistModel,
                               DistNodeDataLoader, DistTensor, MultiLayerFullNeighborSampler,
                               NeighborSampler, accuracy, all_reduce, as_edge_prediction_sampler,
                               distribute, edge_split, export_parquet, inference,
                               negative_sampler, node_split, parallelize, ranking_metrics)
    from dglx_dist.data import (Graph, GraphDataset, builtin_path, from_dgl, graph,
                                heterograph, read_dataset, to_dgl, to_graph, write_dataset)
    from dglx_dist.partition import PARTITIONERS, PartitionDir, partition_dataset
    from dglx_dist.planner import plan
    from dglx_dist.config import OptimizerConfig, RunConfig
    from dglx_dist.api.embedding import DistEmbedding, SparseAdagrad, SparseAdam
    from dglx_dist.registry import Registry
    from dglx_dist.runtime import PeerError, Session, current_session, init
    from dglx_dist.strategies import STRATEGIES, Strategy
    from dglx_dist.trainer import Batch, Trainer

__version__ = "0.1.0"
__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(_importlib.import_module(module), name)
    elif name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    else:
        # subpackages as attributes (``dglx_dist.strategies`` after a bare ``import dglx_dist``)
        try:
            value = _importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
