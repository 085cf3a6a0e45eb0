"""The conv types the strategies can run, one folder each (``sage/``, ``graphconv/``,
``gat/``: its ``adapter.py``, ``dorylus.py`` and numpy ``ops.py``), behind one registry
(:mod:`.base`); the layout and how to add one: docs/architecture.md, "A conv type".

The public names are imported on first use (PEP 562), as in :mod:`dglx_dist`: importing this
package, a conv folder, or a folder's ``ops.py`` imports neither torch nor DGL, so a worker
process or the Lambda zip loads the numpy tasks alone (``dglx_dist.offload.tensor_fn``).
"""
import typing as _typing

if _typing.TYPE_CHECKING:  # what type checkers see; at run time, __getattr__ below
    from dglx_dist.convs.base import (LAYERS, ConvAdapter, ConvWrapper, DorylusSupport,
                                      InputLinear, adapter_for, feat_dropout, first_conv,
                                      graph_convs, is_foreign_conv, at_the_edge)
    from dglx_dist.convs.gat.adapter import GATAdapter
    from dglx_dist.convs.graphconv.adapter import GraphConvAdapter
    from dglx_dist.convs.sage.adapter import SAGEAdapter

__all__ = ["LAYERS", "ConvAdapter", "ConvWrapper", "DorylusSupport", "InputLinear",
           "adapter_for", "feat_dropout", "first_conv", "graph_convs", "is_foreign_conv",
           "at_the_edge", "GATAdapter", "GraphConvAdapter", "SAGEAdapter"]


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from dglx_dist.convs import base
    # the built-in conv types: importing an adapter registers it in LAYERS
    from dglx_dist.convs.gat.adapter import GATAdapter
    from dglx_dist.convs.graphconv.adapter import GraphConvAdapter
    from dglx_dist.convs.sage.adapter import SAGEAdapter

    builtin = {"GATAdapter": GATAdapter, "GraphConvAdapter": GraphConvAdapter,
               "SAGEAdapter": SAGEAdapter}
    return builtin[name] if name in builtin else getattr(base, name)
