"""DGL's convs written in torch (issue 59), for training without DGL: each takes DGL's
constructor arguments, holds DGL's parameters under DGL's names and gives what ``dgl.nn``'s
module of the same name gives on the same block, so a ``state_dict`` of one loads into the
other. The graph is the package's :class:`~dglx_dist.graphcore.block.Block` (or anything with
``edges()``, ``num_src_nodes()`` and ``num_dst_nodes()``, a DGL block included). Nothing here
imports DGL."""
from dglx_dist.nn.gatconv import GATConv
from dglx_dist.nn.graphconv import GraphConv
from dglx_dist.nn.heteroconv import HeteroGraphConv
from dglx_dist.nn.relgraphconv import RelGraphConv, TypedLinear
from dglx_dist.nn.sageconv import SAGEConv

__all__ = ["GraphConv", "SAGEConv", "GATConv", "RelGraphConv", "TypedLinear", "HeteroGraphConv"]
