"""The package's graphs and datasets as DGL's: :func:`to_dgl`, the one path from the package's
:class:`~dglx_dist.graphcore.heterograph.Graph` (or a dataset) to DGL's DGLGraph. Public as
``dglx_dist.data.to_dgl`` and ``dglx_dist.to_dgl`` (docs/dataset_format.md), which import it
from here when it is first asked for; :func:`~dglx_dist.data.convert.user_graph` calls it where
DGL is installed. The other way, :func:`~dglx_dist.data.convert.from_dgl`, reads DGL's graph
and the package's through the same API without importing DGL, so it stays in the core.
"""
from __future__ import annotations

import dgl

from dglx_dist.data.dataset import GraphDataset
from dglx_dist.graphcore.construct import to_graph
from dglx_dist.graphcore.heterograph import Graph

__all__ = ["to_dgl"]


def to_dgl(source: GraphDataset | Graph):
    """DGL's graph of a dataset (its edges in file order and its node and edge data, as
    :func:`~dglx_dist.graphcore.construct.to_graph` gives them) or of the package's
    :class:`~dglx_dist.graphcore.heterograph.Graph` (its edges, types and data: a pair graph at
    the edge), on the graph's device. A graph without types becomes
    DGL's homogeneous graph (its types are DGL's ``_N`` and ``_E``)."""
    g = to_graph(source) if isinstance(source, GraphDataset) else source
    out = dgl.heterograph({et: g.edges(etype=et) for et in g.canonical_etypes},
                          num_nodes_dict={t: g.num_nodes(t) for t in g.ntypes},
                          idtype=g.idtype, device=g.device)
    for t in g.ntypes:
        out.nodes[t].data.update(g.nodes[t].data)
    for et in g.canonical_etypes:
        out.edges[et].data.update(g.edges[et].data)
    return out
