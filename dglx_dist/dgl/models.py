"""Models made of ``dgl.nn``'s modules, at their edge: the package hands every model its own
blocks (:class:`~dglx_dist.graphcore.block.Block`); a model that holds modules of DGL's is
wrapped once (:func:`at_edge`, which :func:`~dglx_dist.convs.base.at_the_edge` finds here
by the library's name) so that it, and each of DGL's modules in it, gets DGL's blocks
(:func:`~dglx_dist.dgl.blocks.to_dgl_block`), as under a DGL script's loader. :data:`CONVS`
is the module of ``dgl.nn``'s convs that the reference models are built of under ``--convs
dgl`` (:mod:`dglx_dist.models.library`).
"""
from __future__ import annotations

import dgl.nn.pytorch
from torch import nn

from dglx_dist.dgl.blocks import dgl_blocks, to_dgl_block
from dglx_dist.graphcore.block import Block

__all__ = ["CONVS", "at_edge"]

CONVS = dgl.nn.pytorch
"""``dgl.nn``'s convs (``GraphConv``, ``SAGEConv``, ``GATConv``, ``HeteroGraphConv``...)."""

_WRAPPED = "_dglx_at_dgl_edge"  # a module's mark: its hook is on


def at_edge(model: nn.Module) -> None:
    """Makes ``model`` take the package's blocks: its call, and each call of a module of
    DGL's in it (a conv called directly: a layer-wise inference), converts the package's
    blocks among its first argument (a block, or a step's list of them) to DGL's; DGL's
    blocks and other arguments pass as they are. Once per module: a second call adds
    nothing."""
    for module in (model, *(m for m in model.modules() if _is_dgls(m))):
        if not getattr(module, _WRAPPED, False):
            module.register_forward_pre_hook(_to_dgl)
            setattr(module, _WRAPPED, True)


def _is_dgls(module: nn.Module) -> bool:
    return type(module).__module__.partition(".")[0] == "dgl"


def _to_dgl(module: nn.Module, args: tuple) -> tuple | None:
    if not args:
        return None
    first = args[0]
    if isinstance(first, Block):
        return (to_dgl_block(first), *args[1:])
    if isinstance(first, list) and any(isinstance(b, Block) for b in first):
        return (dgl_blocks(first), *args[1:])
    return None
