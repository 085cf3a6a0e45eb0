"""Link prediction's batches: ``as_edge_prediction_sampler`` (DGL's name and signature, written
here; DGL's own object is read the same) over a DistGraph, with or without node and edge
types (a graph without them is the one-type case: ``_N``, ``_E``); what the loader yields is
docs/link_prediction.md's. The loader carries edge ids as original homogeneous ids (the
type's offset plus the per-type id). A batch (:class:`EdgePairs`):

1. is split by edge type into DGL's seeds (a dict on a graph with types, the ids themselves
   on one without) and finds their endpoints (``g.find_edges``);
2. calls the user's negative sampler on the DistGraph with those seeds, torch's generator
   seeded by the step (:func:`negatives_drawn`: each rank and step draws its own);
3. compacts the nodes of both pair graphs per node type (sorted ids): they are the blocks'
   seeds, so output row ``i`` of type ``t`` is the pair graphs' node ``i`` of ``t``
   (the package's :class:`~dglx_dist.graphcore.heterograph.Graph`; DGL's graphs from DGL's
   loaders of :mod:`dglx_dist.dgl`);
4. puts the sampler's ``prefetch_labels`` on the pair graph's edges of each edge type;
5. names the edges to leave out of every sampled layer as DGL's ``exclude`` modes do, as
   partitioned edge ids (:meth:`~dglx_dist.sampling.PartitionSampler.exclusions`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
from collections.abc import Mapping
from typing import Callable

import torch

from dglx_dist.api.book import by_type, given_edge_ids, of_type
from dglx_dist.api.graph import DistGraph
from dglx_dist.api.ndata import as_node_ids
from dglx_dist.api.negative_sampler import GlobalUniform
from dglx_dist.graphcore.construct import heterograph
from dglx_dist.graphcore.heterograph import Graph
from dglx_dist.errors import InvalidTypeError, InvalidValueError, NotSupportedError
from dglx_dist.data.convert import is_dgl
from dglx_dist.graphcore.frames import NID
from dglx_dist.strategies.steps import EdgeBatch

__all__ = ["EdgePredictionSampler", "as_edge_prediction_sampler", "EdgePairs",
           "is_edge_sampler", "negatives_drawn"]

Etype = tuple[str, str, str]
EMPTY = torch.zeros(0, dtype=torch.int64)
_WHERE = "as_edge_prediction_sampler"


@dataclasses.dataclass(frozen=True, eq=False)
class EdgePredictionSampler:
    """A node sampler made an edge sampler (DGL's class of this name): for each batch of
    edges, the pair graphs and the blocks that compute their ends' embeddings
    (docs/link_prediction.md). Built by :func:`as_edge_prediction_sampler`; the attributes
    are its arguments (``prefetch_labels`` a tuple)."""

    sampler: object
    exclude: object = None
    reverse_eids: object = None
    reverse_etypes: object = None
    negative_sampler: object = None
    prefetch_labels: tuple[str, ...] = ()


def as_edge_prediction_sampler(sampler, exclude=None, reverse_eids=None, reverse_etypes=None,
                               negative_sampler=None, prefetch_labels=None
                               ) -> EdgePredictionSampler:
    """DGL's ``as_edge_prediction_sampler``: the edge loader's sampler of node sampler
    ``sampler`` (``NeighborSampler``, ``MultiLayerFullNeighborSampler`` or a DGL sampler
    whose ``sample`` takes the edges to exclude). ``exclude``: None, ``"self"``,
    ``"reverse_id"`` (with ``reverse_eids``), ``"reverse_types"`` (with ``reverse_etypes``)
    or a callable of the batch's edge ids; ``negative_sampler``: a callable ``(g, eids) ->
    (src, dst)`` (:mod:`dglx_dist.api.negative_sampler`'s, DGL's, or one's own);
    ``prefetch_labels``: edge data put on the pair graph's edges. Checked against the graph
    when a loader takes it."""
    sample = getattr(sampler, "sample", None)
    if callable(sample) and _positional(sample) < 3:
        raise InvalidTypeError(f"{_WHERE}: {type(sampler).__name__}.sample takes no edges to "
                               "exclude; expected a node sampler whose sample(g, seed_nodes, "
                               "exclude_eids=None) takes them")
    if isinstance(prefetch_labels, str):
        raise InvalidTypeError(f"{_WHERE}: prefetch_labels={prefetch_labels!r}; expected a "
                               f"list of edge data names, such as [{prefetch_labels!r}]")
    return EdgePredictionSampler(sampler, exclude, reverse_eids, reverse_etypes,
                                 negative_sampler, tuple(prefetch_labels or ()))


def _positional(fn: Callable) -> int:
    """How many positional arguments ``fn`` takes (many: it takes ``*args``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: not refused
        return 3
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params):
        return 3
    return sum(p.kind in kinds for p in params)


@contextlib.contextmanager
def negatives_drawn(seed: int | None):
    """Inside it, torch's CPU generator is seeded from a step's ``seed`` (the loader's
    :func:`~dglx_dist.strategies.steps.step_seed`) and given back as it was after: a negative
    sampler (DGL's, the package's or one's own, which draw from torch's generator) draws
    each step's negatives from the step's own numbers. DGL's ``Uniform`` draws each
    destination independently of every other; ranks that seeded torch alike (a script's
    ``torch.manual_seed(seed)`` on every rank) would otherwise draw the same destinations at
    every step, so a global batch of P ranks held each negative P times. None: torch's
    generator as it stands."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed((seed * 1_000_003 + _NEGATIVES_STREAM) % 2**62)
        yield


_NEGATIVES_STREAM = 999_983  # the step's stream of negatives (its sampler's layers: 0, 1, ...)


def is_edge_sampler(sampler) -> bool:
    """Whether ``sampler`` is an ``as_edge_prediction_sampler(...)``, the package's or
    DGL's."""
    return isinstance(sampler, EdgePredictionSampler) or \
        is_dgl(sampler, "dataloading.EdgePredictionSampler")


def _is_global_uniform(negative_sampler) -> bool:
    return isinstance(negative_sampler, GlobalUniform) or \
        is_dgl(negative_sampler, "dataloading.negative_sampler.GlobalUniform")


def _by_etype(g: DistGraph, value, what: str, expected: str) -> Mapping:
    """``value`` by edge type (:func:`~dglx_dist.api.book.by_type`), refused, saying ``what``
    and the ``expected`` dict, on a graph with several."""
    return by_type(value, g.canonical_etypes, InvalidValueError(
        f"{what}; on a graph with edge types it must return a dict {expected}"))


def _canonical(graph: DistGraph, key, what: str) -> Etype:
    """``graph.to_canonical_etype(key)``, its refusal prefixed with ``what``."""
    try:
        return graph.to_canonical_etype(key)
    except (KeyError, ValueError) as exc:
        raise type(exc)(f"{what}: {exc}") from None


def _reverse_etypes(graph: DistGraph, mapping) -> dict[Etype, Etype]:
    if not graph.is_typed:
        raise NotSupportedError(f"{_WHERE}: exclude='reverse_types' needs a graph with edge "
                                "types; this one has none (use 'reverse_id' with reverse_eids)")
    if not isinstance(mapping, Mapping) or not mapping:
        raise InvalidValueError(f"{_WHERE}: exclude='reverse_types' needs reverse_etypes, a "
                                "dict {edge type: its reverse edge type}")
    out = {}
    for key, value in mapping.items():
        etype = _canonical(graph, key, f"{_WHERE}: reverse_etypes")
        reverse = _canonical(graph, value, f"{_WHERE}: reverse_etypes")
        if graph.num_edges(reverse) < graph.num_edges(etype):
            raise InvalidValueError(
                f"{_WHERE}: reverse_etypes maps {etype} ({graph.num_edges(etype)} edges) to "
                f"{reverse} ({graph.num_edges(reverse)} edges); the reverse of edge i of a "
                "type is edge i of its reverse type, which needs at least as many edges")
        out[etype] = reverse
    return out


def _reverse_eids(graph: DistGraph, reverse_eids) -> dict[Etype, torch.Tensor]:
    error = InvalidValueError(
        f"{_WHERE}: exclude='reverse_id' needs reverse_eids, " +
        ("a dict {edge type: tensor giving each edge of the type its reverse edge's id in the "
         "same type}" if graph.is_typed else "a tensor giving each edge id its reverse edge's id"))
    if reverse_eids is None:
        raise error
    out = {}
    for key, value in by_type(reverse_eids, graph.canonical_etypes, error).items():
        etype = _canonical(graph, key, f"{_WHERE}: reverse_eids")
        n, reverse = graph.num_edges(etype), torch.as_tensor(value)
        what = f"reverse_eids[{etype}]" if graph.is_typed else "reverse_eids"
        if reverse.shape != (n,):
            raise InvalidValueError(f"{_WHERE}: {what} has shape {tuple(reverse.shape)}; "
                                    f"expected one reverse edge id per edge"
                                    f"{' of the type' if graph.is_typed else ''} ({n},)")
        out[etype] = as_node_ids(reverse, n, f"{_WHERE}: {what}", kind="edge")
    return out


def _self(_, seeds: dict) -> dict:
    return seeds


def _with_reverse_ids(reverse: dict[Etype, torch.Tensor], seeds: dict) -> dict:
    """The seeds and, of each, the edge of its type that ``reverse`` names."""
    return {et: torch.cat([ids, reverse[et].index_select(0, ids)]) for et, ids in seeds.items()}


def _with_reverse_types(reverse: dict[Etype, Etype], seeds: dict) -> dict:
    """The seeds and, of each seed of a type ``reverse`` maps, the edge of the same per-type
    id in its reverse type (as DGL's ``reverse_types``, in the order of ``reverse``)."""
    out = dict(seeds)
    for et, rev in reverse.items():
        if et in out:
            out[rev] = torch.unique(torch.cat([out[et], out[rev]])) if rev in out else out[et]
    return out


# exclude mode -> (what reads its argument off the sampler, the edges it excludes)
_MODES = {"self": (lambda graph, sampler: None, _self),
          "reverse_id": (lambda graph, sampler: _reverse_eids(graph, sampler.reverse_eids),
                         _with_reverse_ids),
          "reverse_types": (lambda graph, sampler: _reverse_etypes(graph, sampler.reverse_etypes),
                            _with_reverse_types)}


class EdgePairs:
    """Builds a batch's pair graphs and exclusions from its edge ids (see the module
    docstring): the edge loader's :class:`~dglx_dist.strategies.steps.PairMaker`; collective
    when the negative sampler is (``GlobalUniform``). Refuses, in one line, what it cannot
    honour."""

    def __init__(self, graph: DistGraph, sampler):
        self.graph, self.negative_sampler = graph, sampler.negative_sampler
        self.labels = list(sampler.prefetch_labels or [])
        for key in self.labels:
            if not any(key in graph.edges[et].data for et in graph.canonical_etypes):
                raise InvalidValueError(f"{_WHERE}: prefetch_labels names {key!r}, which no "
                                        f"edge type has; edge data here: "
                                        f"{sorted(graph.edata.stored())}")
        if _is_global_uniform(self.negative_sampler):
            graph.refuse_types(f"{_WHERE}: negative_sampler.GlobalUniform is not supported on "
                               "a graph with edge types yet; use negative_sampler.Uniform(k)")
        self._reverse_eids: dict[Etype, torch.Tensor] | None = None
        self._exclude = self._exclusion(sampler)

    @property
    def excludes(self) -> bool:
        """Whether the batches exclude edges from their blocks."""
        return self._exclude is not None

    def _given(self, by_type: dict):
        """``by_type`` as DGL hands seeds to samplers: the dict on a graph with types, the
        one type's value on a graph without."""
        return by_type if self.graph.is_typed else by_type.get(self.graph.canonical_etypes[0],
                                                                EMPTY)

    def _exclusion(self, sampler) -> Callable[[dict], object] | None:
        """The edges a batch's seeds (by canonical type) exclude, as the sampler's
        ``exclude`` says (a callable is given the seeds as DGL gives them)."""
        exclude = sampler.exclude
        if exclude is None:
            return None
        if callable(exclude):
            return lambda seeds: exclude(self._given(seeds))
        if not isinstance(exclude, str) or exclude not in _MODES:
            raise NotSupportedError(f"{_WHERE}: exclude={exclude!r:.60}; expected None, 'self', "
                                    "'reverse_types' (with reverse_etypes), 'reverse_id' (with "
                                    "reverse_eids) or a callable")
        read, excluded = _MODES[exclude]
        reverse = read(self.graph, sampler)
        if exclude == "reverse_id":
            self._reverse_eids = reverse
        return functools.partial(excluded, reverse)

    def read_ids(self, indices) -> torch.Tensor:
        """The loader's edge ids (original homogeneous ids) of the user's ``indices``; with
        ``exclude="reverse_id"`` every edge type among them needs its ``reverse_eids``."""
        ids = given_edge_ids(self.graph, indices)
        if self._reverse_eids is not None:
            etypes = self.graph.canonical_etypes
            types, _ = self.graph.get_partition_book().map_to_per_etype(ids)
            missing = [etypes[i] for i in torch.unique(types).tolist()
                       if etypes[i] not in self._reverse_eids]
            if missing:
                raise InvalidValueError(f"{_WHERE}: reverse_eids has no entry for edge types "
                                        f"{missing} of the loader's edges")
        return ids

    def __call__(self, eids: torch.Tensor, seed: int | None = None) -> EdgeBatch:
        g = self.graph
        seeds = self._seeds(eids)
        pos = {et: g.find_edges(ids, etype=et) for et, ids in seeds.items()}
        neg = self._negatives(seeds, seed) if self.negative_sampler is not None else None
        uniq, (pos_local, neg_local) = self._compact([pos, neg or {}])
        pair = self._pair_graph(pos_local, uniq)
        for et in g.canonical_etypes:
            pair.edges[et].data[NID] = seeds.get(et, EMPTY)
        for key in self.labels:  # DGL's prefetch_labels: on the positive pairs' edges
            for et, ids in seeds.items():
                if key in g.edges[et].data:
                    pair.edges[et].data[key] = g.edges[et].data[key][ids]
        neg_pair = None if neg is None else self._pair_graph(neg_local, uniq)
        nodes = torch.cat([EMPTY] + [g.part_ids(uniq[t] + g.space(t).hom_offset)
                                     for t in g.ntypes])
        exclude = None if self._exclude is None else self._excluded(self._exclude(seeds))
        return EdgeBatch(nodes, pair, neg_pair, exclude)

    def _seeds(self, eids: torch.Tensor) -> dict[Etype, torch.Tensor]:
        """DGL's seed dict of original homogeneous edge ids ``eids`` (order kept per type)."""
        index, per_type = self.graph.get_partition_book().map_to_per_etype(eids)
        etypes = self.graph.canonical_etypes
        return {etypes[e]: per_type[index == e] for e in torch.unique(index).tolist()}

    def _negatives(self, seeds: dict,
                   seed: int | None) -> dict[Etype, tuple[torch.Tensor, torch.Tensor]]:
        """The negative sampler's pairs by canonical type (drawn with the step's ``seed``:
        :func:`negatives_drawn`), checked against each type's nodes."""
        g = self.graph
        with negatives_drawn(seed):
            drawn = self.negative_sampler(g, self._given(seeds))
        out = _by_etype(g, drawn, "the negative sampler returned one (src, dst) pair",
                        "{edge type: (src, dst)}")
        checked = {}
        for key, (src, dst) in out.items():
            et = _canonical(g, key, "the negative sampler's result")
            src = g.space(et[0]).check(src, of_type(g, "the negative sampler's sources", et))
            dst = g.space(et[2]).check(dst, of_type(g, "the negative sampler's destinations", et))
            if src.numel() != dst.numel():
                raise InvalidValueError(f"{of_type(g, 'the negative sampler', et)}: "
                                        f"{src.numel()} sources for {dst.numel()} destinations")
            checked[et] = (src, dst)
        return checked

    def _compact(self, groups: list[dict]) -> tuple[dict[str, torch.Tensor], list[dict]]:
        """Each node type's nodes among the pairs of ``groups`` (sorted ids), and each group's
        pairs in positions among them."""
        ends = [(t, ids) for group in groups for et, (s, d) in group.items()
                for t, ids in ((et[0], s), (et[2], d))]
        local: list[torch.Tensor | None] = [None] * len(ends)
        uniq = {}
        for ntype in self.graph.ntypes:
            at = [i for i, (t, _) in enumerate(ends) if t == ntype]
            uniq[ntype], inverse = torch.unique(torch.cat([EMPTY] + [ends[i][1] for i in at]),
                                                return_inverse=True)
            for i, piece in zip(at, torch.split(inverse, [ends[i][1].numel() for i in at])):
                local[i] = piece
        pieces = iter(local)
        return uniq, [{et: (next(pieces), next(pieces)) for et in group} for group in groups]

    def _pair_graph(self, edges: dict, uniq: dict[str, torch.Tensor]) -> Graph:
        """A graph with every canonical edge type over the compacted nodes (a type without
        pairs has no edges), their ids in ``ndata["_ID"]`` (DGL's ``dgl.NID``)."""
        g = self.graph
        pair = heterograph({et: edges.get(et, (EMPTY, EMPTY)) for et in g.canonical_etypes},
                           num_nodes_dict={t: n.numel() for t, n in uniq.items()})
        for ntype, ids in uniq.items():
            pair.nodes[ntype].data[NID] = ids
        return pair

    def _excluded(self, result) -> torch.Tensor:
        """Partitioned edge ids of DGL's exclusion (per-type ids by edge type)."""
        g = self.graph
        result = _by_etype(g, result, "the exclude callable returned a tensor",
                           "{edge type: edge ids}")
        hom = [EMPTY]
        for key, ids in result.items():
            et = _canonical(g, key, "the edges to exclude")
            hom.append(given_edge_ids(g, {et: ids}, "the edges to exclude"))
        return g.edata.part_ids(torch.cat(hom))
