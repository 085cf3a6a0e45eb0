"""Sampling from a whole graph held locally (P3's structure cache): no exchange."""
from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
import torch

from dglx_dist.partition.layout import Partition
from dglx_dist.sampling.draws import Draws
from dglx_dist.sampling.in_edges import InEdges
from dglx_dist.sampling.options import UNIFORM, EdgeWeights, SampleOptions
from dglx_dist.sampling.sampler import BlockSampler
from dglx_dist.graphcore.ids import TypeIds

__all__ = ["LocalSampler", "WholeGraph", "whole_graph", "whole_edge_weights"]


class WholeGraph(NamedTuple):
    """A whole structure in global ids: edge ``i`` is ``src[i] -> dst[i]``, ``eid[i]`` its
    id in the user's graph."""

    src: torch.Tensor
    dst: torch.Tensor
    eid: torch.Tensor
    num_nodes: int


def whole_graph(parts: Sequence[Partition], num_nodes: int) -> WholeGraph:
    """The whole structure in global ids from every part (each edge is stored once, with its
    destination's owner), edges in partitioned edge id order (part by part)."""
    src, dst, eid = [], [], []
    for part in parts:
        gid = torch.from_numpy(part.local_gid)
        src.append(gid.index_select(0, torch.from_numpy(part.src)))
        dst.append(gid.index_select(0, torch.from_numpy(part.dst)))
        eid.append(torch.from_numpy(part.eid))
    return WholeGraph(torch.cat(src).long(), torch.cat(dst).long(), torch.cat(eid).long(),
                      num_nodes)


def whole_edge_weights(pdir) -> EdgeWeights:
    """Every part's edge data by name, in :func:`whole_graph`'s edge order, read from
    ``pdir``'s files on first use (later writes through ``g.edata`` are not seen)."""
    read: dict[str, torch.Tensor] = {}

    def weights(name: str) -> torch.Tensor:
        if name not in read:
            read[name] = torch.from_numpy(np.concatenate(
                [pdir.load_edge_data(p)[name] for p in range(pdir.num_parts)]))
        return read[name]

    return weights


class LocalSampler(BlockSampler):
    """Samples blocks from a whole graph held locally (a replicated structure): no exchange,
    so unlike :class:`~dglx_dist.sampling.PartitionSampler` it is not collective.

    Args:
        graph: the whole graph, in the partitioned graph's global ids, its edges in partitioned
            edge id order (:func:`whole_graph`).
        edge_weights: the whole graph's edge data by name, in its edge order, for weighted
            draws (None: none).
    """

    _device_tensors = ("user_eid",)

    def __init__(self, graph: WholeGraph, edge_weights: EdgeWeights | None = None):
        self.num_nodes = graph.num_nodes
        self.ids = TypeIds.one(graph.num_nodes)  # a replicated structure has no types
        self.edges = InEdges.of(graph.src, graph.dst, graph.num_nodes)
        # each in-edge's id in the user's graph by its position in ``edges`` (a drawn edge's
        # is one gather, not two; the graph's own arrays are not kept)
        self.user_eid = graph.eid.long().index_select(0, self.edges.eid)
        self.draws = Draws(self.edges, edge_weights)  # P3's hash partitions keep the user's ids

    def sample_rows(self, nodes: torch.Tensor, fanout: int,
                    exclude: torch.Tensor | None = None, options: SampleOptions = UNIFORM
                    ) -> tuple[torch.Tensor, ...]:
        row, pos = self.draws(nodes.long(), fanout, options, exclude)
        return self.edges.src.index_select(0, pos), row, self.user_eid.index_select(0, pos)

    def out_edges(self, nodes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every edge out of ``nodes`` as ``(src, dst, eid)`` (global ids; the user's edge
        ids)."""
        nodes = nodes.long()
        row, dst, eid = self.edges.out_edges(nodes)
        return nodes.index_select(0, row), dst, \
            self.user_eid.index_select(0, self.edges.positions(eid))

    def has_edges(self, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """Whether each edge ``src[i] -> dst[i]`` (global ids) is in the graph."""
        return self.edges.has(src, dst)
