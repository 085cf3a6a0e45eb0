"""What DGL's graph methods give a script about the edges of a DistGraph.

DGL's negative samplers and edge loaders ask the graph for its edges' endpoints
(``g.find_edges(eids)``), its node count and, for ``GlobalUniform``, pairs that are not
edges (``g.global_uniform_negative_sampling``). :class:`EdgeStructure` gives a
:class:`~dglx_dist.api.DistGraph` those methods, so DGL's own samplers (and a user's, written
against the same methods) run on it unchanged:

* every edge's endpoints live in the KVStore as one row per edge, sharded like the edge data
  (with the edge's destination's owner), so ``find_edges`` is a pull by this rank alone (on a
  graph with edge types, ``find_edges(eids, etype=...)`` takes and gives per-type ids, as
  DGL's, so DGL's ``negative_sampler.Uniform`` runs on it unchanged);
* negative pairs are drawn uniformly over all nodes of all parts and checked against the
  structure by the destinations' owners (collective: every rank draws at the same time, as
  the edge loader's steps do).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch

from dglx_dist.api.ndata import INTERNAL_PREFIX, as_node_ids
from dglx_dist.api.sampling_graph import SamplingGraph
from dglx_dist.errors import InvalidValueError, NotSupportedError

if TYPE_CHECKING:
    from dglx_dist.kvstore import DistKVStore
    from dglx_dist.partition.layout import Partition
    from dglx_dist.partition.load import PartitionDir

__all__ = ["EdgeStructure", "ENDS", "DEGREES", "part_graph", "store_structure"]

ENDS = INTERNAL_PREFIX + "edge_ends"
"""The KVStore name of every edge's ``(src, dst)`` in partitioned node ids, by partitioned
edge id (internal: not listed in ``g.ndata`` or ``g.edata``)."""
DEGREES = INTERNAL_PREFIX + "degrees"
"""The KVStore name of every node's ``(in-degree, out-degree)``, by partitioned node id (a
graph without types only)."""
ETYPE = ("_N", "_E", "_N")  # DGL's names for the one node and edge type of a homogeneous graph


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


def part_graph(part: "Partition"):
    """Part ``part``'s structure as a DGLGraph over its local nodes (core, then HALO):
    ndata ``_ID`` (partitioned ids), ``inner_node`` (core or HALO), ``orig_id``; edata
    ``_ID`` (the edge's row in the dataset). The node rows stay in the part's arrays."""
    import dgl

    n = part.num_core + part.num_halo
    g = dgl.graph((torch.from_numpy(part.src), torch.from_numpy(part.dst)), num_nodes=n)
    g.ndata["_ID"] = torch.from_numpy(part.local_gid)
    g.ndata["orig_id"] = torch.from_numpy(np.concatenate([part.core_orig, part.halo_orig]))
    g.ndata["inner_node"] = torch.arange(n) < part.num_core
    g.edata["_ID"] = torch.from_numpy(part.eid)
    return g


class EdgeStructure:
    """DGL's edge-structure methods, for :class:`DistGraph` (whose properties give a typed
    graph's types)."""

    ntypes = ["_N"]
    etypes = ["_E"]
    canonical_etypes = [ETYPE]
    is_typed = False
    _local_graph = None  # local_partition's graph, once read
    idtype = torch.int64
    device = torch.device("cpu")

    def to_canonical_etype(self, etype) -> tuple[str, str, str]:
        """DGL's: the canonical edge type of ``etype`` (a relation name only one canonical
        type has, or a triple; None on a graph of one edge type)."""
        if not self.is_typed:
            if etype not in (None, "_E", ETYPE):
                raise InvalidValueError(f"edge type {etype!r}: the graph is homogeneous (edge "
                                        "type '_E')")
            return ETYPE
        if etype is None:
            if len(self.canonical_etypes) == 1:
                return self.canonical_etypes[0]
            raise InvalidValueError(f"this graph has edge types {self.canonical_etypes}; pass "
                                    "etype= naming one")
        return self.canonical_etypes[self.pdir.types.etype_index(etype)]

    def find_edges(self, eids, etype=None) -> tuple[torch.Tensor, torch.Tensor]:
        """The source and destination node ids of edges ``eids`` (the graph's own ids; per
        edge type ``etype`` on a graph with types, per-type ids out), as DGL's
        ``find_edges``; pulled through the KVStore by this rank alone."""
        canonical = self.to_canonical_etype(etype)
        if not self.is_typed:
            ids = as_node_ids(eids, self.num_edges(), "find_edges", kind="edge")
            ends = self.store.pull(ENDS, self.edata.part_ids(ids), collective=False).long()
            return self.node_ids(ends[:, 0]), self.node_ids(ends[:, 1])
        ids = as_node_ids(eids, self.num_edges(canonical),
                          f"find_edges (edge type {canonical})", kind="edge")
        hom = torch.from_numpy(self.pdir.types.etype_to_homogeneous(canonical, ids.numpy()))
        ends = self.store.pull(ENDS, self.edata.part_ids(hom), collective=False).long()
        return (self.node_ids(ends[:, 0]) - self.space(canonical[0]).hom_offset,
                self.node_ids(ends[:, 1]) - self.space(canonical[2]).hom_offset)

    def edge_subgraph(self, edges, relabel_nodes: bool = True, store_ids: bool = True):
        """DGL's ``edge_subgraph``: a DGLGraph of ``edges`` (ids or a mask; a dict by edge
        type on a graph with types) and their ends, the edges' ids in ``edata[dgl.EID]``;
        with ``relabel_nodes``, only the ends, their ids in ``ndata[dgl.NID]``
        (``dgl.compact_graphs``). The ends are pulled by this rank alone; as in DGL, no
        features are copied and the ids are always stored."""
        import dgl

        if not store_ids:
            raise InvalidValueError("edge_subgraph: store_ids=False; DGL's edge_subgraph of a "
                                    "DistGraph always stores the ids (leave it out)")
        if not self.is_typed and not isinstance(edges, dict):
            ids = as_node_ids(edges, self.num_edges(), "edge_subgraph", kind="edge")
            sub = dgl.graph(self.find_edges(ids), num_nodes=self.num_nodes())
            sub.edata[dgl.EID] = ids
        else:
            by_type = {self.to_canonical_etype(t): e for t, e in
                       (edges.items() if isinstance(edges, dict) else [(None, edges)])}
            by_type = {c: as_node_ids(e, self.num_edges(c), f"edge_subgraph (edge type {c})",
                                      kind="edge") for c, e in by_type.items()}
            sub = dgl.heterograph({c: self.find_edges(e, c) for c, e in by_type.items()},
                                  num_nodes_dict={t: self.num_nodes(t) for t in self.ntypes})
            for c, e in by_type.items():
                sub.edges[c].data[dgl.EID] = e
        return dgl.compact_graphs(sub) if relabel_nodes else sub

    def local_partition(self):
        """DGL's ``local_partition``: this rank's part (its server's) as a DGLGraph over its
        local nodes, core nodes first, then the HALO nodes: ``ndata[dgl.NID]`` the graph's
        node ids (homogeneous ids on a graph with types, with ``ndata[dgl.NTYPE]``),
        ``ndata["inner_node"]``; ``edata[dgl.EID]`` the edges' ids (with ``edata[dgl.ETYPE]``
        on a graph with types). Every in-edge of the core nodes is there."""
        import dgl

        if self._local_graph is None:
            part = self.pdir.load_part(self.get_partition_book().partid, features=False)
            local = part_graph(part)  # NID: partitioned ids, the homogeneous ids of types
            if not self.is_typed:
                local.ndata[dgl.NID] = self.node_ids(local.ndata[dgl.NID])
            else:
                types = self.pdir.types
                local.ndata[dgl.NTYPE] = torch.from_numpy(
                    self.pdir.type_row_of(part.local_gid)[0])
                local.edata[dgl.ETYPE] = torch.from_numpy(
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
        if self.is_typed:
            raise NotSupportedError(f"g.{what}: not supported on a graph with edge types yet")
        self.to_canonical_etype(etype)
        one = isinstance(nodes, int) or (torch.is_tensor(nodes) and nodes.dim() == 0)
        ids = torch.arange(self.num_nodes()) if nodes is None else \
            as_node_ids(torch.as_tensor(nodes).reshape(-1), self.num_nodes(), f"g.{what}")
        rows = self.store.pull(DEGREES, self.part_ids(ids), collective=False)[:, column]
        return int(rows[0]) if one else rows.long()

    def sample_neighbors(self, seed_nodes, fanout, **kwargs):
        """DGL's ``sample_neighbors`` over the partitions, in the graph's own ids (collective:
        every rank calls it at once; see :mod:`dglx_dist.api.sampling_graph`)."""
        return self._sampling("sample_neighbors").sample_neighbors(seed_nodes, fanout,
                                                                   **kwargs)

    def in_subgraph(self, nodes, **kwargs):
        """DGL's ``in_subgraph``: every in-edge of ``nodes`` (collective)."""
        return self._sampling("in_subgraph").in_subgraph(nodes, **kwargs)

    def in_edges(self, v, form: str = "uv", etype=None):
        """DGL's ``in_edges`` of ``v`` (collective)."""
        return self._sampling("in_edges").in_edges(v, form)

    def out_edges(self, u, form: str = "uv", etype=None):
        """DGL's ``out_edges`` of ``u``, gathered from every part (collective)."""
        return self._sampling("out_edges").out_edges(u, form)

    def _sampling(self, what: str) -> SamplingGraph:
        if self.is_typed:
            raise NotSupportedError(f"g.{what}: not supported on a graph with edge types yet")
        return SamplingGraph(self.sampler(), self, "DistGraph")

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
        if self.is_typed:
            raise NotSupportedError("global_uniform_negative_sampling (GlobalUniform): not "
                                    "supported on a graph with edge types yet; use "
                                    "negative_sampler.Uniform(k)")
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
