"""Distributed neighbor sampling over a partitioned graph, producing DGL blocks.

Every member of the communicator the sampler is given holds one part: its core nodes with
*all* their in-edges (HALO sources included), so sampling the in-neighbors of its own nodes is
local. (distdgl: a part per server, members = ``cross``, the ranks with this rank's local index
on every server; p3: a part per rank, members = ``world``.) Frontier nodes owned by other
members are sampled by their owners: per layer, the frontier is split by owner and exchanged;
each owner samples and answers with the sources (see :meth:`PartitionSampler.sample_rows`).
Own frontier nodes are sampled while the requests travel. Sampling is therefore
*collective*: every member calls :meth:`PartitionSampler.draw_blocks` the same number of
times (with the same number of layers); members with nothing to sample pass empty seeds.
On a typed partitioning, the owners draw each edge type's in-edges with that type's fanout
and the blocks speak per-type ids (:class:`~dglx_dist.graphcore.ids.TypeIds`), as DistDGL
samples heterographs: a graph without types is the one-type case, in partitioned ids.

Every sampled edge comes with its edge id in the user's graph (the part's ``edata["_ID"]``,
its row in the dataset's edges), which the block (:class:`~dglx_dist.graphcore.block.Block`)
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
import copy
import functools
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

from dglx_dist.errors import InvalidValueError, NotSupportedError
from dglx_dist.partition.book import NodeBook, RangeBook
from dglx_dist.partition.layout import Partition
from dglx_dist.runtime.comm import Comm
from dglx_dist.graphcore.block import Block, IdTable
from dglx_dist.sampling.blocks import id_dtype
from dglx_dist.sampling.draws import Draws
from dglx_dist.sampling.choose import segment_slots
from dglx_dist.sampling.in_edges import InEdges
from dglx_dist.sampling.options import UNIFORM, EdgeWeights, SampleOptions, PartEdgeWeights
from dglx_dist.graphcore.ids import TypeIds

__all__ = ["BlockSampler", "PartitionSampler"]

EMPTY = torch.zeros(0, dtype=torch.int64)


class BlockSampler(abc.ABC):
    """Builds a GNN's blocks layer by layer from a ``sample_rows`` (subclasses provide it,
    and ``ids``: the :class:`~dglx_dist.graphcore.ids.TypeIds` the blocks speak)."""

    num_nodes: int
    ids: TypeIds
    device = torch.device("cpu")
    """Where it draws: its structure, its draws, the blocks' numbering and the blocks."""
    _device_tensors: tuple[str, ...] | None = None
    """Its tensors a copy on a device holds there besides its structure (``edges``,
    ``draws``, ``ids``); None: it draws on the host only."""

    @abc.abstractmethod
    def sample_rows(self, nodes: torch.Tensor, fanouts: int | Sequence[int], exclude=None,
                    options: SampleOptions = UNIFORM) -> tuple[torch.Tensor, ...]:
        """Sampled in-edges ``(src, row, eid)`` of ``nodes`` (global ids), each edge's
        destination as its index in ``nodes`` (``dst = nodes[row]``: the draw knows it;
        ``eid``: the user's homogeneous edge ids, which say the edges' types),
        ``fanouts`` per node (one number, or one per edge type),
        leaving out the edges ``exclude`` (what :meth:`exclusions` made of the ids given to
        draw_blocks), drawn as ``options`` say."""

    def sample_layer(self, nodes: torch.Tensor, fanouts: int | Sequence[int], exclude=None,
                     options: SampleOptions = UNIFORM) -> tuple[torch.Tensor, ...]:
        """:meth:`sample_rows`' draw with each edge's destination as its id and its type:
        ``(src, dst, eid, etype)``."""
        src, row, eid = self.sample_rows(nodes, fanouts, exclude, options)
        return src, nodes.long().index_select(0, row), eid, self.ids.etype_of(eid)

    @abc.abstractmethod
    def out_edges(self, nodes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every edge out of ``nodes`` (global ids) as ``(src, dst, eid)``."""

    def exclusions(self, exclude: torch.Tensor):
        """What :meth:`sample_rows` gets for the partitioned edge ids ``exclude``."""
        return exclude

    def agree(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` (a random seed) the same on every member that draws for this one:
        the first member's (collective where members draw for each other)."""
        return values

    def on(self, twin: Callable[[Comm], Comm]) -> "BlockSampler":
        """This sampler with its exchanges on ``twin(comm)`` for each communicator ``comm``
        it exchanges on (a group of its own with the same members; collective): what a
        loader's worker thread draws with. It shares everything else, which drawing only
        reads (each draw seeds its own generator; :class:`IdTable` gives calls at once tables
        of their own). One that exchanges nothing is itself."""
        return self

    def to(self, device) -> "BlockSampler":
        """This sampler drawing on ``device`` (a loader's ``use_uva=True``: the steps'
        GPU): a copy with its structure there, whose draws and blocks' numbering run there
        and whose blocks are there; its exchanges carry device tensors as its communicators
        do (:class:`~dglx_dist.runtime.comm.Comm`). On the device it draws on already, the
        copy shares its tensors."""
        if self._device_tensors is None:
            raise NotSupportedError(f"{type(self).__name__} draws on the host only; expected "
                                    "use_uva=False")
        device = torch.device(device)
        moved = {name: getattr(self, name) for name in self._device_tensors}
        need = sum(t.numel() * t.element_size() for t in [*moved.values(),
                                                          *self.edges.tensors()])
        if device.type == "cuda" and need > torch.cuda.mem_get_info(device)[0]:
            raise InvalidValueError(f"use_uva=True: the sampler's structure needs {need:,} "
                                    f"bytes on {device}, more than it has free; expected "
                                    "use_uva=False")
        other = copy.copy(self)
        for name, tensor in moved.items():
            setattr(other, name, tensor.to(device))
        other.edges, other.ids, other.device = self.edges.to(device), self.ids.to(device), device
        other.draws = self.draws.to(other.edges)
        return other

    def draw_blocks(self, seeds: torch.Tensor, fanouts: Sequence,
                    exclude: torch.Tensor | None = None,
                    options: SampleOptions = UNIFORM) -> list[Block]:
        """The package's blocks for a GNN with ``len(fanouts)`` layers whose last
        destinations are the nodes of partitioned ids ``seeds``; ``fanouts[i]`` is layer i's
        fanout, one number or one per edge type (input layer first, as in DGL's
        NeighborSampler); -1 takes every in-neighbor. Their node ids are :attr:`ids`'
        per-type ids (without types, the partitioned ids). ``exclude``: partitioned edge ids
        no layer may sample (DGL's ``exclude_eids``); ``options``: how each layer draws (each
        layer its own seed)."""
        routed = self.exclusions(exclude) if exclude is not None else None
        frontier, blocks = self.ids.split(seeds.to(self.device)), []
        for layer, fanout in enumerate(reversed(fanouts)):
            nodes = self.ids.join(frontier)
            src, row, eid = self.sample_rows(nodes, fanout, routed, options.stream(layer))
            blocks.insert(0, self.ids.block(frontier, nodes, src, row, eid, self._id_table))
            frontier = [blocks[0].nodes_of(t) for t in range(len(self.ids.ntypes))]
        return blocks

    window = 1
    """Requests :meth:`draw_each` reads up to the one it yields (it draws each when asked)."""

    def draw_each(self, requests: Iterable[tuple[Any, tuple]]
                  ) -> Iterator[tuple[Any, list[Block]]]:
        """Each request ``(key, args)`` as ``(key, draw_blocks(*args))``, in order, drawn
        as the result is asked for (a loader's sampler processes draw them ahead:
        :class:`~dglx_dist.api.workers.SamplerProcs`)."""
        for key, args in requests:
            yield key, self.draw_blocks(*args)

    @functools.cached_property
    def _id_table(self) -> IdTable:
        """The table the blocks' numbering reuses (:class:`~dglx_dist.graphcore.block.IdTable`
        over :attr:`num_nodes`; made on first use)."""
        return IdTable(self.num_nodes)


class PartitionSampler(BlockSampler):
    """Samples blocks for seed nodes given in the partitioned graph's global ids.

    Args:
        part: this member's loaded partition.
        book: the node book (one part per member: part ``p`` is held by member ``p``).
        comm: the members, in part order.
        member: this rank's index in ``comm`` (the part it holds).
        edge_book: where each partitioned edge id is stored (``PartitionDir.edge_book()``).
        ids: the partitioning's node and edge types (None: one of each, a graph without
            types); the blocks' ids are their per-type ids.
        edge_weights: the part's edge data by name, for weighted draws
            (:class:`~dglx_dist.sampling.options.PartEdgeWeights`; None: none).
        has_edge_data: on a typed partitioning, whether edge type ``e`` has edge data
            ``name`` (``has_edge_data(e, name)``; a type without a ``prob`` draws uniformly,
            as in DGL).
    """

    _device_tensors = ("local_gid", "user_eid")

    def __init__(self, part: Partition, book: NodeBook, comm: Comm, member: int,
                 edge_book: RangeBook, ids: TypeIds | None = None,
                 edge_weights: EdgeWeights | None = None,
                 has_edge_data: Callable[[int, str], bool] | None = None):
        if book.num_parts != comm.size:
            raise InvalidValueError(f"sampling needs one part per member of {comm.name}: the "
                                    f"partition has {book.num_parts} parts for {comm.size} members")
        self.book, self.comm, self.member, self.edge_book = book, comm, member, edge_book
        self.local_gid = torch.from_numpy(part.local_gid).long()
        local_eid = torch.from_numpy(part.eid).long()  # each edge's id in the user's graph
        self.num_core = part.num_core
        self.num_nodes = book.num_nodes
        # node ids, edge ids and counts travel in one dtype, the same on every member
        self.id_dtype = id_dtype(max(book.num_nodes, edge_book.num_nodes))
        self.ids = TypeIds.one(book.num_nodes) if ids is None else ids
        # edge types: each edge's, read off its id against the type offsets
        kinds, types = None, len(self.ids.etypes)
        if types > 1:
            kinds = self.ids.etype_of(local_eid)
        self.edges = InEdges.of(torch.from_numpy(part.src), torch.from_numpy(part.dst),
                                self.local_gid.numel(), kinds, types)
        # each in-edge's id in the user's graph by its position in ``edges`` (a drawn edge's
        # is one gather, not two)
        self.user_eid = local_eid.index_select(0, self.edges.eid)
        orig = torch.from_numpy(np.concatenate([part.core_orig, part.halo_orig])).long()
        self.draws = Draws(self.edges, edge_weights, orig, has_edge_data)

    @classmethod
    def of(cls, pdir, part: Partition, comm: Comm, store=None) -> "PartitionSampler":
        """The sampler of ``pdir``'s part ``part`` (member ``part.part`` of ``comm``), in its
        types' ids, its draws weighed by the part's edge data (``store``'s rows where it
        holds them, else the files': :class:`~dglx_dist.sampling.options.PartEdgeWeights`)."""
        types = pdir.types
        return cls(part, pdir.book, comm, part.part, pdir.edge_book(), TypeIds.of(pdir),
                   PartEdgeWeights(pdir, part.part, store),
                   None if types is None else types.has_edge_data)

    def on(self, twin: Callable[[Comm], Comm]) -> "PartitionSampler":
        other = copy.copy(self)
        other.comm = twin(self.comm)
        return other

    def _book(self, lookup, gids: torch.Tensor) -> torch.Tensor:
        """The node book's ``lookup`` (``owner``, ``to_local``) of ``gids``, on their device
        (the book answers on the host)."""
        return torch.as_tensor(lookup(gids)).to(gids.device)

    def exclusions(self, exclude: torch.Tensor) -> list[torch.Tensor]:
        """Per member, the local ids of this part's edges that member excludes (collective:
        each excluded edge is sent to the member that stores it)."""
        exclude = torch.as_tensor(exclude, dtype=torch.int64).to(self.device)
        owner = self._book(self.edge_book.owner, exclude)
        local = self._book(self.edge_book.to_local, exclude)
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
                                      self.user_eid.index_select(
                                          0, self.edges.positions(eid))]).to(self.id_dtype))
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

    def sample_rows(self, nodes: torch.Tensor, fanouts: int | Sequence[int],
                    exclude: list[torch.Tensor] | None = None,
                    options: SampleOptions = UNIFORM) -> tuple[torch.Tensor, ...]:
        """Sampled in-edges ``(src, row, eid)`` of ``nodes`` (global ids; see
        :meth:`BlockSampler.sample_rows`), wherever they are owned, drawn as ``options`` say
        by the owner: ``fanouts`` in-edges per node (one number, or ``fanouts[e]`` of edge
        type ``e``; -1: all; 0: none), but those ``exclude`` names (what :meth:`exclusions`
        gave).

        A request is the node ids (``id_dtype``); own nodes are sampled while it travels. An
        answer's columns are the drawn edges' sources and edge ids (which say their types).
        With one fanout of one edge type (:meth:`_width`), it is one row per requested node:
        ``fanout`` of each column, padded with -1, so its size is known and the answer round
        needs no round of counts; else (the full neighbourhood, per-type fanouts, LABOR's
        ``fanout`` edges in expectation) it is, per requested node in request order, its
        number of drawn in-edges, then each column of them all. The requester knows the
        destinations already.
        """
        width = self._width(fanouts, options)
        at, mine, requests, skip, pending = self._requests(nodes, exclude)
        try:
            got = [(at[self.member], *self._drawn(mine, fanouts, skip[self.member],
                                                  options.stream(self.member)))]
        finally:
            received = pending.wait()
        answers = [self._answer(r.long(), fanouts, x, options.stream(s), width)
                   for s, (r, x) in enumerate(zip(received, skip))]
        rows = None if width is None else [r.numel() for r in requests]
        for s, (asked, answer) in enumerate(zip(requests, self.comm.all_to_all_v(
                answers, recv_rows=rows))):
            if s != self.member:  # (the own request is empty)
                got.append((at[s], *self._read(answer, asked.numel(), width)))
        return _in_row_order(got, nodes.numel())

    def _width(self, fanouts, options: SampleOptions) -> int | None:
        """The padded answer's width: the fanout where it bounds every node's drawn in-edges
        (one fanout >= 0 of one edge type, not LABOR's); else None (counts, then edges)."""
        if self.edges.num_etypes > 1 or options.labor is not None:
            return None  # per-type fanouts, or LABOR's fanout edges in expectation
        k = int(fanouts[0] if isinstance(fanouts, (tuple, list)) else fanouts)  # one type
        return k if k >= 0 else None

    def _requests(self, nodes: torch.Tensor, exclude):
        """The indices in ``nodes`` of each member's nodes, this member's own nodes, the
        others' by owner (a request each, the own one empty), the exclusions by member and
        the requests' exchange, started."""
        owner = self._book(self.book.owner, nodes)
        at = [torch.nonzero(owner == s).squeeze(1) for s in range(self.comm.size)]
        requests = [nodes.index_select(0, at[s]).to(self.id_dtype) if s != self.member else
                    nodes.new_zeros(0, dtype=self.id_dtype) for s in range(self.comm.size)]
        return (at, nodes.index_select(0, at[self.member]).long(), requests,
                exclude or [None] * self.comm.size, self.comm.start_all_to_all_v(requests))

    def _drawn(self, gids: torch.Tensor, fanouts, exclude: torch.Tensor | None = None,
               options: SampleOptions = UNIFORM) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Per owned node in ``gids`` (unique), its number of sampled in-edges (but the
        part's edges ``exclude``), and the answer's columns of them: their sources' global
        ids and their edge ids in the user's graph, grouped by node in ``gids`` order."""
        local = self._book(self.book.to_local, gids).long()
        row, pos = self.draws(local, fanouts, options, exclude)
        columns = [self.local_gid.index_select(0, self.edges.src.index_select(0, pos)),
                   self.user_eid.index_select(0, pos)]
        return torch.bincount(row, minlength=gids.numel()), columns

    def _answer(self, gids: torch.Tensor, fanouts, exclude: torch.Tensor | None,
                options: SampleOptions, width: int | None) -> torch.Tensor:
        """The answer to a request for ``gids`` (see :meth:`sample_rows`): with ``width``,
        one row per node of ``width`` of each column, -1 where it has fewer edges."""
        counts, columns = self._drawn(gids, fanouts, exclude, options)
        if width is None:
            return torch.cat([counts, *columns]).to(self.id_dtype)
        n, row_width, device = gids.numel(), len(columns) * width, gids.device
        out = torch.full((n * row_width,), -1, dtype=self.id_dtype, device=device)
        # edge i of node r, its rank j among r's, goes to r * row_width + c * width + j
        _, slot, _ = segment_slots(torch.arange(n, device=device) * row_width, counts)
        slots = slot + torch.arange(len(columns), device=device)[:, None] * width  # per column
        out.index_copy_(0, slots.reshape(-1), torch.stack(columns).to(self.id_dtype).reshape(-1))
        return out.view(n, row_width)

    def _read(self, answer: torch.Tensor, n: int, width: int | None
              ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The counts and columns of an answer to a request of ``n`` nodes."""
        columns = 2  # sources, edge ids
        if width is None:
            return answer[:n].long(), list(answer[n:].long().view(columns, -1))
        kept = answer.reshape(n, columns, width)[:, 0] >= 0
        # a kept entry i = r * width + j (node r, rank j) of column c is at
        # r * columns * width + c * width + j of the answer
        at = torch.nonzero(kept.reshape(-1)).squeeze(1)
        at = at + torch.div(at, width, rounding_mode="floor") * ((columns - 1) * width)
        flat = answer.reshape(-1)
        return kept.sum(1), [flat.index_select(0, at + c * width).long() for c in range(columns)]


def _in_row_order(got: list, n: int) -> tuple[torch.Tensor, ...]:
    """``(src, row, eid)`` of the members' answers ``got`` (each: the rows of its
    nodes, in order, their counts and their edges' columns), the edges grouped by row in
    row order, each row's edges in their drawn order: the block's destinations come in order,
    so its sums' grouping needs no sort (:func:`~dglx_dist.graphcore.block.group_by`), and the
    block is the same whichever member owns which node. A merge of the members' runs: one
    gather, no sort."""
    columns = [torch.cat(c) for c in zip(*(g[2] for g in got))]
    at, counts = torch.cat([g[0] for g in got]), torch.cat([g[1] for g in got]).long()
    if len(got) == 1:
        row = torch.repeat_interleave(at, counts)
    else:  # the run of the node in row r (where it lies among the joined edges), r by r
        where = torch.empty_like(at)
        where[at] = torch.arange(n, device=at.device)
        starts = torch.cumsum(counts, 0) - counts
        row, order, _ = segment_slots(starts.index_select(0, where), counts.index_select(0, where))
        columns = [c.index_select(0, order) for c in columns]
    return columns[0], row, columns[1]
