"""DGL's graph methods on a DistGraph: its edges, degrees and draws over the partitions.

:class:`EdgeStructure` gives a :class:`~dglx_dist.api.DistGraph` the methods DGL's samplers
call (:data:`SERVED`: ``find_edges``, ``sample_neighbors``, ``in_subgraph``, ``subgraph``,
``in_edges`` ...) with DGL's signatures and meanings, so DGL's own samplers and a user's
``BlockSampler`` run on it unchanged (docs/porting.md, "Your own sampler"). Endpoints and
degrees are KVStore rows read by this rank alone; every call that draws or reads edges is
collective (every rank makes the same calls in the same order); ids are the graph's own, in
and out; any other attribute is refused in one line naming what is served.
"""
from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING

import numpy as np
import torch

from dglx_dist.api.book import given_edge_ids, of_type
from dglx_dist.api.ndata import INTERNAL_PREFIX, as_node_ids
from dglx_dist.errors import (InvalidValueError, NotServedError, NotSupportedError,
                              UnknownNameError)
from dglx_dist.graphcore.frames import NID
from dglx_dist.sampling.in_edges import InEdges, draw_in_edges
from dglx_dist.sampling.options import SampleOptions

if TYPE_CHECKING:
    from dglx_dist.kvstore import DistKVStore
    from dglx_dist.partition.layout import Partition
    from dglx_dist.partition.load import PartitionDir

__all__ = ["EdgeStructure", "ENDS", "DEGREES", "SERVED", "store_structure",
           "fanout_of"]

ENDS = INTERNAL_PREFIX + "edge_ends"
"""The KVStore name of every edge's ``(src, dst)`` in partitioned node ids, by partitioned
edge id (internal: not listed in ``g.ndata`` or ``g.edata``)."""
DEGREES = INTERNAL_PREFIX + "degrees"
"""The KVStore name of every node's ``(in-degree, out-degree)``, by partitioned node id (a
graph without types only)."""
SERVED = ("sample_neighbors", "sample_labors", "in_subgraph", "subgraph", "in_edges",
          "out_edges", "in_degrees", "out_degrees", "find_edges", "num_nodes", "num_edges")
"""The structure methods a sampler is served (and named in the refusal of others)."""


def fanout_of(fanout) -> int:
    """DGL's fanout as a number of edges to draw (None or negative: all, -1)."""
    return -1 if fanout is None or int(fanout) < 0 else int(fanout)


def store_structure(store: "DistKVStore", pdir: "PartitionDir", part_id: int,
                    part: "Partition", comm) -> None:
    """Puts part ``part_id``'s edges' endpoints into ``store`` and, on a graph without types,
    its nodes' degrees (collective; ``comm``: one member per part, in part order)."""
    from dglx_dist.kvstore import RowPolicy
    from dglx_dist.sampling.blocks import id_dtype

    if pdir.types is None:  # in-edges are the part's own; out-edges are summed over parts
        indeg = np.bincount(part.dst, minlength=part.num_core + part.num_halo)[:part.num_core]
        out = comm.all_reduce(torch.from_numpy(part.source_counts(pdir.num_nodes)))
        out = out.index_select(0, torch.from_numpy(part.core_gid))
        rows = torch.stack([torch.from_numpy(indeg), out], 1)
        store.init_data(DEGREES, RowPolicy(pdir.book), {part_id: rows})
    dtype = np.int32 if id_dtype(pdir.num_nodes) == torch.int32 else np.int64
    gid = part.local_gid.astype(dtype)
    ends = np.empty((part.src.size, 2), dtype=dtype)  # gathered in place: no temporaries
    np.take(gid, part.src, out=ends[:, 0])
    np.take(gid, part.dst, out=ends[:, 1])
    store.init_data(ENDS, RowPolicy(pdir.edge_book()), {part_id: torch.from_numpy(ends)})


class EdgeStructure:
    """DGL's edge-structure methods, for :class:`DistGraph` (whose properties give the
    graph's types: ``types``, ``ntypes``, ``canonical_etypes``, ``is_typed``)."""

    is_block = False
    _local_graph = None  # local_partition's graph, once read
    _drawing = None  # the sampler a loader's user sampler draws through (drawn_by)
    _asker = "DistGraph"  # who calls, as errors name it
    idtype = torch.int64
    device = torch.device("cpu")

    def drawn_by(self, sampler, asker: str):
        """This graph, its draws made through ``sampler`` (a strategy's sampler: a loader's
        steps are drawn through it) and its errors naming ``asker`` (a user's sampler)."""
        view = copy.copy(self)
        view._drawing, view._asker = sampler, asker
        return view

    def _draws(self, what: str) -> tuple[str, object]:
        """How errors name method ``what``, and the sampler the graph's draws go through."""
        where = f"{self._asker}: g.{what}"
        self.refuse_types(f"{where}: not supported on a graph with edge types yet")
        return where, self._drawing if self._drawing is not None else self.sampler()

    def to_canonical_etype(self, etype) -> tuple[str, str, str]:
        """DGL's: the canonical edge type of ``etype`` (a relation name only one canonical
        type has, or a triple; None on a graph of one edge type: ``_E`` without types)."""
        if etype is None:
            if len(self.canonical_etypes) == 1:
                return self.canonical_etypes[0]
            raise InvalidValueError(f"this graph has edge types {self.canonical_etypes}; pass "
                                    "etype= naming one")
        return self.canonical_etypes[self.types.etype_index(etype)]

    def find_edges(self, eids, etype=None) -> tuple[torch.Tensor, torch.Tensor]:
        """The source and destination node ids of edges ``eids`` (the graph's own ids; per
        edge type ``etype`` on a graph with types, per-type ids out), as DGL's
        ``find_edges``; pulled through the KVStore by this rank alone."""
        canonical = self.to_canonical_etype(etype)
        hom = given_edge_ids(self, {canonical: eids}, "find_edges")
        ends = self.store.pull(ENDS, self.edata.part_ids(hom), collective=False).long()
        return (self.node_ids(ends[:, 0]) - self.space(canonical[0]).hom_offset,
                self.node_ids(ends[:, 1]) - self.space(canonical[2]).hom_offset)

    def edge_subgraph(self, edges, relabel_nodes: bool = True, store_ids: bool = True):
        """DGL's ``edge_subgraph``: a DGLGraph of ``edges`` (ids or a mask; a dict by edge
        type on a graph with types) and their ends, the edges' ids in ``edata[dgl.EID]``;
        with ``relabel_nodes``, only the ends, their ids in ``ndata[dgl.NID]``
        (``dgl.compact_graphs``). The ends are pulled by this rank alone; as in DGL, no
        features are copied and the ids are always stored (DGL's graph: DGL's door,
        :mod:`dglx_dist.dgl.graphs`)."""
        from dglx_dist.dgl.graphs import dgl_edge_subgraph  # noqa: PLC0415 - DGL's door

        if not store_ids:
            raise InvalidValueError("edge_subgraph: store_ids=False; DGL's edge_subgraph of a "
                                    "DistGraph always stores the ids (leave it out)")
        by_type = {self.to_canonical_etype(t): e for t, e in
                   (edges.items() if isinstance(edges, dict) else [(None, edges)])}
        by_type = {c: as_node_ids(e, self.num_edges(c), of_type(self, "edge_subgraph", c),
                                  kind="edge") for c, e in by_type.items()}
        return dgl_edge_subgraph({c: self.find_edges(e, c) for c, e in by_type.items()},
                                 by_type, {t: self.num_nodes(t) for t in self.ntypes},
                                 relabel_nodes)

    def local_partition(self):
        """DGL's ``local_partition``: this rank's part (its server's) as a DGLGraph over its
        local nodes, core nodes first, then the HALO nodes: ``ndata[dgl.NID]`` the graph's
        node ids (homogeneous ids on a graph with types, with ``ndata[dgl.NTYPE]``),
        ``ndata["inner_node"]``; ``edata[dgl.EID]`` the edges' ids (with ``edata[dgl.ETYPE]``
        on a graph with types). Every in-edge of the core nodes is there (DGL's graph: DGL's
        door, :func:`dglx_dist.dgl.graphs.part_graph`)."""
        from dglx_dist.dgl.graphs import part_graph  # noqa: PLC0415 - DGL's door

        if self._local_graph is None:
            part = self.pdir.load_part(self.get_partition_book().partid, features=False)
            local = part_graph(part)  # NID: partitioned ids, the homogeneous ids of types
            if not self.is_typed:
                local.ndata[NID] = self.node_ids(local.ndata[NID])
            else:
                types = self.pdir.types
                local.ndata["_TYPE"] = torch.from_numpy(  # DGL's NTYPE
                    self.pdir.type_row_of(part.local_gid)[0])
                local.edata["_TYPE"] = torch.from_numpy(  # DGL's ETYPE
                    np.searchsorted(types.etype_offsets, part.eid, side="right") - 1)
            self._local_graph = local
        return self._local_graph

    def in_degrees(self, v=None, etype=None):
        """DGL's ``in_degrees`` of nodes ``v`` (every node's when None; an int for one id),
        read from the KVStore by this rank alone."""
        return self._degrees(v, etype, 0, "in_degrees")

    def out_degrees(self, u=None, etype=None):
        """DGL's ``out_degrees`` of nodes ``u`` (every node's when None; an int for one id),
        read from the KVStore by this rank alone."""
        return self._degrees(u, etype, 1, "out_degrees")

    def _degrees(self, nodes, etype, column: int, what: str):
        self.refuse_types(f"g.{what}: not supported on a graph with edge types yet")
        self.to_canonical_etype(etype)
        one = isinstance(nodes, int) or (torch.is_tensor(nodes) and nodes.dim() == 0)
        ids = torch.arange(self.num_nodes()) if nodes is None else \
            as_node_ids(torch.as_tensor(nodes).reshape(-1), self.num_nodes(), f"g.{what}")
        rows = self.store.pull(DEGREES, self.part_ids(ids), collective=False)[:, column]
        return int(rows[0]) if one else rows.long()

    def sample_neighbors(self, seed_nodes, fanout, edge_dir: str = "in", prob=None,
                         exclude_edges=None, replace: bool = False, output_device=None,
                         **kwargs):
        """DGL's ``sample_neighbors``: up to ``fanout`` in-edges (``edge_dir="out"``:
        out-edges) of each seed (-1: all), drawn as ``prob`` (an edge data name: weights or a
        boolean mask) and ``replace`` say; a graph over every node with the drawn edges
        (collective). In-edges are drawn by their owners; out-edges are gathered from every
        part, all of each seed's, and drawn here."""
        where, sampler = self._draws("sample_neighbors")
        seeds, k = self._draw_args(where, seed_nodes, fanout, edge_dir, prob, ("in", "out"))
        if edge_dir == "out":
            return self._frontier(self._out_draw(sampler, seeds, k, prob, exclude_edges,
                                                 bool(replace)))
        return self._frontier(self._edges(sampler.sample_layer, seeds, k,
                                          self._routed(sampler, exclude_edges),
                                          SampleOptions(prob, bool(replace))))

    def sample_labors(self, seed_nodes, fanout, edge_dir: str = "in", prob=None,
                      importance_sampling: int = 0, random_seed=None,
                      seed2_contribution: float = 0, output_device=None, exclude_edges=None,
                      **kwargs):
        """DGL's ``sample_labors`` (LABOR, what ``LaborSampler`` calls) without importance
        sampling: each source node rolls one variate from ``random_seed`` (rank 0's, on
        every rank; drawn there when None), so the draws are those of one process over the
        same seeds (collective). Returns the graph of drawn edges and no importances (DGL's
        answer for ``importance_sampling=0``)."""
        where = f"{self._asker}: g.sample_labors"
        if importance_sampling:
            raise NotSupportedError(f"{where}(importance_sampling={importance_sampling}): "
                                    "its iterations weigh each batch's seeds together, across "
                                    "the parts; expected importance_sampling=0")
        _, sampler = self._draws("sample_labors")
        seeds, k = self._draw_args(where, seed_nodes, fanout, edge_dir, prob, ("in",))
        skip = self._routed(sampler, exclude_edges)
        seed = torch.randint(2**62, (1,)) if random_seed is None else \
            torch.as_tensor(random_seed.asnumpy() if hasattr(random_seed, "asnumpy")
                            else random_seed, dtype=torch.int64).reshape(-1)
        options = SampleOptions(prob, labor=tuple(sampler.agree(seed).tolist()),
                                seed2=float(seed2_contribution))
        frontier = self._frontier(self._edges(sampler.sample_layer, seeds, k, skip, options))
        return frontier, [torch.zeros(0)]

    def _draw_args(self, where: str, seed_nodes, fanout, edge_dir, prob,
                   directions: tuple[str, ...]) -> tuple[torch.Tensor, int]:
        """The seeds (unique) and fanout of a draw, its options checked first (every rank
        refuses the same call before any exchange)."""
        if edge_dir not in directions:
            raise NotSupportedError(f"{where}(edge_dir={edge_dir!r}): expected "
                                    f"{' or '.join(map(repr, directions))}")
        if isinstance(fanout, dict) or isinstance(seed_nodes, dict):
            raise NotSupportedError(f"{where}: per-type seeds or fanouts need a graph with "
                                    "types; this one has none")
        if prob is not None and prob not in (names := self.edata.keys()):
            raise UnknownNameError(f"{where}(prob={prob!r}): not edge data of this graph; "
                                   f"it has {sorted(names)}")
        return self._nodes(seed_nodes, where), fanout_of(fanout)

    def _routed(self, sampler, exclude_edges):
        """The graph's edge ids ``exclude_edges`` routed to the members storing them
        (collective; None: none)."""
        if exclude_edges is None:
            return None
        eids = torch.as_tensor(exclude_edges, dtype=torch.int64).reshape(-1)
        return sampler.exclusions(self.edata.part_ids(eids))

    def _out_draw(self, sampler, seeds: torch.Tensor, k: int, prob, exclude_edges,
                  replace: bool) -> tuple[torch.Tensor, ...]:
        """Up to ``k`` out-edges of each seed: every out-edge of the seeds but
        ``exclude_edges``, gathered from every part (collective), then drawn among them by
        the package's draw (:func:`~dglx_dist.sampling.draw_in_edges` over them grouped by
        source, with ``prob``'s rows read from the store)."""
        src, dst, eid = self._edges(sampler.out_edges, seeds)
        if exclude_edges is not None:
            keep = ~torch.isin(eid, torch.as_tensor(exclude_edges,
                                                    dtype=torch.int64).reshape(-1))
            src, dst, eid = src[keep], dst[keep], eid[keep]
        nodes, local = torch.unique(torch.cat([seeds, src, dst]), return_inverse=True)
        n, m = seeds.numel(), src.numel()
        by_source = InEdges.of(local[n + m:], local[n:n + m], nodes.numel())
        weights = None if prob is None else self.edata[prob][eid]
        _, pos = draw_in_edges(by_source, local[:n], k, replace, weights)
        picked = by_source.eid.index_select(0, pos)
        return src[picked], dst[picked], eid[picked]

    def in_subgraph(self, nodes, relabel_nodes: bool = False, **kwargs):
        """DGL's ``in_subgraph``: every in-edge of ``nodes``, over every node (collective)."""
        if relabel_nodes:
            raise NotSupportedError(f"{self._asker}: g.in_subgraph(relabel_nodes=True) is not "
                                    "supported; expected relabel_nodes=False")
        where, sampler = self._draws("in_subgraph")
        seeds = self._nodes(nodes, where)
        return self._frontier(self._edges(sampler.sample_layer, seeds, -1))

    def subgraph(self, nodes, relabel_nodes: bool = True, store_ids: bool = True,
                 output_device=None, **kwargs):
        """DGL's ``subgraph`` (node-induced, what ``ShaDowKHopSampler`` calls): the edges
        whose ends are both in ``nodes``, in edge id order, over ``nodes`` in their order
        with ``ndata[dgl.NID]`` (``relabel_nodes=False``: over every node), and
        ``edata[dgl.EID]`` (collective; DGL's graph: DGL's door, :mod:`dglx_dist.dgl.graphs`)."""
        from dglx_dist.dgl.graphs import dgl_graph  # noqa: PLC0415 - DGL's door

        where, sampler = self._draws("subgraph")
        if isinstance(nodes, dict):
            raise NotSupportedError(f"{where}: per-type nodes need a graph with types; this "
                                    "one has none")
        ids = as_node_ids(nodes, self.num_nodes(), where)
        if torch.unique(ids).numel() != ids.numel():
            raise InvalidValueError(f"{where}: the nodes repeat; expected each node once")
        src, dst, eid = self._edges(sampler.sample_layer, torch.unique(ids), -1)
        inside = torch.isin(src, ids)
        order = torch.argsort(eid[inside])
        src, dst, eid = src[inside][order], dst[inside][order], eid[inside][order]
        if not relabel_nodes:
            return dgl_graph(src, dst, self.num_nodes(), edata={NID: eid})
        sort = torch.sort(ids)  # each end's position in ``nodes``
        return dgl_graph(sort.indices[torch.searchsorted(sort.values, src)],
                         sort.indices[torch.searchsorted(sort.values, dst)], ids.numel(),
                         {NID: ids}, {NID: eid})

    def in_edges(self, v, form: str = "uv", etype=None):
        """DGL's ``in_edges``: the in-edges of ``v`` as ``(u, v)``, their ids (``"eid"``) or
        all three (``"all"``), in the graph's ids (collective)."""
        where, sampler = self._draws("in_edges")
        return _form(self._edges(sampler.sample_layer, self._nodes(v, where), -1), form,
                     where)

    def out_edges(self, u, form: str = "uv", etype=None):
        """DGL's ``out_edges`` of ``u``, as :meth:`in_edges` (collective: every part's)."""
        where, sampler = self._draws("out_edges")
        return _form(self._edges(sampler.out_edges, self._nodes(u, where)), form, where)

    def _nodes(self, nodes, where: str) -> torch.Tensor:
        """``nodes`` as unique int64 ids (each node's edges are drawn once)."""
        return torch.unique(as_node_ids(nodes, self.num_nodes(), where))

    def _edges(self, fn, nodes: torch.Tensor, *args) -> tuple[torch.Tensor, ...]:
        """``fn`` (a sampler's method) of the graph's ids ``nodes``: its ``(src, dst, eid)``
        with the ends in the graph's ids."""
        src, dst, eid = fn(self.part_ids(nodes), *args)[:3]
        return self.node_ids(src), self.node_ids(dst), eid

    def _frontier(self, edges):
        from dglx_dist.dgl.graphs import dgl_graph  # noqa: PLC0415 - DGL's door

        src, dst, eid = edges
        return dgl_graph(src, dst, self.num_nodes(), edata={NID: eid})

    def _has_edges(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Whether each ``u[i] -> v[i]`` is an edge (node ids; collective: every rank asks at
        once, each pair answered by its destination's owner)."""
        sampler = getattr(self.strategy, "sampler", None)
        if not hasattr(sampler, "has_edges"):
            sampler = self.sampler()
        return sampler.has_edges(self.part_ids(u), self.part_ids(v))

    def global_uniform_negative_sampling(self, num_samples: int,
                                         exclude_self_loops: bool = True,
                                         replace: bool = False, etype=None,
                                         redundancy: float | None = None
                                         ) -> tuple[torch.Tensor, torch.Tensor]:
        """At most ``num_samples`` pairs ``(u, v)`` drawn uniformly from all nodes that are not
        edges (nor self-loops, with ``exclude_self_loops``; distinct, unless ``replace``), as
        DGL's method of this name (what ``negative_sampler.GlobalUniform`` calls). Collective:
        every rank calls it at the same step (the edge loader does)."""
        self.refuse_types("global_uniform_negative_sampling (GlobalUniform): not supported "
                          "on a graph with edge types yet; use negative_sampler.Uniform(k)")
        self.to_canonical_etype(etype)
        n = self.num_nodes()
        draws = math.ceil(num_samples * (1.0 + (1.3 if redundancy is None else redundancy)))
        u = torch.randint(0, n, (draws,))
        v = torch.randint(0, n, (draws,))
        keep = ~self._has_edges(u, v)
        if exclude_self_loops:
            keep &= u != v
        u, v = u[keep], v[keep]
        if not replace:  # the first draw of each pair, in draw order
            _, inverse = torch.unique(u * n + v, return_inverse=True)
            first = torch.full((int(inverse.max()) + 1 if inverse.numel() else 0,), u.numel())
            first.scatter_reduce_(0, inverse, torch.arange(u.numel()), "amin")
            order = first.sort().values
            u, v = u[order], v[order]
        return u[:num_samples], v[:num_samples]

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotServedError(f"{self._asker} asked the distributed graph for {name!r}, which "
                             f"it does not have; samplers are served {', '.join(SERVED)} "
                             "(call DGL's methods on g, not DGL's functions that need a local "
                             "graph)")


def _form(edges: tuple[torch.Tensor, ...], form: str, where: str):
    """DGL's ``form`` of ``(src, dst, eid)``: ``"uv"``, ``"eid"`` or ``"all"``."""
    if form not in ("uv", "eid", "all"):
        raise InvalidValueError(f"{where}(form={form!r}); expected 'uv', 'eid' or 'all'")
    src, dst, eid = edges
    return {"uv": (src, dst), "eid": eid, "all": (src, dst, eid)}[form]
