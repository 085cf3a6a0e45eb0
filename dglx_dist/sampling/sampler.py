"""Distributed neighbor sampling over a partitioned graph, producing DGL blocks.

Every member of the communicator the sampler is given holds one part: its core nodes with
*all* their in-edges (HALO sources included), so sampling the in-neighbors of its own nodes is
local. (distdgl: a part per server, members = ``cross``, the ranks with this rank's local index
on every server; p3: a part per rank, members = ``world``.) Frontier nodes owned by other
members are sampled by their owners: per layer, the frontier is split by owner and exchanged;
each owner samples and answers with the sources (see :meth:`PartitionSampler.sample_layer`).
Own frontier nodes are sampled while the requests travel. Sampling is therefore
*collective*: every member calls :meth:`PartitionSampler.sample_blocks` the same number of
times (with the same number of layers); members with nothing to sample pass empty seeds.

Every sampled edge comes with its edge id in the user's graph (the part's ``edata["_ID"]``,
its row in the dataset's edges), which :func:`~dglx_dist.sampling.blocks.make_block` puts on
the block as ``edata[dgl.EID]``. A layer draws uniformly without replacement unless the
:class:`~dglx_dist.sampling.options.SampleOptions` given to ``sample_blocks`` say otherwise
(DGL's ``prob`` / ``mask`` / ``replace``): the owner of a node draws its in-edges, with its own
rows of the weights.

Link prediction's loaders exclude edges from the sampled neighbourhoods (DGL's ``exclude``:
a batch's positive edges and their reverses): ``sample_blocks(seeds, fanouts, exclude)``
takes partitioned edge ids; each goes once, with the requests of the step, to the member
that stores the edge, which leaves it out of every layer it samples for this requester (on
a typed partitioning, out of its edge type's graph: :meth:`PartitionSampler.typed_exclusions`).
"""
from __future__ import annotations

import abc
from typing import Callable, Sequence

import dgl
import torch

from dglx_dist.errors import InvalidValueError
from dglx_dist.partition.book import NodeBook, RangeBook
from dglx_dist.partition.layout import Partition
from dglx_dist.runtime.comm import Comm
from dglx_dist.sampling.blocks import id_dtype, make_block
from dglx_dist.sampling.draws import PROB, Draws
from dglx_dist.sampling.options import UNIFORM, EdgeWeights, SampleOptions
from dglx_dist.sampling.typed import HOM_EID, LOCAL, LOCAL_EID, edges_by_type

__all__ = ["BlockSampler", "PartitionSampler"]

EMPTY = torch.zeros(0, dtype=torch.int64)


class BlockSampler(abc.ABC):
    """Builds a GNN's blocks layer by layer from a ``sample_layer`` (subclasses provide it)."""

    num_nodes: int

    @abc.abstractmethod
    def sample_layer(self, nodes: torch.Tensor, fanout: int, exclude=None,
                     options: SampleOptions = UNIFORM
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sampled in-edges ``(src, dst, eid)`` of ``nodes`` (global ids; ``eid``: the user's
        edge ids), leaving out the edges ``exclude`` (what :meth:`exclusions` made of the
        ids given to sample_blocks), drawn as ``options`` say."""

    @abc.abstractmethod
    def out_edges(self, nodes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every edge out of ``nodes`` (global ids) as ``(src, dst, eid)``."""

    def exclusions(self, exclude: torch.Tensor):
        """What :meth:`sample_layer` gets for the partitioned edge ids ``exclude``."""
        return exclude

    def agree(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` (a random seed) the same on every member that draws for this one:
        the first member's (collective where members draw for each other)."""
        return values

    def sample_blocks(self, seeds: torch.Tensor, fanouts: Sequence[int],
                      exclude: torch.Tensor | None = None,
                      options: SampleOptions = UNIFORM) -> list[dgl.DGLGraph]:
        """Blocks for a GNN with ``len(fanouts)`` layers; ``fanouts[i]`` is layer i's fanout
        (input layer first, as in DGL's NeighborSampler); -1 takes every in-neighbor.
        ``exclude``: partitioned edge ids no layer may sample (DGL's ``exclude_eids``);
        ``options``: how each layer draws."""
        blocks: list[dgl.DGLGraph] = []
        frontier = seeds
        routed = self.exclusions(exclude) if exclude is not None else None
        for fanout in reversed(fanouts):
            src, dst, eid = self.sample_layer(frontier, fanout, routed, options)
            block = make_block(frontier, src, dst, self.num_nodes, eid)
            blocks.insert(0, block)
            frontier = block.srcdata[dgl.NID]
        return blocks


class PartitionSampler(BlockSampler):
    """Samples blocks for seed nodes given in the partitioned graph's global ids.

    Args:
        part: this member's loaded partition.
        book: the node book (one part per member: part ``p`` is held by member ``p``).
        comm: the members, in part order.
        member: this rank's index in ``comm`` (the part it holds).
        edge_book: where each partitioned edge id is stored (``PartitionDir.edge_book()``).
        etype_offsets: a typed partitioning's edge type offsets (None: no types).
        edge_weights: the part's edge data by name, for weighted draws
            (:func:`~dglx_dist.sampling.options.part_edge_weights`; None: none).
        has_edge_data: on a typed partitioning, whether edge type ``e`` has edge data
            ``name`` (``has_edge_data(e, name)``; a type without a ``prob`` draws uniformly,
            as in DGL).
    """

    def __init__(self, part: Partition, book: NodeBook, comm: Comm, member: int,
                 edge_book: RangeBook, etype_offsets=None,
                 edge_weights: EdgeWeights | None = None,
                 has_edge_data: Callable[[int, str], bool] | None = None):
        if book.num_parts != comm.size:
            raise InvalidValueError(f"sampling needs one part per member of {comm.name}: the "
                                    f"partition has {book.num_parts} parts for {comm.size} members")
        self.book, self.comm, self.member, self.edge_book = book, comm, member, edge_book
        self.graph = part.local_graph()
        self.local_gid, self.local_eid = self.graph.ndata["_ID"], self.graph.edata["_ID"]
        self.num_core = part.num_core
        self.draws = Draws(self.graph, edge_weights, self.graph.ndata["orig_id"])
        self.num_nodes = book.num_nodes
        # node ids, edge ids and counts travel in one dtype, the same on every member
        self.id_dtype = id_dtype(max(book.num_nodes, edge_book.num_nodes))
        self._slot = torch.empty(self.graph.num_nodes(), dtype=torch.int64)  # local id -> row
        # a typed partitioning: the part's edges by edge type (one heterograph, sampled in one
        # call), and each local edge's id in its type (what an exclusion names there)
        self.by_etype = self._type_pos = None
        self._has_edge_data, self._weights = has_edge_data, edge_weights
        if etype_offsets is not None:
            self.etype_offsets = torch.tensor([int(o) for o in etype_offsets])
            self.by_etype, self._type_pos = edges_by_type(self.graph, self.etype_offsets)
            self._etype_keys = [(LOCAL, str(e), LOCAL)  # by index (DGL sorts the names)
                                for e in range(self.etype_offsets.numel() - 1)]

    def exclusions(self, exclude: torch.Tensor) -> list[torch.Tensor]:
        """Per member, the local ids of this part's edges that member excludes (collective:
        each excluded edge is sent to the member that stores it)."""
        exclude = torch.as_tensor(exclude, dtype=torch.int64)
        owner = torch.as_tensor(self.edge_book.owner(exclude))
        local = torch.as_tensor(self.edge_book.to_local(exclude))
        return self.comm.all_to_all_v([local[owner == s] for s in range(self.comm.size)])

    def agree(self, values: torch.Tensor) -> torch.Tensor:
        return self.comm.broadcast(values.clone(), src=0)

    def typed_exclusions(self, exclude: torch.Tensor) -> list[list[torch.Tensor]]:
        """:meth:`exclusions` on a typed partitioning: per member, per edge type, the ids
        in that type's graph of this part's edges the member excludes (collective)."""
        out = []
        for local in self.exclusions(exclude):
            local = local.long()
            etype = torch.searchsorted(self.etype_offsets,
                                       self.graph.edata["_ID"].index_select(0, local),
                                       right=True) - 1
            out.append([self._type_pos.index_select(0, local[etype == e])
                        for e in range(len(self._etype_keys))])
        return out

    def has_edges(self, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """Whether each edge ``src[i] -> dst[i]`` (global ids) is in the graph (collective:
        every pair is asked of its destination's owner, which stores all its in-edges)."""
        owner = torch.as_tensor(self.book.owner(dst))
        pairs = torch.stack([src, dst], 1).to(self.id_dtype)
        picks = [torch.nonzero(owner == s).squeeze(1) for s in range(self.comm.size)]
        received = self.comm.all_to_all_v([pairs.index_select(0, p) for p in picks])
        answers = [self._has_local(r[:, 0].long(), r[:, 1].long()).to(torch.int8)
                   for r in received]
        out = torch.zeros(src.numel(), dtype=torch.bool)
        for pick, got in zip(picks, self.comm.all_to_all_v(
                answers, recv_rows=[p.numel() for p in picks])):
            out[pick] = got.bool()
        return out

    def out_edges(self, nodes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every edge out of ``nodes`` (global ids) as ``(src, dst, eid)``, wherever it is
        stored (collective: every member's nodes go to every member, which answers with its
        part's edges out of them)."""
        answers = []
        for asked in self.comm.all_gather_v(nodes.to(self.id_dtype)):
            u, known = self._local_ids(asked.long())
            src, dst, eid = self.graph.out_edges(u[known], form="all")
            answers.append(torch.cat([self.local_gid.index_select(0, src),
                                      self.local_gid.index_select(0, dst),
                                      self.local_eid.index_select(0, eid)]).to(self.id_dtype))
        got = [a.long().view(3, -1) for a in self.comm.all_to_all_v(answers)]
        return tuple(torch.cat(part) for part in zip(*got)) if got else (EMPTY,) * 3

    def _local_ids(self, gids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The local ids of global ids ``gids`` and whether each is in this part (a core or
        a HALO node; the local id is meaningless where not)."""
        halo = self.local_gid[self.num_core:]  # increasing global ids
        pos = torch.searchsorted(halo, gids).clamp(max=max(halo.numel() - 1, 0))
        is_halo = halo[pos] == gids if halo.numel() else torch.zeros_like(gids, dtype=torch.bool)
        is_core = torch.as_tensor(self.book.owner(gids)) == self.member
        local = torch.where(is_core, torch.as_tensor(self.book.to_local(gids)),
                            pos + self.num_core)
        return local, is_core | is_halo

    def _has_local(self, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """:meth:`has_edges` for destinations this part owns."""
        u, known = self._local_ids(src)  # a source not here has no edge into this part
        out = torch.zeros(src.numel(), dtype=torch.bool)
        if bool(known.any()):
            v = torch.as_tensor(self.book.to_local(dst[known]))
            out[known] = self.graph.has_edges_between(u[known], v)
        return out

    def sample_layer(self, nodes: torch.Tensor, fanout: int,
                     exclude: list[torch.Tensor] | None = None,
                     options: SampleOptions = UNIFORM
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sampled in-edges ``(src, dst, eid)`` of ``nodes`` (global ids), wherever they are
        owned, drawn as ``options`` say by the owner.

        A request is the node ids (``id_dtype``); own nodes are sampled while it travels. With
        a fanout, the answer is one row per requested node: ``fanout`` sources, then their
        ``fanout`` edge ids, padded with -1, so its size is known and the answer round needs
        no round of counts; with the full neighbourhood (-1), or LABOR's draws (as many
        edges as the fanout in expectation), it is, per requested node in request order, its
        number of drawn in-edges, then all their sources, then their edge ids.
        The requester knows the destinations already.
        """
        mine, requests, skip, pending = self._requests(nodes, exclude)
        try:
            _, u, v, e = self._sample_local(mine, fanout, skip[self.member], options)
        finally:
            received = pending.wait()
        srcs, dsts, eids = [self.local_gid.index_select(0, u)], \
            [self.local_gid.index_select(0, v)], [e]
        if fanout < 0 or options.labor is not None:  # LABOR: fanout edges in expectation
            answers = [torch.cat(self._grouped(r.long(), fanout, x, options)).to(self.id_dtype)
                       for r, x in zip(received, skip)]
            for asked, got in zip(requests, self.comm.all_to_all_v(answers)):
                n = asked.numel()
                counts = got[:n].long()
                src, eid = got[n:].long().view(2, -1)
                srcs.append(src)
                eids.append(eid)
                dsts.append(torch.repeat_interleave(asked.long(), counts))
        else:
            answers = [self._padded(r.long(), fanout, x, options) for r, x in zip(received, skip)]
            returned = self.comm.all_to_all_v(answers, recv_rows=[r.numel() for r in requests])
            for asked, got in zip(requests, returned):
                src, eid = got[:, :fanout], got[:, fanout:]
                kept = src >= 0
                srcs.append(src[kept].long())
                eids.append(eid[kept].long())
                dsts.append(torch.repeat_interleave(asked.long(), kept.sum(1)))
        return torch.cat(srcs), torch.cat(dsts), torch.cat(eids)

    def _requests(self, nodes: torch.Tensor, exclude):
        """This member's own nodes of ``nodes``, the others' by owner (a request each, the
        own one empty), the exclusions by member and the requests' exchange, started."""
        owner = torch.as_tensor(self.book.owner(nodes))
        requests = [nodes[owner == s].to(self.id_dtype) if s != self.member else
                    torch.zeros(0, dtype=self.id_dtype) for s in range(self.comm.size)]
        return (nodes[owner == self.member], requests, exclude or [None] * self.comm.size,
                self.comm.start_all_to_all_v(requests))

    def sample_typed_layer(self, nodes: torch.Tensor, fanouts: Sequence[int],
                           exclude: list[list[torch.Tensor]] | None = None,
                           options: SampleOptions = UNIFORM) -> tuple[torch.Tensor, ...]:
        """:meth:`sample_layer` on a typed partitioning: ``fanouts[e]`` in-edges of edge type
        ``e`` per node (-1: all; 0: none) but those ``exclude`` names (what
        :meth:`typed_exclusions` gave), as ``(src, dst, etype, eid)``: each sampled edge's
        type and its homogeneous edge id, drawn as ``options`` say (``prob`` on the edge
        types that have it). A request is the node ids; the answer, per requested node in
        request order, its number of sampled edges, then their sources, then their edge
        types, then their edge ids."""
        if self.by_etype is None:
            raise InvalidValueError("typed sampling needs a typed partitioning's edge types "
                                    "(PartitionSampler(..., etype_offsets=...))")
        mine, requests, skip, pending = self._requests(nodes, exclude)
        draw = {"prob": self._typed_prob(options.prob), "replace": options.replace}
        try:
            got = [(mine, *self._typed_grouped(mine, fanouts, skip[self.member], draw))]
        finally:
            received = pending.wait()
        answers = [torch.cat(self._typed_grouped(r.long(), fanouts, x, draw)).to(self.id_dtype)
                   for r, x in zip(received, skip)]
        for asked, answer in zip(requests, self.comm.all_to_all_v(answers)):
            n = asked.numel()
            counts = answer[:n].long()
            got.append((asked.long(), counts, *answer[n:].long().view(3, -1)))
        dst = torch.cat([torch.repeat_interleave(g[0], g[1]) for g in got])
        return (torch.cat([g[2] for g in got]), dst, *(torch.cat([g[i] for g in got])
                                                      for i in (3, 4)))

    def _typed_prob(self, name: str | None) -> str | None:
        """Sets each edge type's weights of edge data ``name`` on the part's graph by type
        (none on a type without it: drawn uniformly); the key to draw by, or None."""
        if name is None:
            return None
        if self._weights is None or self._has_edge_data is None:
            raise InvalidValueError(f"weighted sampling (prob={name!r}) needs the sampler's "
                                    "edge data (edge_weights=..., has_edge_data=...)")
        weights, weighted = self._weights(name).reshape(-1), False
        for e, key in enumerate(self._etype_keys):
            data = self.by_etype.edges[key].data
            data.pop(PROB, None)
            if self._has_edge_data(e, name):
                data[PROB] = weights.index_select(0, data[LOCAL_EID])
                weighted = True
        return PROB if weighted else None

    def _typed_grouped(self, gids: torch.Tensor, fanouts: Sequence[int],
                       exclude: list[torch.Tensor] | None = None, draw: dict | None = None):
        """Per owned node in ``gids`` (unique), its number of sampled in-edges (but the
        edges ``exclude[e]`` of each type's graph; drawn with ``draw``'s ``prob`` and
        ``replace``), their sources' global ids, their edge types and their homogeneous edge
        ids, grouped by node in ``gids`` order."""
        local = torch.as_tensor(self.book.to_local(gids))
        us, vs, ets, eids = [EMPTY], [EMPTY], [EMPTY], [EMPTY]
        names = self._etype_keys
        if local.numel() and any(fanouts):  # every edge type in one call
            skip = {names[e]: x for e, x in enumerate(exclude or []) if x.numel()}
            frontier = dgl.sampling.sample_neighbors(
                self.by_etype, {LOCAL: local}, dict(zip(names, fanouts)), edge_dir="in",
                exclude_edges=skip or None, copy_ndata=False, **(draw or {}))
            for etype, fanout in enumerate(fanouts):
                if fanout:
                    u, v = frontier.edges(etype=names[etype])
                    us.append(u)
                    vs.append(v)
                    ets.append(torch.full_like(u, etype))
                    eids.append(frontier.edges[names[etype]].data[HOM_EID])
        u, v, et, eid = (torch.cat(t) for t in (us, vs, ets, eids))
        self._slot[local] = torch.arange(local.numel())
        pos = self._slot.index_select(0, v)
        order = torch.argsort(pos, stable=True)
        counts = torch.bincount(pos, minlength=gids.numel())
        return counts, self.local_gid.index_select(0, u.index_select(0, order)), \
            et.index_select(0, order), eid.index_select(0, order)

    def _sample_local(self, gids: torch.Tensor, fanout: int,
                      exclude: torch.Tensor | None = None, options: SampleOptions = UNIFORM):
        """Sampled in-edges ``(u, v)`` (local ids) of the owned nodes ``gids`` but the local
        edges ``exclude``, drawn as ``options`` say; the nodes' local ids first, the edges'
        ids in the user's graph last."""
        local = torch.as_tensor(self.book.to_local(gids))
        if local.numel() == 0:
            return local, EMPTY, EMPTY, EMPTY
        skip = exclude if exclude is not None and exclude.numel() else None
        u, v, eid = self.draws(local, fanout, options, skip)
        return local, u, v, self.local_eid.index_select(0, eid)

    def _grouped(self, gids: torch.Tensor, fanout: int, exclude: torch.Tensor | None = None,
                 options: SampleOptions = UNIFORM
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per owned node in ``gids`` (unique), its number of sampled in-edges, and their
        sources' global ids and edge ids grouped by node in ``gids`` order."""
        local, u, v, eid = self._sample_local(gids, fanout, exclude, options)
        self._slot[local] = torch.arange(local.numel())
        pos = self._slot.index_select(0, v)
        if pos.numel() > 1 and not bool((pos[1:] >= pos[:-1]).all()):
            order = torch.argsort(pos, stable=True)  # DGL gives them grouped already
            pos, u, eid = (t.index_select(0, order) for t in (pos, u, eid))
        counts = torch.bincount(pos, minlength=gids.numel())
        return counts, self.local_gid.index_select(0, u), eid

    def _padded(self, gids: torch.Tensor, fanout: int, exclude: torch.Tensor | None = None,
                options: SampleOptions = UNIFORM) -> torch.Tensor:
        """The sampled in-edges of each owned node in ``gids``: one row per node of
        ``fanout`` sources, then their ``fanout`` edge ids, -1 where it has fewer."""
        counts, src, eid = self._grouped(gids, fanout, exclude, options)
        out = torch.full((gids.numel(), 2 * fanout), -1, dtype=self.id_dtype)
        starts = torch.cumsum(counts, 0) - counts
        rows = torch.repeat_interleave(torch.arange(gids.numel()), counts)
        cols = torch.arange(src.numel()) - starts.index_select(0, rows)
        out[rows, cols] = src.to(self.id_dtype)
        out[rows, cols + fanout] = eid.to(self.id_dtype)
        return out
