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
"""
from __future__ import annotations

import abc

from typing import Sequence

import dgl
import torch

from dglx_dist.errors import InvalidValueError
from dglx_dist.partition.book import NodeBook
from dglx_dist.partition.layout import Partition
from dglx_dist.runtime.comm import Comm
from dglx_dist.sampling.blocks import id_dtype, make_block

__all__ = ["BlockSampler", "PartitionSampler", "LocalSampler", "whole_graph"]

EMPTY = torch.zeros(0, dtype=torch.int64)


class BlockSampler(abc.ABC):
    """Builds a GNN's blocks layer by layer from a ``sample_layer`` (subclasses provide it)."""

    num_nodes: int

    @abc.abstractmethod
    def sample_layer(self, nodes: torch.Tensor, fanout: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Sampled in-edges ``(src, dst)`` of ``nodes`` (global ids)."""

    def sample_blocks(self, seeds: torch.Tensor, fanouts: Sequence[int]) -> list[dgl.DGLGraph]:
        """Blocks for a GNN with ``len(fanouts)`` layers; ``fanouts[i]`` is layer i's fanout
        (input layer first, as in DGL's NeighborSampler); -1 takes every in-neighbor."""
        blocks: list[dgl.DGLGraph] = []
        frontier = seeds
        for fanout in reversed(fanouts):
            src, dst = self.sample_layer(frontier, fanout)
            block = make_block(frontier, src, dst, self.num_nodes)
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
    """

    def __init__(self, part: Partition, book: NodeBook, comm: Comm, member: int):
        if book.num_parts != comm.size:
            raise InvalidValueError(f"sampling needs one part per member of {comm.name}: the "
                                    f"partition has {book.num_parts} parts for {comm.size} members")
        self.book, self.comm, self.member = book, comm, member
        self.graph = part.local_graph()
        self.local_gid = self.graph.ndata["_ID"]
        self.id_dtype, self.num_nodes = id_dtype(book.num_nodes), book.num_nodes
        self._slot = torch.empty(self.graph.num_nodes(), dtype=torch.int64)  # local id -> row

    def sample_layer(self, nodes: torch.Tensor, fanout: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Sampled in-edges ``(src, dst)`` of ``nodes`` (global ids), wherever they are owned.

        A request is the node ids (``id_dtype``); own nodes are sampled while it travels. With
        a fanout, the answer is one row of ``fanout`` sources per requested node, padded with
        -1, so its size is known and the answer round needs no round of counts; with the full
        neighbourhood (-1) it is, per requested node in request order, its number of in-edges,
        then all their sources. The requester knows the destinations already.
        """
        owner = torch.as_tensor(self.book.owner(nodes))
        mine = nodes[owner == self.member]
        requests = [nodes[owner == s].to(self.id_dtype) if s != self.member else
                    torch.zeros(0, dtype=self.id_dtype) for s in range(self.comm.size)]
        pending = self.comm.start_all_to_all_v(requests)
        try:
            _, u, v = self._sample_local(mine, fanout)
        finally:
            received = pending.wait()
        srcs = [self.local_gid.index_select(0, u)]
        dsts = [self.local_gid.index_select(0, v)]
        if fanout < 0:
            answers = [torch.cat(self._grouped(r.long(), fanout)).to(self.id_dtype)
                       for r in received]
            for asked, got in zip(requests, self.comm.all_to_all_v(answers)):
                counts, src = got[:asked.numel()].long(), got[asked.numel():].long()
                srcs.append(src)
                dsts.append(torch.repeat_interleave(asked.long(), counts))
        else:
            answers = [self._padded(r.long(), fanout) for r in received]
            returned = self.comm.all_to_all_v(answers, recv_rows=[r.numel() for r in requests])
            for asked, got in zip(requests, returned):
                kept = got >= 0
                srcs.append(got[kept].long())
                dsts.append(torch.repeat_interleave(asked.long(), kept.sum(1)))
        return torch.cat(srcs), torch.cat(dsts)

    def _sample_local(self, gids: torch.Tensor, fanout: int):
        """Sampled in-edges ``(u, v)`` (local ids) of the owned nodes ``gids``, and their local
        ids."""
        local = torch.as_tensor(self.book.to_local(gids))
        if local.numel() == 0:
            return local, EMPTY, EMPTY
        u, v = dgl.sampling.sample_neighbors(self.graph, local, fanout, edge_dir="in").edges()
        return local, u, v

    def _grouped(self, gids: torch.Tensor, fanout: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Per owned node in ``gids`` (unique), its number of sampled in-edges, and their
        sources' global ids grouped by node in ``gids`` order."""
        local, u, v = self._sample_local(gids, fanout)
        self._slot[local] = torch.arange(local.numel())
        pos = self._slot.index_select(0, v)
        if pos.numel() > 1 and not bool((pos[1:] >= pos[:-1]).all()):
            order = torch.argsort(pos, stable=True)  # DGL gives them grouped already
            pos, u = pos.index_select(0, order), u.index_select(0, order)
        counts = torch.bincount(pos, minlength=gids.numel())
        return counts, self.local_gid.index_select(0, u)

    def _padded(self, gids: torch.Tensor, fanout: int) -> torch.Tensor:
        """The sampled sources of each owned node in ``gids``: one row of ``fanout`` per node,
        -1 where it has fewer in-edges."""
        counts, src = self._grouped(gids, fanout)
        out = torch.full((gids.numel(), fanout), -1, dtype=self.id_dtype)
        starts = torch.cumsum(counts, 0) - counts
        rows = torch.repeat_interleave(torch.arange(gids.numel()), counts)
        cols = torch.arange(src.numel()) - starts.index_select(0, rows)
        out[rows, cols] = src.to(self.id_dtype)
        return out


def whole_graph(parts: Sequence[Partition], num_nodes: int) -> dgl.DGLGraph:
    """The whole structure in global ids from every part (each edge is stored once, with its
    destination's owner)."""
    src, dst = [], []
    for part in parts:
        gid = torch.from_numpy(part.local_gid)
        src.append(gid.index_select(0, torch.from_numpy(part.src)))
        dst.append(gid.index_select(0, torch.from_numpy(part.dst)))
    return dgl.graph((torch.cat(src), torch.cat(dst)), num_nodes=num_nodes)


class LocalSampler(BlockSampler):
    """Samples blocks from a whole graph held locally (a replicated structure): no exchange,
    so unlike :class:`PartitionSampler` it is not collective.

    Args:
        graph: the whole graph, in the partitioned graph's global ids.
    """

    def __init__(self, graph: dgl.DGLGraph):
        self.graph, self.num_nodes = graph, graph.num_nodes()

    def sample_layer(self, nodes: torch.Tensor, fanout: int) -> tuple[torch.Tensor, torch.Tensor]:
        return dgl.sampling.sample_neighbors(self.graph, nodes, fanout, edge_dir="in").edges()
