"""Link prediction's batches on a graph with edge types (DGL's heterograph edge loader).

``DataLoader(g, {etype: eids}, as_edge_prediction_sampler(NeighborSampler(...),
exclude="reverse_types", reverse_etypes={...}, negative_sampler=Uniform(k)), ...)`` yields
``(input_nodes, pair_graph, neg_pair_graph, blocks)`` as DGL's does on a heterograph. Edge ids
are per-type ids (edge ``i`` of a type is the type's ``i``-th edge in the graph given to
``distribute``); the loader carries them as original homogeneous edge ids (the type's offset
plus the per-type id, :mod:`dglx_dist.partition.types`). A batch (:class:`TypedEdgePairs`):

1. is split by edge type into DGL's seed dict ``{canonical etype: per-type ids}``;
2. finds the edges' endpoints (``g.find_edges(ids, etype=...)``, per-type node ids);
3. calls the user's negative sampler on the DistGraph with that dict (DGL's ``Uniform(k)``
   draws ``k`` destinations of each edge's destination type per edge, uniformly);
4. compacts the nodes of both pair graphs per node type (sorted per-type ids), over which
   the pair graphs hold every canonical edge type, as DGL's do; those nodes, type by type,
   are the blocks' seeds, so the last block's destinations of type ``t`` are the pair
   graphs' nodes of type ``t`` in order;
5. puts the sampler's ``prefetch_labels`` (edge data) on the pair graph's edges of each
   edge type that has them, read through ``g.edges[etype].data`` by this rank alone;
6. names the edges to leave out of every sampled layer with DGL's own
   ``find_exclude_eids`` (``"self"``, ``"reverse_types"`` with ``reverse_etypes``,
   ``"reverse_id"`` with ``reverse_eids`` per edge type, or a callable on the seed dict),
   as partitioned edge ids: the members that store them leave them out
   (:meth:`~dglx_dist.sampling.PartitionSampler.exclusions`).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Callable

import dgl
import numpy as np
import torch

from dglx_dist.api.book import typed_edge_ids
from dglx_dist.api.graph import DistGraph
from dglx_dist.api.ndata import as_node_ids
from dglx_dist.errors import InvalidValueError, NotSupportedError
from dglx_dist.strategies.steps import EdgeBatch

__all__ = ["TypedEdgePairs"]

Etype = tuple[str, str, str]
EMPTY = torch.zeros(0, dtype=torch.int64)
_WHERE = "as_edge_prediction_sampler"
_MODES = ("self", "reverse_id", "reverse_types")


def _by_etype(g, value, what: str, expected: str) -> Mapping:
    """``value`` by edge type: as it is when a dict, else the one edge type's (refused, saying
    ``what`` and the ``expected`` dict, on a graph with several)."""
    if isinstance(value, Mapping):
        return value
    if len(g.canonical_etypes) != 1:
        raise InvalidValueError(f"{what}; on a graph with edge types it must return a dict "
                                f"{expected}")
    return {g.canonical_etypes[0]: value}


def _canonical(graph: DistGraph, key, what: str) -> Etype:
    """``graph.to_canonical_etype(key)``, its refusal prefixed with ``what``."""
    try:
        return graph.to_canonical_etype(key)
    except (KeyError, ValueError) as exc:
        raise type(exc)(f"{what}: {exc}") from None


def _reverse_etypes(graph: DistGraph, mapping) -> dict[Etype, Etype]:
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
    if not isinstance(reverse_eids, Mapping):
        if reverse_eids is None or len(graph.canonical_etypes) != 1:
            raise InvalidValueError(f"{_WHERE}: exclude='reverse_id' on a graph with edge "
                                    "types needs reverse_eids, a dict {edge type: tensor "
                                    "giving each edge of the type its reverse edge's id in "
                                    "the same type}")
        reverse_eids = {graph.canonical_etypes[0]: reverse_eids}
    out = {}
    for key, value in reverse_eids.items():
        etype = _canonical(graph, key, f"{_WHERE}: reverse_eids")
        n, reverse = graph.num_edges(etype), torch.as_tensor(value)
        if reverse.shape != (n,):
            raise InvalidValueError(f"{_WHERE}: reverse_eids[{etype}] has shape "
                                    f"{tuple(reverse.shape)}; expected one reverse edge id per "
                                    f"edge of the type ({n},)")
        out[etype] = as_node_ids(reverse, n, f"{_WHERE}: reverse_eids[{etype}]", kind="edge")
    return out


class TypedEdgePairs:
    """Builds a typed batch's pair graphs and exclusions from its edge ids (see the module
    docstring): the edge loader's :class:`~dglx_dist.strategies.steps.PairMaker` on a
    graph with edge types. Refuses, in one line, what it cannot honour."""

    def __init__(self, graph: DistGraph, sampler):
        from dgl.dataloading.negative_sampler import GlobalUniform

        self.graph, self.negative_sampler = graph, sampler.negative_sampler
        self.labels = list(sampler.prefetch_labels or [])
        for key in self.labels:
            if not any(key in graph.edges[et].data for et in graph.canonical_etypes):
                raise InvalidValueError(f"{_WHERE}: prefetch_labels names {key!r}, which no "
                                        f"edge type has; edge data here: "
                                        f"{sorted(graph.edata.stored())}")
        if isinstance(self.negative_sampler, GlobalUniform):
            raise NotSupportedError(f"{_WHERE}: negative_sampler.GlobalUniform is not "
                                    "supported on a graph with edge types yet; use "
                                    "negative_sampler.Uniform(k)")
        self._reverse_eids: dict[Etype, torch.Tensor] | None = None
        self._exclude = self._exclusion(sampler)

    @property
    def excludes(self) -> bool:
        """Whether the batches exclude edges from their blocks."""
        return self._exclude is not None

    def _exclusion(self, sampler) -> Callable[[dict], object] | None:
        exclude, graph = sampler.exclude, self.graph
        if exclude is None:
            return None
        if not callable(exclude) and (not isinstance(exclude, str) or exclude not in _MODES):
            raise NotSupportedError(f"{_WHERE}: exclude={exclude!r:.60}; expected None, 'self', "
                                    "'reverse_types' (with reverse_etypes), 'reverse_id' (with "
                                    "reverse_eids) or a callable")
        reverse_etypes = _reverse_etypes(graph, sampler.reverse_etypes) \
            if exclude == "reverse_types" else None
        if exclude == "reverse_id":
            self._reverse_eids = _reverse_eids(graph, sampler.reverse_eids)
        return lambda seeds: dgl.dataloading.find_exclude_eids(
            graph, seeds, exclude, self._reverse_eids, reverse_etypes)

    def read_ids(self, indices) -> torch.Tensor:
        """The loader's edge ids (original homogeneous ids) of the user's ``indices``; with
        ``exclude="reverse_id"`` every edge type among them needs its ``reverse_eids``."""
        ids = typed_edge_ids(self.graph, indices)
        if self._reverse_eids is not None:
            etypes = self.graph.canonical_etypes
            missing = [etypes[i] for i in np.unique(self.graph.pdir.types.etype_of(
                ids.numpy())[0]) if etypes[i] not in self._reverse_eids]
            if missing:
                raise InvalidValueError(f"{_WHERE}: reverse_eids has no entry for edge types "
                                        f"{missing} of the loader's edges")
        return ids

    def __call__(self, eids: torch.Tensor) -> EdgeBatch:
        g = self.graph
        seeds = self._seeds(eids)
        pos = {et: g.find_edges(ids, etype=et) for et, ids in seeds.items()}
        neg = self._negatives(seeds) if self.negative_sampler is not None else None
        uniq, (pos_local, neg_local) = self._compact([pos, neg or {}])
        pair = self._pair_graph(pos_local, uniq)
        eids_by_type = {et: seeds.get(et, EMPTY) for et in g.canonical_etypes}
        pair.edata[dgl.EID] = eids_by_type if len(eids_by_type) > 1 else \
            eids_by_type[g.canonical_etypes[0]]
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
        index, per_type = self.graph.pdir.types.etype_of(eids.numpy())
        etypes = self.graph.canonical_etypes
        return {etypes[e]: torch.from_numpy(per_type[index == e]) for e in np.unique(index)}

    def _negatives(self, seeds: dict) -> dict[Etype, tuple[torch.Tensor, torch.Tensor]]:
        """The negative sampler's pairs by canonical type, checked against each type's
        nodes."""
        g = self.graph
        out = _by_etype(g, self.negative_sampler(g, seeds), "the negative sampler returned "
                        "one (src, dst) pair", "{edge type: (src, dst)}")
        checked = {}
        for key, (src, dst) in out.items():
            et = _canonical(g, key, "the negative sampler's result")
            src = g.space(et[0]).check(src, f"the negative sampler's sources of {et}")
            dst = g.space(et[2]).check(dst, f"the negative sampler's destinations of {et}")
            if src.numel() != dst.numel():
                raise InvalidValueError(f"the negative sampler's pairs of {et}: {src.numel()} "
                                        f"sources for {dst.numel()} destinations")
            checked[et] = (src, dst)
        return checked

    def _compact(self, groups: list[dict]) -> tuple[dict[str, torch.Tensor], list[dict]]:
        """Each node type's nodes among the pairs of ``groups`` (sorted per-type ids), and
        each group's pairs in positions among them."""
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

    def _pair_graph(self, edges: dict, uniq: dict[str, torch.Tensor]) -> dgl.DGLGraph:
        """A heterograph with every canonical edge type over the compacted nodes."""
        g = self.graph
        pair = dgl.heterograph({et: edges.get(et, (EMPTY, EMPTY)) for et in g.canonical_etypes},
                               num_nodes_dict={t: n.numel() for t, n in uniq.items()})
        pair.ndata[dgl.NID] = uniq if len(g.ntypes) > 1 else uniq[g.ntypes[0]]
        return pair

    def _excluded(self, result) -> torch.Tensor:
        """Partitioned edge ids of DGL's exclusion (per-type ids by edge type)."""
        g = self.graph
        result = _by_etype(g, result, "the exclude callable returned a tensor",
                           "{edge type: edge ids}")
        hom = [EMPTY]
        for key, ids in result.items():
            et = _canonical(g, key, "the edges to exclude")
            ids = as_node_ids(ids, g.num_edges(et), f"the edges to exclude of {et}", kind="edge")
            hom.append(torch.from_numpy(g.pdir.types.etype_to_homogeneous(et, ids.numpy())))
        return g.edata.part_ids(torch.cat(hom))
