"""Datasets: the in-memory graph (typed; a graph without types is the one-type case), its
directory formats, a graph without DGL (``graph`` / ``heterograph``), DGL conversion, the
synthetic generators, Cora. :func:`to_dgl` is DGL's door's (:mod:`dglx_dist.dgl.conversion`),
imported from there when called, so that this package imports without DGL."""
from dglx_dist.data.builtin import builtin_names, builtin_path
from dglx_dist.data.citation import CoraGraphDataset
from dglx_dist.data.convert import from_dgl, user_graph
from dglx_dist.data.dataset import DatasetMeta, EdgeTable, GraphDataset, NodeTable
from dglx_dist.data.format import is_hetero, read_dataset, read_meta, write_dataset
from dglx_dist.graphcore.construct import graph, heterograph, to_graph
from dglx_dist.graphcore.heterograph import Graph

__all__ = ["GraphDataset", "DatasetMeta", "NodeTable", "EdgeTable", "read_dataset", "read_meta",
           "write_dataset", "is_hetero", "to_dgl", "from_dgl", "builtin_path", "builtin_names",
           "CoraGraphDataset", "Graph", "graph", "heterograph", "to_graph", "user_graph"]


def to_dgl(source: GraphDataset | Graph):
    """DGL's graph of a dataset or of the package's :class:`Graph`: the public name
    (docs/dataset_format.md) of :func:`dglx_dist.dgl.conversion.to_dgl`, which needs DGL and is
    imported when called (DGL is imported only in ``dglx_dist/dgl/``)."""
    from dglx_dist.dgl.conversion import to_dgl as door  # noqa: PLC0415 - DGL's door, on use

    return door(source)
