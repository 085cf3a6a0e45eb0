"""The rows on a :class:`~dglx_dist.sampling.block.Block`, read and written as on DGL's blocks.

DGL's names and semantics: ``block.srcdata[name]`` is the rows of the sources when the block
has one source type, else a dict of node type -> rows for the types that have the name (set
it the same way); ``block.srcnodes[ntype].data`` is one type's dict; ``block.edges[etype].data``
one edge type's (an edge type by its canonical triple or its name); ``block.edges()`` the
edges as ``(src, dst)`` (``form="all"``: with their positions). :class:`DataView` is the
graph's (:mod:`dglx_dist.data.frames`), over the block's rows. The ids are ``"_ID"`` (DGL's
``dgl.NID`` and ``dgl.EID``): the graph's node ids of each side, the user's edge ids.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING

import torch

from dglx_dist.data.frames import DataView
from dglx_dist.errors import InvalidValueError

if TYPE_CHECKING:
    from dglx_dist.sampling.block import Block

__all__ = ["NID", "DataView", "NodeSpace", "EdgeSpace"]

NID = "_ID"
"""DGL's ``dgl.NID`` (and ``dgl.EID``): the key of a block's node (edge) ids."""


class NodeSpace:
    """``srcnodes`` / ``dstnodes`` of a block: ``[ntype].data`` one type's rows."""

    def __init__(self, block: "Block", side: str):
        self._block, self._side = block, side

    def __getitem__(self, ntype: str) -> SimpleNamespace:
        return SimpleNamespace(data=self._block.frame(self._side,
                                                      self._block.ntype_index(ntype)))


class EdgeSpace:
    """``edges`` of a block: ``[etype].data`` one edge type's rows; ``(form, etype)`` its
    edges as ``(src, dst)`` indices (``form="all"``: and their positions among the type's
    edges, DGL's ``form="all"``)."""

    def __init__(self, block: "Block"):
        self._block = block

    def __getitem__(self, etype) -> SimpleNamespace:
        return SimpleNamespace(data=self._block.frame("edge", self._block.etype_index(etype)))

    def __call__(self, form: str = "uv", order: str = "eid", etype=None):
        block = self._block
        if etype is None and len(block.canonical_etypes) > 1:
            raise InvalidValueError("edges(): the block has several edge types; name one "
                                    "(etype=...)")
        at = block.edges_of(0 if etype is None else block.etype_index(etype))
        src, dst = block.src.index_select(0, at), block.dst.index_select(0, at)
        ids = torch.arange(at.numel(), device=at.device)
        return (src, dst, ids) if form == "all" else (src, dst)
