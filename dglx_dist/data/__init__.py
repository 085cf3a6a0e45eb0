"""Datasets: the in-memory graph (typed; a graph without types is the one-type case), its
directory formats, a graph without DGL (``graph`` / ``heterograph``), DGL conversion, the
synthetic generators, Cora."""
from dglx_dist.data.builtin import builtin_names, builtin_path
from dglx_dist.data.citation import CoraGraphDataset
from dglx_dist.data.construct import graph, heterograph
from dglx_dist.data.convert import from_dgl, to_dgl, to_graph, user_graph
from dglx_dist.data.dataset import DatasetMeta, EdgeTable, GraphDataset, NodeTable
from dglx_dist.data.format import is_hetero, read_dataset, read_meta, write_dataset
from dglx_dist.data.heterograph import Graph

__all__ = ["GraphDataset", "DatasetMeta", "NodeTable", "EdgeTable", "read_dataset", "read_meta",
           "write_dataset", "is_hetero", "to_dgl", "from_dgl", "builtin_path", "builtin_names",
           "CoraGraphDataset", "Graph", "graph", "heterograph", "to_graph", "user_graph"]
