"""Rows by type, read and written as DGL's ``ndata`` / ``edata``, and types by name.

A graph's (or a block's) rows are held per node type and per edge type, each type's as a
mapping of name -> tensor with one row per node (edge) of the type. :class:`DataView` is
DGL's view over them: with one type, that type's mapping itself (``g.ndata["feat"]`` is a
tensor); with several, ``view[name]`` is a dict of type -> rows for the types that have the
name, and is set the same way (DGL's ``g.ndata`` on a heterograph). One difference from
DGL's: a name no type has is a ``KeyError`` (an :class:`~dglx_dist.errors.UnknownNameError`),
not an empty dict, so ``name in view`` says whether some type has it.

A block's rows (:class:`~dglx_dist.graphcore.block.Block`) are read through the same views, as on
DGL's blocks: ``block.srcdata[name]`` is the sources' rows when the block has one source type,
else a dict by type; ``block.srcnodes[ntype].data`` one type's dict (:class:`NodeSpace`);
``block.edges[etype].data`` one edge type's and ``block.edges()`` the edges
(:class:`EdgeSpace`; a graph's ``nodes`` and ``edges`` are the same views). The ids are under
``"_ID"`` (:data:`NID`, DGL's ``dgl.NID`` and ``dgl.EID``). A graph or block finds its types
through :class:`TypeLookup`, by name as DGL does (an edge type by its canonical triple, or by
a relation name that names one type).
"""
from __future__ import annotations

from collections.abc import MutableMapping
from types import MappingProxyType, SimpleNamespace
from typing import Iterator, Sequence

import torch

from dglx_dist.errors import InvalidTypeError, InvalidValueError, UnknownNameError

__all__ = ["DataView", "Rows", "NID", "TypeLookup", "NodeSpace", "EdgeSpace", "in_form"]

NID = "_ID"
"""DGL's ``dgl.NID`` (and ``dgl.EID``): the key of a block's node (edge) ids."""


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
    of each type of ``graph``'s ``side`` ("node", "src" or "dst": node types; "edge": edge
    types), which ``graph.frame(side, index)`` holds; ``graph.kind`` names it in errors
    (the module docstring has the rules)."""

    def __init__(self, graph, side: str):
        edges = side == "edge"
        self._names = list(graph.canonical_etypes if edges else graph.ntypes)
        self._frames = [graph.frame(side, i) for i in range(len(self._names))]
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


_FORMS = MappingProxyType({"uv": lambda s, d, e: (s, d), "eid": lambda s, d, e: e,
                           "all": lambda s, d, e: (s, d, e)})


def in_form(form: str, src: torch.Tensor, dst: torch.Tensor, eid: torch.Tensor):
    """Edges as DGL's ``edges(form=...)`` gives them: "uv" ``(src, dst)``, "eid" their ids,
    "all" ``(src, dst, eid)``."""
    if form not in _FORMS:
        raise InvalidValueError(f"edges(): form {form!r} is not one of {list(_FORMS)}")
    return _FORMS[form](src, dst, eid)


class TypeLookup:
    """DGL's type lookups of a graph of the package (a
    :class:`~dglx_dist.graphcore.heterograph.Graph` or a
    :class:`~dglx_dist.graphcore.block.Block`) of ``ntypes`` and ``canonical_etypes``;
    ``kind`` names it in errors."""

    ntypes: Sequence[str]
    canonical_etypes: Sequence[tuple[str, str, str]]
    kind = "graph"

    @property
    def etypes(self) -> list[str]:
        return [rel for _, rel, _ in self.canonical_etypes]

    def ntype_index(self, ntype: str) -> int:
        """The index of node type ``ntype`` among the graph's."""
        if ntype not in self.ntypes:
            raise UnknownNameError(f"node type {ntype!r} is not one of the {self.kind}'s node "
                                   f"types {list(self.ntypes)}")
        return list(self.ntypes).index(ntype)

    def etype_index(self, etype) -> int:
        """The index of ``etype`` (a canonical triple, or a relation name that names one
        type) among the graph's edge types."""
        etypes = [tuple(e) for e in self.canonical_etypes]
        if isinstance(etype, (tuple, list)) and tuple(etype) in etypes:
            return etypes.index(tuple(etype))
        named = [i for i, e in enumerate(etypes) if e[1] == etype]
        if len(named) != 1:
            raise UnknownNameError(f"edge type {etype!r}: {len(named)} of the {self.kind}'s "
                                   f"edge types have that name; expected one (or a canonical "
                                   f"type of {etypes})")
        return named[0]

    def get_ntype_id(self, ntype: str | None) -> int:
        """The index of ``ntype`` in :attr:`ntypes` (None: the graph's one node type)."""
        return self._type_id(ntype, self.ntypes, self.ntype_index, "node")

    def get_etype_id(self, etype) -> int:
        """The index of ``etype`` (canonical, or a relation name that names one type) in
        :attr:`canonical_etypes` (None: the graph's one edge type)."""
        return self._type_id(etype, self.canonical_etypes, self.etype_index, "edge")

    def _type_id(self, name, names: Sequence, index, what: str) -> int:
        if name is not None:
            return index(name)
        if len(names) != 1:
            raise InvalidValueError(f"the {self.kind} has {what} types {list(names)}; name "
                                    f"one ({what[0]}type=...)")
        return 0

    def to_canonical_etype(self, etype) -> tuple[str, str, str]:
        return self.canonical_etypes[self.get_etype_id(etype)]

    @property
    def edges(self) -> "EdgeSpace":
        """``edges(form, order, etype)``: the graph's ``all_edges``; ``edges[etype].data``:
        one edge type's data."""
        return EdgeSpace(self)

    @property
    def edata(self) -> DataView:
        """Edge data: one edge type's plain, several types' by canonical type."""
        return DataView(self, "edge")

    def _count(self, counts: Sequence[int], name, index) -> int:
        """``counts`` of the type ``name`` (found by ``index``; None: their sum)."""
        return sum(counts) if name is None else counts[index(name)]


class NodeSpace:
    """``nodes`` of a graph, ``srcnodes`` / ``dstnodes`` of a block (``side``):
    ``[ntype].data`` one type's rows."""

    def __init__(self, graph: TypeLookup, side: str):
        self._graph, self._side = graph, side

    def __getitem__(self, ntype: str | None) -> SimpleNamespace:
        return SimpleNamespace(data=self._graph.frame(self._side,
                                                      self._graph.get_ntype_id(ntype)))


class EdgeSpace:
    """``edges`` of a graph or a block: ``[etype].data`` one edge type's rows; called, the
    graph's ``all_edges(form, order, etype)``."""

    def __init__(self, graph: TypeLookup):
        self._graph = graph

    def __getitem__(self, etype) -> SimpleNamespace:
        return SimpleNamespace(data=self._graph.frame("edge", self._graph.get_etype_id(etype)))

    def __call__(self, form: str = "uv", order: str = "eid", etype=None):
        return self._graph.all_edges(form, order, etype)
