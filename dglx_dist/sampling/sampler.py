"""Distributed neighbor sampling over a partitioned graph, producing DGL blocks.

Every member of the communicator the sampler is given holds one part: its core nodes with
*all* their in-edges (HALO sources included), so sampling the in-neighbors of its own nodes is
local. (distdgl: a part per server, members = ``cross``, the ranks with this rank's local index
on every server; p3: a part per rank, members = ``world``.) Frontier nodes owned by other
members are sampled by their owners: per layer, the frontier is split by owner and exchanged;
each owner samples and answers with the sources (see :meth:`PartitionSampler.sample_layer`).
Own frontier nodes are sampled while the requests travel. Sampling is therefore
*collective*: every member calls :meth:`PartitionSampler.draw_blocks` the same number of
times (with the same number of layers); members with nothing to sample pass empty seeds.

Every sampled edge comes with its edge id in the user's graph (the part's ``edata["_ID"]``,
its row in the dataset's edges), which the block (:class:`~dglx_dist.sampling.block.Block`)
carries, and DGL's block it becomes as ``edata[dgl.EID]``. A layer draws uniformly without
replacement unless the :class:`~dglx_dist.sampling.options.SampleOptions` given to ``draw_blocks`` say otherwise
(DGL's ``prob`` / ``mask`` / ``replace``): the owner of a node draws its in-edges, with its own
rows of the weights.

Link prediction's loaders exclude edges from the sampled neighbourhoods (DGL's ``exclude``:
a batch's positive edges and their reverses): ``draw_blocks(seeds, fanouts, exclude)``
takes partitioned edge ids; each goes once, with the requests of the step, to the member
that stores the edge, which leaves it out of every layer it samples for this requester (on
a typed partitioning too: an edge is excluded by its id in the part, whatever its type).

The draws themselves are the package's own, in torch
(:func:`~dglx_dist.sampling.in_edges.draw_in_edges`; LABOR's,
:mod:`~dglx_dist.sampling.labor`), over the part's in-edges grouped by destination and edge
type: a graph without types is the one-type case.
"""
from __future__ import annotations

import abc
from typing import Callable, Sequence

import numpy as np
import torch

from dglx_dist.errors import InvalidValueError
from dglx_dist.partition.book import NodeBook, RangeBook
from dglx_dist.partition.layout import Partition
from dglx_dist.runtime.comm import Comm
from dglx_dist.sampling.block import Block
from dglx_dist.sampling.blocks import id_dtype
from dglx_dist.sampling.draws import Draws
from dglx_dist.sampling.in_edges import InEdges
from dglx_dist.sampling.options import UNIFORM, EdgeWeights, SampleOptions

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
        ids given to draw_blocks), drawn as ``options`` say."""

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

    def draw_blocks(self, seeds: torch.Tensor, fanouts: Sequence[int],
                    exclude: torch.Tensor | None = None,
                    options: SampleOptions = UNIFORM) -> list[Block]:
        """The package's blocks for a GNN with ``len(fanouts)`` layers; ``fanouts[i]`` is
        layer i's fanout (input layer first, as in DGL's NeighborSampler); -1 takes every
        in-neighbor. ``exclude``: partitioned edge ids no layer may sample (DGL's
        ``exclude_eids``); ``options``: how each layer draws (each layer its own seed)."""
        blocks: list[Block] = []
        frontier = seeds
        routed = self.exclusions(exclude) if exclude is not None else None
        for layer, fanout in enumerate(reversed(fanouts)):
            src, dst, eid = self.sample_layer(frontier, fanout, routed, options.stream(layer))
            blocks.insert(0, Block.untyped(frontier, src, dst, eid, self.num_nodes))
            frontier = blocks[0].src_nodes
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
        self.local_gid = torch.from_numpy(part.local_gid).long()
        self.local_eid = torch.from_numpy(part.eid).long()  # each edge's id in the user's graph
        self.num_core = part.num_core
        self.num_nodes = book.num_nodes
        # node ids, edge ids and counts travel in one dtype, the same on every member
        self.id_dtype = id_dtype(max(book.num_nodes, edge_book.num_nodes))
        # a typed partitioning: each edge's type, read off its id against the type offsets
        self.etype_offsets, kinds, types = None, None, 1
        if etype_offsets is not None:
            self.etype_offsets = torch.tensor([int(o) for o in etype_offsets])
            kinds = torch.searchsorted(self.etype_offsets, self.local_eid, right=True) - 1
            types = self.etype_offsets.numel() - 1
        self.edges = InEdges.of(torch.from_numpy(part.src), torch.from_numpy(part.dst),
                                self.local_gid.numel(), kinds, types)
        orig = torch.from_numpy(np.concatenate([part.core_orig, part.halo_orig])).long()
        self.draws = Draws(self.edges, edge_weights, orig, has_edge_data)

    def exclusions(self, exclude: torch.Tensor) -> list[torch.Tensor]:
        """Per member, the local ids of this part's edges that member excludes (collective:
        each excluded edge is sent to the member that stores it)."""
        exclude = torch.as_tensor(exclude, dtype=torch.int64)
        owner = torch.as_tensor(self.edge_book.owner(exclude))
        local = torch.as_tensor(self.edge_book.to_local(exclude))
        return [x.long() for x in
                self.comm.all_to_all_v([local[owner == s] for s in range(self.comm.size)])]

    def agree(self, values: torch.Tensor) -> torch.Tensor:
        return self.comm.broadcast(values.clone(), src=0)

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
            u = u[known]
            row, dst, eid = self.edges.out_edges(u)
            answers.append(torch.cat([self.local_gid.index_select(0, u.index_select(0, row)),
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
            out[known] = self.edges.has(u[known], torch.as_tensor(self.book.to_local(dst[known])))
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
            counts, src, eid = self._grouped(mine, fanout, skip[self.member],
                                             options.stream(self.member))
        finally:
            received = pending.wait()
        srcs, dsts, eids = [src], [torch.repeat_interleave(mine, counts)], [eid]
        if fanout < 0 or options.labor is not None:  # LABOR: fanout edges in expectation
            answers = [torch.cat(self._grouped(r.long(), fanout, x, options.stream(s)))
                       .to(self.id_dtype) for s, (r, x) in enumerate(zip(received, skip))]
            for asked, got in zip(requests, self.comm.all_to_all_v(answers)):
                n = asked.numel()
                counts = got[:n].long()
                src, eid = got[n:].long().view(2, -1)
                srcs.append(src)
                eids.append(eid)
                dsts.append(torch.repeat_interleave(asked.long(), counts))
        else:
            answers = [self._padded(r.long(), fanout, x, options.stream(s))
                       for s, (r, x) in enumerate(zip(received, skip))]
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
        return (nodes[owner == self.member].long(), requests,
                exclude or [None] * self.comm.size, self.comm.start_all_to_all_v(requests))

    def sample_typed_layer(self, nodes: torch.Tensor, fanouts: Sequence[int],
                           exclude: list[torch.Tensor] | None = None,
                           options: SampleOptions = UNIFORM) -> tuple[torch.Tensor, ...]:
        """:meth:`sample_layer` on a typed partitioning: ``fanouts[e]`` in-edges of edge type
        ``e`` per node (-1: all; 0: none) but those ``exclude`` names (what
        :meth:`exclusions` gave), as ``(src, dst, etype, eid)``: each sampled edge's
        type and its homogeneous edge id, drawn as ``options`` say (``prob`` on the edge
        types that have it). A request is the node ids; the answer, per requested node in
        request order, its number of sampled edges, then their sources, then their edge
        types, then their edge ids."""
        if self.etype_offsets is None:
            raise InvalidValueError("typed sampling needs a typed partitioning's edge types "
                                    "(PartitionSampler(..., etype_offsets=...))")
        mine, requests, skip, pending = self._requests(nodes, exclude)
        try:
            got = [(mine, *self._grouped(mine, fanouts, skip[self.member],
                                         options.stream(self.member), True))]
        finally:
            received = pending.wait()
        answers = [torch.cat(self._grouped(r.long(), fanouts, x, options.stream(s), True))
                   .to(self.id_dtype) for s, (r, x) in enumerate(zip(received, skip))]
        for asked, answer in zip(requests, self.comm.all_to_all_v(answers)):
            n = asked.numel()
            counts = answer[:n].long()
            got.append((asked.long(), counts, *answer[n:].long().view(3, -1)))
        dst = torch.cat([torch.repeat_interleave(g[0], g[1]) for g in got])
        return (torch.cat([g[2] for g in got]), dst, *(torch.cat([g[i] for g in got])
                                                      for i in (3, 4)))

    def _grouped(self, gids: torch.Tensor, fanouts, exclude: torch.Tensor | None = None,
                 options: SampleOptions = UNIFORM, typed: bool = False
                 ) -> tuple[torch.Tensor, ...]:
        """Per owned node in ``gids`` (unique), its number of sampled in-edges (but the
        part's edges ``exclude``), and their sources' global ids (with ``typed``, their edge
        types) and their edge ids in the user's graph, grouped by node in ``gids`` order."""
        local = torch.as_tensor(self.book.to_local(gids)).long()
        row, pos = self.draws(local, fanouts, options, exclude)
        counts = torch.bincount(row, minlength=gids.numel())
        src = self.local_gid.index_select(0, self.edges.src.index_select(0, pos))
        eid = self.local_eid.index_select(0, self.edges.eid.index_select(0, pos))
        if not typed:
            return counts, src, eid
        return counts, src, self.edges.etype.index_select(0, pos), eid

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
