"""Datasets: the on-disk directory format, DGL conversion, the synthetic generator, Cora."""
from dglx_dist.data.builtin import builtin_names, builtin_path
from dglx_dist.data.citation import CoraGraphDataset
from dglx_dist.data.convert import from_dgl, to_dgl
from dglx_dist.data.format import (DatasetMeta, GraphDataset, read_dataset, read_meta,
                                   write_dataset)

__all__ = ["GraphDataset", "DatasetMeta", "read_dataset", "read_meta", "write_dataset",
           "to_dgl", "from_dgl", "builtin_path", "builtin_names", "CoraGraphDataset"]
