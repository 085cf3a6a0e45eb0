"""Rows by type, read and written as DGL's ``ndata`` / ``edata``, and types by name.

A graph's (or a block's) rows are held per node type and per edge type, each type's as a
mapping of name -> tensor with one row per node (edge) of the type. :class:`DataView` is
DGL's view over them: with one type, that type's mapping itself (``g.ndata["feat"]`` is a
tensor); with several, ``view[name]`` is a dict of type -> rows for the types that have the
name, and is set the same way (DGL's ``g.ndata`` on a heterograph). One difference from
DGL's: a name no type has is a ``KeyError`` (an :class:`~dglx_dist.errors.UnknownNameError`),
not an empty dict, so ``name in view`` says whether some type has it.

:func:`ntype_index` and :func:`etype_index` find a type by its name as DGL does (an edge type
by its canonical triple, or by a relation name that names one type).

A block's rows (:class:`~dglx_dist.graphcore.block.Block`) are read through the same views, as on
DGL's blocks: ``block.srcdata[name]`` is the sources' rows when the block has one source type,
else a dict by type; ``block.srcnodes[ntype].data`` one type's dict (:class:`NodeSpace`);
``block.edges[etype].data`` one edge type's and ``block.edges()`` the edges
(:class:`EdgeSpace`). The ids are under ``"_ID"`` (:data:`NID`, DGL's ``dgl.NID`` and
``dgl.EID``). A graph or block finds its types through :class:`TypeLookup`.
"""
from __future__ import annotations

from collections.abc import MutableMapping
from types import SimpleNamespace
from typing import Iterator, Sequence

import torch

from dglx_dist.errors import InvalidTypeError, InvalidValueError, UnknownNameError

__all__ = ["DataView", "Rows", "ntype_index", "etype_index", "NID", "TypeLookup", "NodeSpace",
           "EdgeSpace"]

NID = "_ID"
"""DGL's ``dgl.NID`` (and ``dgl.EID``): the key of a block's node (edge) ids."""


def ntype_index(ntypes: Sequence[str], ntype, kind: str) -> int:
    """The index of node type ``ntype`` among ``ntypes`` of a ``kind`` ("graph", "block",
    for the message)."""
    if ntype not in ntypes:
        raise UnknownNameError(f"node type {ntype!r} is not one of the {kind}'s node types "
                               f"{list(ntypes)}")
    return list(ntypes).index(ntype)


def etype_index(canonical_etypes: Sequence[tuple[str, str, str]], etype, kind: str) -> int:
    """The index of ``etype`` (a canonical triple, or a relation name that names one type)
    among ``canonical_etypes``."""
    if isinstance(etype, (tuple, list)) and tuple(etype) in canonical_etypes:
        return list(canonical_etypes).index(tuple(etype))
    named = [i for i, e in enumerate(canonical_etypes) if e[1] == etype]
    if len(named) != 1:
        raise UnknownNameError(f"edge type {etype!r}: {len(named)} of the {kind}'s edge types "
                               f"have that name; expected one (or a canonical type of "
                               f"{list(canonical_etypes)})")
    return named[0]


class Rows(MutableMapping):
    """One type's rows on a graph: name -> a tensor of ``num`` rows (one per ``item``, "node"
    or "edge") on ``device``, checked when set as DGL's frames are; ``what`` names the type
    in messages."""

    def __init__(self, num: int, device: torch.device, what: str, item: str,
                 data: dict | None = None):
        self.num, self.device, self.what, self.item = num, device, what, item
        self._data: dict[str, torch.Tensor] = {}
        for key, value in (data or {}).items():
            self[key] = value

    def __getitem__(self, key: str) -> torch.Tensor:
        if key not in self._data:
            raise UnknownNameError(f"{self.what} has no data {key!r}; it has "
                                   f"{sorted(self._data)}")
        return self._data[key]

    def __setitem__(self, key: str, value: torch.Tensor) -> None:
        if not isinstance(value, torch.Tensor):
            raise InvalidTypeError(f"{self.what} data {key!r} is a {type(value).__name__}; "
                                   "expected a torch.Tensor")
        if value.dim() == 0 or value.shape[0] != self.num:
            raise InvalidValueError(f"{self.what} data {key!r} has shape {tuple(value.shape)}; "
                                    f"expected {self.num} rows, one per {self.item}")
        if value.device != self.device:
            raise InvalidValueError(f"{self.what} data {key!r} is on {value.device}, the "
                                    f"graph on {self.device}; expected the graph's device "
                                    "(move one of them with .to(device))")
        self._data[key] = value

    def __delitem__(self, key: str) -> None:
        self[key]  # noqa: B018 - the one-line error for a name it lacks
        del self._data[key]

    def __contains__(self, key) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return repr(self._data)

    def to(self, device: torch.device, **kwargs) -> "Rows":
        """The rows on ``device`` (``kwargs``: ``Tensor.to``'s)."""
        return Rows(self.num, device, self.what, self.item,
                    {k: v.to(device, **kwargs) for k, v in self._data.items()})


class DataView(MutableMapping):
    """``ndata`` / ``edata`` (a block's ``srcdata`` / ``dstdata`` / ``edata``) over the rows
    of each of ``types`` of ``graph``'s ``side`` ("node", "src" or "dst": node types; "edge":
    edge types), which ``graph.frame(side, index)`` holds; ``graph.kind`` names it in errors
    (the module docstring has the rules)."""

    def __init__(self, graph, side: str, types: range):
        self._frames = [graph.frame(side, i) for i in types]
        edges = side == "edge"
        self._names = list(graph.canonical_etypes if edges else graph.ntypes)
        self._index = graph.etype_index if edges else graph.ntype_index
        self._kind = graph.kind

    def __getitem__(self, key: str):
        if len(self._frames) == 1:
            return self._frames[0][key]
        found = {n: f[key] for n, f in zip(self._names, self._frames) if key in f}
        if not found:
            raise UnknownNameError(f"no type of the {self._kind} has data {key!r}; it has "
                                   f"{sorted(self)}")
        return found

    def __setitem__(self, key: str, value) -> None:
        if len(self._frames) == 1:
            self._frames[0][key] = value
            return
        if not isinstance(value, dict):
            raise InvalidTypeError(f"setting {key!r} on a {self._kind} with several types takes "
                                   f"a dict of type -> rows; got {type(value).__name__}")
        for name, rows in value.items():
            self._frames[self._index(name)][key] = rows

    def __delitem__(self, key: str) -> None:
        held = [f for f in self._frames if key in f]
        if not held:
            raise UnknownNameError(f"the {self._kind} has no data {key!r}; it has "
                                   f"{sorted(self)}")
        for frame in held:
            del frame[key]

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys(k for f in self._frames for k in f))

    def __len__(self) -> int:
        return len(set(k for f in self._frames for k in f))

    def __repr__(self) -> str:
        return repr({k: self[k] for k in self})


class TypeLookup:
    """DGL's type lookups of a graph of the package whose ``src`` and ``etype`` tensors hold
    each edge's source and type (edges in the order of their types): a
    :class:`~dglx_dist.graphcore.block.Block`; ``kind`` names it in errors."""

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

    def __init__(self, block: "TypeLookup", side: str):
        self._block, self._side = block, side

    def __getitem__(self, ntype: str) -> SimpleNamespace:
        return SimpleNamespace(data=self._block.frame(self._side,
                                                      self._block.ntype_index(ntype)))


class EdgeSpace:
    """``edges`` of a block: ``[etype].data`` one edge type's rows; ``(form, etype)`` its
    edges as ``(src, dst)`` indices (``form="all"``: and their positions among the type's
    edges, DGL's ``form="all"``; ``form="eid"``: the positions alone)."""

    def __init__(self, block: "TypeLookup"):
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
