"""Distributed neighbor sampling over a partitioned graph, producing DGL blocks.

Each server holds one part: its core nodes with *all* their in-edges (HALO sources included),
so sampling the in-neighbors of a node owned by this server is local. Frontier nodes owned by
other servers are sampled by their owners: per layer, the frontier is split by owning server
and exchanged over the ``cross`` communicator (the ranks with this rank's local index on every
server); each owner samples and sends back the edges. Sampling is therefore *collective*: every
rank calls :meth:`PartitionSampler.sample_blocks` the same number of times (with the same
number of layers), ranks with nothing to sample pass empty seeds.
"""
from __future__ import annotations

from typing import Sequence

import dgl
import torch

from dglx_dist.partition.book import NodeBook
from dglx_dist.partition.layout import Partition
from dglx_dist.runtime.comm import Comm
from dglx_dist.sampling.blocks import make_block

__all__ = ["PartitionSampler"]


class PartitionSampler:
    """Samples blocks for seed nodes given in the partitioned graph's global ids.

    Args:
        part: this server's loaded partition.
        book: the node book (one part per server: part ``p`` is on server ``p``).
        cross: communicator over the servers (one member per server, in server order).
        server: this rank's server.
    """

    def __init__(self, part: Partition, book: NodeBook, cross: Comm, server: int):
        if book.num_parts != cross.size:
            raise ValueError(f"sampling needs one part per server: the partition has "
                             f"{book.num_parts} parts for {cross.size} servers")
        self.book, self.cross, self.server = book, cross, server
        self.graph = part.local_graph()
        self.local_gid = self.graph.ndata["_ID"]

    def sample_blocks(self, seeds: torch.Tensor, fanouts: Sequence[int]) -> list[dgl.DGLGraph]:
        """Blocks for a GNN with ``len(fanouts)`` layers; ``fanouts[i]`` is layer i's fanout
        (input layer first, as in DGL's NeighborSampler); -1 takes every in-neighbor."""
        blocks: list[dgl.DGLGraph] = []
        frontier = seeds
        for fanout in reversed(fanouts):
            src, dst = self.sample_layer(frontier, fanout)
            block = make_block(frontier, src, dst, self.book.num_nodes)
            blocks.insert(0, block)
            frontier = block.srcdata[dgl.NID]
        return blocks

    def sample_layer(self, nodes: torch.Tensor, fanout: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Sampled in-edges ``(src, dst)`` of ``nodes`` (global ids), wherever they are owned."""
        owner = torch.as_tensor(self.book.owner(nodes))
        requests = [nodes[owner == s] if s != self.server else nodes[:0]
                    for s in range(self.cross.size)]
        received = self.cross.all_to_all_v(requests)
        answers = [self._sample_owned(r, fanout) for r in received]
        returned = self.cross.all_to_all_v(answers)
        edges = torch.cat([*returned, self._sample_owned(nodes[owner == self.server], fanout)])
        return edges[:, 0].contiguous(), edges[:, 1].contiguous()

    def _sample_owned(self, gids: torch.Tensor, fanout: int) -> torch.Tensor:
        """(k, 2) int64 ``[src, dst]`` global ids of sampled in-edges of owned nodes."""
        if gids.numel() == 0:
            return torch.zeros((0, 2), dtype=torch.int64)
        local = torch.as_tensor(self.book.to_local(gids))
        sub = dgl.sampling.sample_neighbors(self.graph, local, fanout, edge_dir="in")
        u, v = sub.edges()
        return torch.stack([self.local_gid.index_select(0, u),
                            self.local_gid.index_select(0, v)], dim=1)
