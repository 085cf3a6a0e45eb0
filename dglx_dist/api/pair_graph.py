"""The pair graphs of a link-prediction step (DGL's ``pair_graph`` and ``neg_pair_graph``),
in torch, and where they become DGL's.

A pair graph holds a batch's pairs as edges over one compacted node set: node ``i`` of type
``t`` is row ``i`` of the model's outputs of ``t``. It reads as a DGL graph does for what a
link-prediction scorer calls: ``edges()`` (``(src, dst)`` in compacted ids; ``etype=`` on a
graph with several edge types, ``form="all"`` / ``"eid"``), ``num_nodes()``,
``num_edges()``, ``ntypes``, ``etypes``, ``canonical_etypes``, ``ndata`` / ``edata`` (one
type's rows, or dicts by type; ``"_ID"``, DGL's ``dgl.NID`` / ``dgl.EID``, the graph's node
and edge ids), ``nodes[ntype].data``, ``edges[etype].data``, ``local_scope()``,
``local_var()`` and ``apply_edges(func)`` for a function ``(edges) -> {name: rows}``
(:mod:`dglx_dist.function`'s ``u_dot_v`` and the like are such functions).

:func:`at_the_edge` decides what a step hands over, as the blocks are decided: DGL's graph
where DGL is importable (a scorer calling ``dgl.function`` on it runs unchanged), the
package's otherwise.
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from typing import Callable, Iterator

import torch

from dglx_dist.errors import InvalidTypeError, NotSupportedError, UnknownNameError
from dglx_dist.sampling.block import UNTYPED, dgl_installed, map_tensors
from dglx_dist.sampling.frames import DataView, EdgeSpace, NodeSpace, Typed

__all__ = ["PairGraph", "Edges", "at_the_edge"]

Etype = tuple[str, str, str]
EMPTY = torch.zeros(0, dtype=torch.int64)
ALL = "__ALL__"
"""DGL's ``dgl.ALL``: every edge (of a type)."""


@dataclasses.dataclass(frozen=True, eq=False)
class PairGraph(Typed):
    """A batch's pairs over its compacted nodes (see the module docstring).

    Attributes:
        num_nodes_of: the number of nodes of each node type.
        src / dst: each edge's ends, indices among the nodes of their types.
        etype: each edge's type (an index into ``canonical_etypes``); edges in the order of
            their types.
        ntypes / canonical_etypes: the node and edge types (DGL's ``_N`` / ``_E`` on a graph
            without types).
        frames: the rows on the nodes (``("node", t)``) and edges (``("edge", t)``) by type.
    """

    kind = "pair graph"  # in errors (not a field)
    num_nodes_of: tuple[int, ...]
    src: torch.Tensor
    dst: torch.Tensor
    etype: torch.Tensor
    ntypes: tuple[str, ...] = UNTYPED[0]
    canonical_etypes: tuple[Etype, ...] = UNTYPED[1]
    frames: dict = dataclasses.field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, edges: Mapping[Etype, tuple[torch.Tensor, torch.Tensor]],
           num_nodes: Mapping[str, int], ntypes=UNTYPED[0],
           canonical_etypes=UNTYPED[1]) -> "PairGraph":
        """The graph of every type of ``canonical_etypes`` (those ``edges`` has no pairs of
        have none), ``num_nodes[t]`` nodes of each type ``t``."""
        ends = [edges.get(et, (EMPTY, EMPTY)) for et in canonical_etypes]
        etype = torch.cat([EMPTY] + [torch.full((s.numel(),), i, dtype=torch.int64)
                                     for i, (s, _) in enumerate(ends)])
        src, dst = (torch.cat([EMPTY] + [pair[end].long() for pair in ends]) for end in (0, 1))
        return cls(tuple(int(num_nodes[t]) for t in ntypes), src, dst, etype, tuple(ntypes),
                   tuple(tuple(et) for et in canonical_etypes))

    # -- DGL's reading surface ------------------------------------------------------------
    def frame(self, side: str, index: int) -> dict:
        """The rows of the nodes (``side`` "node") or edges ("edge") of type ``index``."""
        return self.frames.setdefault((side, index), {})

    @property
    def ndata(self) -> DataView:
        return DataView(self, "node", range(len(self.ntypes)))

    @property
    def edata(self) -> DataView:
        return DataView(self, "edge", range(len(self.canonical_etypes)))

    @property
    def nodes(self) -> NodeSpace:
        return NodeSpace(self, "node")

    @property
    def edges(self) -> EdgeSpace:
        return EdgeSpace(self)

    @property
    def etypes(self) -> list[str]:
        return [et[1] for et in self.canonical_etypes]

    @property
    def device(self) -> torch.device:
        return self.src.device

    def num_nodes(self, ntype: str | None = None) -> int:
        return sum(self.num_nodes_of) if ntype is None else \
            self.num_nodes_of[self.ntype_index(ntype)]

    number_of_nodes = num_nodes

    def number_of_edges(self, etype=None) -> int:
        return self.num_edges(etype)

    @contextlib.contextmanager
    def local_scope(self) -> Iterator[None]:
        """Rows set or removed inside the ``with`` are undone at its end (DGL's)."""
        kept = {key: dict(frame) for key, frame in self.frames.items()}
        try:
            yield
        finally:
            self.frames.clear()
            self.frames.update(kept)

    def local_var(self) -> "PairGraph":
        """The graph with rows of its own (the structure and the rows shared)."""
        return dataclasses.replace(self, frames={k: dict(v) for k, v in self.frames.items()})

    def apply_edges(self, func: Callable, edges=ALL, etype=None) -> None:
        """DGL's ``apply_edges`` on every edge of type ``etype`` (None: of every type):
        ``func(edges)`` (:class:`Edges`) returns ``{name: rows}``, set on those edges."""
        if not callable(func):
            raise InvalidTypeError(f"apply_edges: func is a {type(func).__name__}; expected a "
                                   "function (edges) -> {name: rows}, such as "
                                   "dglx_dist.function.u_dot_v('h', 'h', 'score')")
        if not isinstance(edges, str) or edges != ALL:
            raise NotSupportedError("apply_edges(edges=...): a pair graph applies a function "
                                    "to all of its edges (of a type); leave edges out")
        types = range(len(self.canonical_etypes)) if etype is None else \
            [self.etype_index(etype)]
        for t in types:
            out = func(Edges(self, t))
            if not isinstance(out, Mapping):
                raise InvalidTypeError(f"apply_edges: the function returned a "
                                       f"{type(out).__name__}; expected a dict name -> rows")
            self.frame("edge", t).update(out)

    # -- moves and the edge ---------------------------------------------------------------
    def to(self, device, non_blocking: bool = False) -> "PairGraph":
        """The graph, with its rows, on ``device`` (itself where it is there already)."""
        if self.device == torch.device(device):
            return self
        move = lambda t: t.to(device, non_blocking=non_blocking)  # noqa: E731
        moved = map_tensors(dataclasses.replace(self, frames={}), move)
        moved.frames.update({key: {name: move(v) if isinstance(v, torch.Tensor) else v
                                   for name, v in frame.items()}
                             for key, frame in self.frames.items()})
        return moved

    def to_dgl(self):
        """DGL's graph of the same pairs and types, with the rows on this one."""
        import dgl  # noqa: PLC0415 - the edge: only here does a pair graph become DGL's

        cut = {et: (self.src.index_select(0, at), self.dst.index_select(0, at))
               for et, at in ((et, self.edges_of(t))
                              for t, et in enumerate(self.canonical_etypes))}
        graph = dgl.heterograph(cut, num_nodes_dict=dict(zip(self.ntypes, self.num_nodes_of)),
                                device=self.device)
        for t, name in enumerate(self.ntypes):
            graph.nodes[name].data.update(self.frame("node", t))
        for t, et in enumerate(self.canonical_etypes):
            graph.edges[et].data.update(self.frame("edge", t))
        return graph


class Edges:
    """What an edge function reads of the edges of one type (DGL's ``EdgeBatch``): ``src``
    and ``dst``, their ends' rows, and ``data``, their own, each read by name."""

    def __init__(self, graph: PairGraph, etype: int):
        at = graph.edges_of(etype)
        stype, _, dtype = graph.canonical_etypes[etype]
        self.canonical_etype = graph.canonical_etypes[etype]
        self._ends = (graph.src.index_select(0, at), graph.dst.index_select(0, at))
        self.src = _Rows(graph.frame("node", graph.ntype_index(stype)), self._ends[0])
        self.dst = _Rows(graph.frame("node", graph.ntype_index(dtype)), self._ends[1])
        self.data = graph.frame("edge", etype)

    def edges(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._ends

    def batch_size(self) -> int:
        return int(self._ends[0].numel())


class _Rows(Mapping):
    """A node frame's rows at ``index`` (each edge's end), gathered when read."""

    def __init__(self, frame: dict, index: torch.Tensor):
        self._frame, self._index = frame, index

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._frame:
            raise UnknownNameError(f"an edge function reads node rows {name!r}; the nodes "
                                    f"have {sorted(self._frame)} (set g.ndata[{name!r}] first)")
        return self._frame[name].index_select(0, self._index)

    def __iter__(self):
        return iter(self._frame)

    def __len__(self) -> int:
        return len(self._frame)


def at_the_edge(pair: PairGraph | None, package: bool = False):
    """What a step hands over of ``pair``: DGL's graph where DGL is importable (the edge, as
    for the blocks), the package's otherwise or with ``package`` (a loader's
    ``package_blocks``); None stays None."""
    if pair is None or package or not dgl_installed():
        return pair
    return pair.to_dgl()
