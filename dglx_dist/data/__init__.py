"""Datasets: the on-disk directory formats (homogeneous and typed), DGL conversion, the
synthetic generators, Cora."""
from dglx_dist.data.builtin import builtin_names, builtin_path
from dglx_dist.data.citation import CoraGraphDataset
from dglx_dist.data.convert import from_dgl, to_dgl
from dglx_dist.data.format import (DatasetMeta, GraphDataset, read_dataset, read_meta,
                                   write_dataset)
from dglx_dist.data.hetero import EdgeTable, HeteroDataset, NodeTable
from dglx_dist.data.hetero_format import is_hetero, read_hetero_dataset, write_hetero_dataset

__all__ = ["GraphDataset", "DatasetMeta", "read_dataset", "read_meta", "write_dataset",
           "to_dgl", "from_dgl", "builtin_path", "builtin_names", "CoraGraphDataset",
           "HeteroDataset", "NodeTable", "EdgeTable", "is_hetero", "read_hetero_dataset",
           "write_hetero_dataset"]
