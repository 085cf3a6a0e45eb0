"""A graph without DGL: the part of DGLGraph's API that data-preparation code (and
:func:`dglx_dist.distribute`) reads, in torch.

A :class:`Graph` holds each edge type's ends as torch tensors, and node and edge data per
type; :mod:`dglx_dist.graphcore.construct` builds it (``graph`` / ``heterograph``, DGL's
arguments). A graph without types is the one-type case (node type ``_N``, edge type
``("_N", "_E", "_N")``, as DGL's), not a second class. As in DGL, types are sorted by name and
edges keep the order given (their ids). ``g.ndata`` / ``g.edata`` follow DGL's rules
(:mod:`dglx_dist.graphcore.frames`): one type's data plain, several types' by type, each type's
through ``g.nodes[ntype].data`` / ``g.edges[etype].data``.

It is also the pair graph of a link-prediction step (DGL's ``pair_graph`` and
``neg_pair_graph``: the batch's pairs as edges over its compacted nodes, built by
:mod:`dglx_dist.api.link`), so it has what a scorer calls on one: ``local_scope()``,
``local_var()`` and ``apply_edges(func)`` for a function ``(edges) -> {name: rows}``
(:class:`Edges`; :mod:`dglx_dist.function`'s ``u_dot_v`` and the like are such functions).
:func:`~dglx_dist.dgl.conversion.to_dgl` makes DGL's graph of it, and
:func:`~dglx_dist.data.convert.user_graph` decides which of the two a script gets.
"""
from __future__ import annotations

import contextlib
import numbers
from typing import Any, Callable, Iterator, Mapping, NamedTuple

import torch

from dglx_dist.errors import (IdOutOfRangeError, InvalidTypeError, InvalidValueError,
                              NotSupportedError)
from dglx_dist.graphcore.frames import DataView, NodeSpace, Rows, TypeLookup, in_form
from dglx_dist.graphcore.message import edge_function
from dglx_dist.graphcore.types import Etype

__all__ = ["Graph", "Scheme", "Edges", "ALL"]

ALL = "__ALL__"
"""DGL's ``dgl.ALL``: every edge (of a type)."""


class Scheme(NamedTuple):
    """One data name's row shape and dtype (DGL's ``Scheme``, as ``repr(g)`` shows it)."""

    shape: tuple[int, ...]
    dtype: torch.dtype


class Graph(TypeLookup):
    """A graph of node types and canonical edge types, its edges as torch tensors (its type
    lookups: :class:`~dglx_dist.graphcore.frames.TypeLookup`'s).

    Build it with :func:`~dglx_dist.graphcore.construct.graph` or
    :func:`~dglx_dist.graphcore.construct.heterograph` (this constructor takes checked
    ends: ``num_nodes`` by node type, ``ends`` by canonical edge type as ``(src, dst)``
    per-type ids of dtype ``idtype`` on ``device``).
    """

    def __init__(self, num_nodes: Mapping[str, int], ends: Mapping[Etype, tuple],
                 idtype: torch.dtype, device: torch.device):
        self._ntypes = tuple(sorted(num_nodes))
        self._etypes = tuple(sorted(ends))
        self._counts = tuple(int(num_nodes[t]) for t in self._ntypes)
        self._ends = tuple(ends[e] for e in self._etypes)
        self._idtype, self._device = idtype, torch.device(device)
        self._node_rows = tuple(Rows(n, self._device, f"node type {t!r}", "node")
                                for t, n in zip(self._ntypes, self._counts))
        self._edge_rows = tuple(Rows(int(s.numel()), self._device, f"edge type {e}", "edge")
                                for e, (s, _) in zip(self._etypes, self._ends))

    # -- types -------------------------------------------------------------------------------
    @property
    def ntypes(self) -> list[str]:
        return list(self._ntypes)

    @property
    def canonical_etypes(self) -> list[Etype]:
        return list(self._etypes)

    @property
    def is_homogeneous(self) -> bool:
        """One node type and one edge type (DGL's test)."""
        return len(self._ntypes) == 1 and len(self._etypes) == 1

    def frame(self, side: str, index: int) -> Rows:
        """The data of node type ``index`` (``side`` "node") or edge type ``index``
        ("edge")."""
        return (self._edge_rows if side == "edge" else self._node_rows)[index]

    # -- sizes -------------------------------------------------------------------------------
    @property
    def idtype(self) -> torch.dtype:
        return self._idtype

    @property
    def device(self) -> torch.device:
        return self._device

    def num_nodes(self, ntype: str | None = None) -> int:
        """Node type ``ntype``'s node count (None: every type's)."""
        return self._count(self._counts, ntype, self.ntype_index)

    def num_edges(self, etype: str | Etype | None = None) -> int:
        """Edge type ``etype``'s edge count (None: every type's)."""
        return self._count([int(s.numel()) for s, _ in self._ends], etype, self.etype_index)

    number_of_nodes, number_of_edges = num_nodes, num_edges

    # -- structure ---------------------------------------------------------------------------
    @property
    def nodes(self) -> "_NodeView":
        """``g.nodes(ntype)``: the node ids; ``g.nodes[ntype].data``: one type's data."""
        return _NodeView(self, "node")

    def all_edges(self, form: str = "uv", order: str = "eid",
                  etype: str | Etype | None = None):
        """Edge type ``etype``'s edges: ``form`` "uv" ``(src, dst)``, "eid" their ids,
        "all" ``(src, dst, eid)``; ``order`` "eid" by id, "srcdst" by source then
        destination (ties by id)."""
        if order not in ("eid", "srcdst"):
            raise InvalidValueError(f"edges(): order {order!r} is not one of ['eid', 'srcdst']")
        src, dst = self._ends[self.get_etype_id(etype)]
        eid = torch.arange(src.numel(), dtype=self._idtype, device=self._device)
        if order == "srcdst":  # two stable sorts: by source, ties by destination then id
            eid = eid.index_select(0, torch.sort(dst, stable=True).indices)
            eid = eid.index_select(0, torch.sort(src.index_select(0, eid), stable=True).indices)
            src, dst = src.index_select(0, eid), dst.index_select(0, eid)
        return in_form(form, src, dst, eid)

    def in_degrees(self, v: Any = None, etype: str | Etype | None = None):
        """The in-degrees over edge type ``etype`` of nodes ``v`` (an int: an int; ids: a
        tensor of ``idtype``; None: every node of the type's destination type)."""
        return self._degrees(v, etype, end=1)

    def out_degrees(self, u: Any = None, etype: str | Etype | None = None):
        """The out-degrees over edge type ``etype`` of nodes ``u`` (as :meth:`in_degrees`)."""
        return self._degrees(u, etype, end=0)

    def _degrees(self, ids: Any, etype, end: int):
        t = self.get_etype_id(etype)
        n = self._counts[self._ntypes.index(self._etypes[t][2 * end])]
        degrees = torch.bincount(self._ends[t][end].long(), minlength=n).to(self._idtype)
        if ids is None:
            return degrees
        one = isinstance(ids, numbers.Integral) and not isinstance(ids, bool)
        at = torch.as_tensor(ids, device=self._device).reshape(-1)
        if at.is_floating_point() or at.is_complex() or at.dtype == torch.bool:
            raise InvalidTypeError(f"degrees: node ids of dtype {at.dtype}; expected integers")
        if at.numel() and (int(at.min()) < 0 or int(at.max()) >= n):
            raise IdOutOfRangeError(f"degrees: node ids {int(at.min())}..{int(at.max())}; "
                                    f"expected ids in [0, {n}) of node type "
                                    f"{self._etypes[t][2 * end]!r}")
        picked = degrees.index_select(0, at.long())
        return int(picked[0]) if one else picked

    # -- data --------------------------------------------------------------------------------
    @property
    def ndata(self) -> DataView:
        """Node data: one type's plain, several types' by type (DGL's rules)."""
        return DataView(self, "node")

    def node_attr_schemes(self, ntype: str | None = None) -> dict[str, Scheme]:
        """Each node-data name of ``ntype`` with its rows' shape and dtype."""
        return _schemes(self._node_rows[self.get_ntype_id(ntype)])

    def edge_attr_schemes(self, etype: str | Etype | None = None) -> dict[str, Scheme]:
        """Each edge-data name of ``etype`` with its rows' shape and dtype."""
        return _schemes(self._edge_rows[self.get_etype_id(etype)])

    # -- scorers' calls (DGL's) -----------------------------------------------------------
    @contextlib.contextmanager
    def local_scope(self) -> Iterator[None]:
        """Data set or removed inside the ``with`` is undone at its end (DGL's)."""
        frames = self._node_rows + self._edge_rows
        kept = [dict(rows) for rows in frames]
        try:
            yield
        finally:
            for rows, data in zip(frames, kept):
                rows.clear()
                rows.update(data)

    def local_var(self) -> "Graph":
        """The graph with data of its own (the structure and the tensors shared; DGL's)."""
        return self._copy(self._device)

    def apply_edges(self, func: Callable, edges=ALL, etype: str | Etype | None = None) -> None:
        """DGL's ``apply_edges`` on every edge of type ``etype`` (None: of every type):
        ``func(edges)`` (:class:`Edges`) returns ``{name: rows}``, set on those edges; DGL's
        ``dgl.function.u_<op>_v`` too (:func:`~dglx_dist.graphcore.message.edge_function`)."""
        func = edge_function(func)
        if not callable(func):
            raise InvalidTypeError(f"apply_edges: func is a {type(func).__name__}; expected a "
                                   "function (edges) -> {name: rows}, such as "
                                   "dglx_dist.function.u_dot_v('h', 'h', 'score')")
        if not isinstance(edges, str) or edges != ALL:
            raise NotSupportedError("apply_edges(edges=...): the graph applies a function to "
                                    "all of its edges (of a type); leave edges out")
        for t in range(len(self._etypes)) if etype is None else [self.get_etype_id(etype)]:
            et = self._etypes[t]
            out = func(Edges(et, self._ends[t], self._node_rows[self._ntypes.index(et[0])],
                             self._node_rows[self._ntypes.index(et[2])], self._edge_rows[t]))
            if not isinstance(out, Mapping):
                raise InvalidTypeError(f"apply_edges: the function returned a "
                                       f"{type(out).__name__}; expected a dict name -> rows")
            self._edge_rows[t].update(out)

    # -- moves -------------------------------------------------------------------------------
    def to(self, device, **kwargs) -> "Graph":
        """The graph, with its data, on ``device`` (itself where it is there already;
        ``kwargs``: ``Tensor.to``'s)."""
        device = torch.device(device)
        return self if device == self._device else self._copy(device, **kwargs)

    def _copy(self, device: torch.device, **kwargs) -> "Graph":
        """The graph with data of its own, on ``device``."""
        moved = Graph(dict(zip(self._ntypes, self._counts)),
                      {e: tuple(x.to(device, **kwargs) for x in ends)
                       for e, ends in zip(self._etypes, self._ends)}, self._idtype, device)
        moved._node_rows = tuple(r.to(device, **kwargs) for r in self._node_rows)
        moved._edge_rows = tuple(r.to(device, **kwargs) for r in self._edge_rows)
        return moved

    def __repr__(self) -> str:
        if self.is_homogeneous:
            return (f"Graph(num_nodes={self.num_nodes()}, num_edges={self.num_edges()},\n"
                    f"      ndata_schemes={self.node_attr_schemes()}\n"
                    f"      edata_schemes={self.edge_attr_schemes()})")
        nodes = dict(zip(self._ntypes, self._counts))
        edges = {e: int(s.numel()) for e, (s, _) in zip(self._etypes, self._ends)}
        meta = [(s, d, rel) for s, rel, d in self._etypes]
        return f"Graph(num_nodes={nodes},\n      num_edges={edges},\n      metagraph={meta})"


def _schemes(rows: Rows) -> dict[str, Scheme]:
    return {name: Scheme(tuple(t.shape[1:]), t.dtype) for name, t in rows.items()}


class _NodeView(NodeSpace):
    """``g.nodes``: called, a type's node ids; indexed by a type, its data."""

    def __call__(self, ntype: str | None = None) -> torch.Tensor:
        g = self._graph
        return torch.arange(g._counts[g.get_ntype_id(ntype)], dtype=g.idtype, device=g.device)


class Edges:
    """What an edge function reads of the edges of one type (DGL's ``EdgeBatch``): ``src``
    and ``dst``, their ends' rows, and ``data``, their own, each read by name."""

    def __init__(self, canonical_etype: Etype, ends: tuple, src_rows: Rows, dst_rows: Rows,
                 data: Rows):
        self.canonical_etype, self._ends = canonical_etype, ends
        self.src, self.dst = _Gathered(src_rows, ends[0]), _Gathered(dst_rows, ends[1])
        self.data = data

    def edges(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._ends

    def batch_size(self) -> int:
        return int(self._ends[0].numel())


class _Gathered(Mapping):
    """A node type's rows at ``index`` (each edge's end), gathered when read."""

    def __init__(self, rows: Rows, index: torch.Tensor):
        self._rows, self._index = rows, index

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._rows[name].index_select(0, self._index)

    def __iter__(self):
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)
