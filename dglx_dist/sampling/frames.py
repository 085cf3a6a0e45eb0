"""The rows on a :class:`~dglx_dist.sampling.block.Block`, read and written as on DGL's blocks.

DGL's names and semantics: ``block.srcdata[name]`` is the rows of the sources when the block
has one source type, else a dict of node type -> rows for the types that have the name (set
it the same way); ``block.srcnodes[ntype].data`` is one type's dict; ``block.edges[etype].data``
one edge type's (an edge type by its canonical triple or its name); ``block.edges()`` the
edges as ``(src, dst)`` (``form="all"``: with their positions). :class:`DataView` is the
graph's (:mod:`dglx_dist.data.frames`), over the block's rows. The ids are ``"_ID"`` (DGL's
``dgl.NID`` and ``dgl.EID``): the graph's node ids of each side, the user's edge ids. A
block finds its types through :class:`Typed`.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch

from dglx_dist.data.frames import DataView, etype_index, ntype_index
from dglx_dist.errors import InvalidValueError

__all__ = ["NID", "Typed", "DataView", "NodeSpace", "EdgeSpace"]

NID = "_ID"
"""DGL's ``dgl.NID`` (and ``dgl.EID``): the key of a block's node (edge) ids."""


class Typed:
    """DGL's type lookups of a graph of the package whose ``src`` and ``etype`` tensors hold
    each edge's source and type (edges in the order of their types): a
    :class:`~dglx_dist.sampling.block.Block`; ``kind`` names it in errors."""

    ntypes: tuple[str, ...]
    canonical_etypes: tuple[tuple[str, str, str], ...]
    src: torch.Tensor
    etype: torch.Tensor
    kind = "graph"

    def ntype_index(self, ntype: str) -> int:
        """The index of node type ``ntype`` among the graph's."""
        return ntype_index(self.ntypes, ntype, self.kind)

    def etype_index(self, etype) -> int:
        """The index of ``etype`` (canonical, or a name that names one type) among the
        graph's edge types."""
        return etype_index(self.canonical_etypes, etype, self.kind)

    def edges_of(self, etype: int) -> torch.Tensor:
        """The positions of the edges of type ``etype`` among the graph's edges."""
        if len(self.canonical_etypes) == 1:
            return torch.arange(self.src.numel(), device=self.src.device)
        return torch.nonzero(self.etype == etype).flatten()

    def num_edges(self, etype=None) -> int:
        if etype is None:
            return self.src.numel()
        return int(self.edges_of(self.etype_index(etype)).numel())


class NodeSpace:
    """``srcnodes`` / ``dstnodes`` of a block: ``[ntype].data`` one type's rows."""

    def __init__(self, block: "Typed", side: str):
        self._block, self._side = block, side

    def __getitem__(self, ntype: str) -> SimpleNamespace:
        return SimpleNamespace(data=self._block.frame(self._side,
                                                      self._block.ntype_index(ntype)))


class EdgeSpace:
    """``edges`` of a block: ``[etype].data`` one edge type's rows; ``(form, etype)`` its
    edges as ``(src, dst)`` indices (``form="all"``: and their positions among the type's
    edges, DGL's ``form="all"``; ``form="eid"``: the positions alone)."""

    def __init__(self, block: "Typed"):
        self._block = block

    def __getitem__(self, etype) -> SimpleNamespace:
        return SimpleNamespace(data=self._block.frame("edge", self._block.etype_index(etype)))

    def __call__(self, form: str = "uv", order: str = "eid", etype=None):
        block = self._block
        if form not in ("uv", "all", "eid"):
            raise InvalidValueError(f"edges(form={form!r}); expected 'uv', 'all' or 'eid'")
        if etype is None and len(block.canonical_etypes) > 1:
            raise InvalidValueError(f"edges(): the {block.kind} has several edge types; name "
                                    "one (etype=...)")
        index = 0 if etype is None else block.etype_index(etype)  # a wrong name refused
        if len(block.canonical_etypes) == 1:  # every edge: the block's own ends
            src, dst = block.src, block.dst
        else:
            at = block.edges_of(index)
            src, dst = block.src.index_select(0, at), block.dst.index_select(0, at)
        ids = torch.arange(src.numel(), device=src.device)
        if form == "eid":
            return ids
        return (src, dst, ids) if form == "all" else (src, dst)
