"""The conv types the strategies can run, one module each, behind one registry.

:mod:`.base` is the protocol (:class:`ConvAdapter`, :data:`LAYERS`, entry-point group
``dglx_dist.layers``) and says what a strategy asks of a conv; :mod:`.sage` (``SAGEConv``),
:mod:`.graphconv` (``GraphConv``) and :mod:`.gat` (``GATConv``) answer it for one conv type
each. Adding a conv type is one new module with one registered adapter (imported below, or
an entry point for a plug-in).
"""
from dglx_dist.convs.base import (LAYERS, ConvAdapter, ConvWrapper, DorylusSupport, InputLinear,
                                  adapter_for, feat_dropout, first_conv, graph_convs)
from dglx_dist.convs.gat import GATAdapter
from dglx_dist.convs.graphconv import GraphConvAdapter
from dglx_dist.convs.sage import SAGEAdapter

__all__ = ["LAYERS", "ConvAdapter", "ConvWrapper", "DorylusSupport", "InputLinear",
           "adapter_for", "feat_dropout", "first_conv", "graph_convs", "GATAdapter",
           "GraphConvAdapter", "SAGEAdapter"]
