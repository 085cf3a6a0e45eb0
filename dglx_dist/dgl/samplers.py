"""The samplers of DGL's that a :class:`~dglx_dist.api.DataLoader` runs over the distributed
graph (a ``BlockSampler`` of the user's, ``LaborSampler``, ``ShaDowKHopSampler``,
``NeighborSampler`` of out-edges: :class:`UserSampler`, drawing through the graph's methods of
:mod:`dglx_dist.api.structure`), with DGL installed. Imported only when the loader is given
one (:func:`dglx_dist.api.samplers.user_sampler`): the package's own ``NeighborSampler`` of
in-edges needs none of this; its ``to_dgl()`` is :func:`dgl_neighbor_sampler`."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import dgl
import torch
from dgl.dataloading import BlockSampler

from dglx_dist.errors import InvalidValueError

if TYPE_CHECKING:
    from dglx_dist.api.graph import DistGraph

__all__ = ["UserSampler", "OutNeighborSampler", "dgl_neighbor_sampler"]


def dgl_neighbor_sampler(sampler) -> dgl.dataloading.NeighborSampler:
    """DGL's ``NeighborSampler`` of the arguments of ``sampler`` (the package's
    :class:`~dglx_dist.api.NeighborSampler`), to draw on a DGL graph."""
    return dgl.dataloading.NeighborSampler(
        sampler.fanouts, edge_dir=sampler.edge_dir, prob=sampler.prob, replace=sampler.replace,
        prefetch_node_feats=sampler.prefetch_node_feats,
        prefetch_labels=sampler.prefetch_labels,
        prefetch_edge_feats=sampler.prefetch_edge_feats,
        output_device=sampler.output_device, fused=sampler.fused)


class OutNeighborSampler(BlockSampler):
    """DGL's ``NeighborSampler(fanouts, edge_dir="out")`` as its documentation describes it:
    the drawn out-edges reversed into each block, ``dgl.EID`` kept (docs/porting.md says
    how this differs from DGL 2.x's own ``sample_blocks``)."""

    def __init__(self, sampler):
        super().__init__()
        self.fanouts, self.prob, self.replace = sampler.fanouts, sampler.prob, sampler.replace

    def sample_blocks(self, g, seed_nodes, exclude_eids=None):
        output_nodes, blocks = seed_nodes, []
        for fanout in reversed(self.fanouts):
            frontier = g.sample_neighbors(seed_nodes, fanout, edge_dir="out", prob=self.prob,
                                          replace=self.replace, exclude_edges=exclude_eids)
            block = dgl.to_block(dgl.reverse(frontier), seed_nodes)
            block.edata[dgl.EID] = frontier.edata[dgl.EID]
            seed_nodes = block.srcdata[dgl.NID]
            blocks.insert(0, block)
        return seed_nodes, output_nodes, blocks


@dataclasses.dataclass(frozen=True, eq=False)
class UserSampler:
    """A DGL sampler (a ``BlockSampler``, or a sampler of subgraphs such as
    ``ShaDowKHopSampler``) run over the distributed graph drawing through the strategy's
    sampler (:meth:`~dglx_dist.api.structure.EdgeStructure.drawn_by`); its blocks are checked
    to chain, its subgraph to carry its nodes' ids (docs/porting.md, "Your own sampler").

    Attributes:
        sampler: the DGL sampler.
        graph: the distributed graph.
    """

    sampler: object
    graph: "DistGraph"

    @property
    def what(self) -> str:
        return f"DataLoader: sampler {type(self.sampler).__name__}"

    def seed(self, value: int) -> None:
        """Seeds DGL's random numbers, which the sampler draws with."""
        dgl.seed(value)

    def draw(self, base, seeds: torch.Tensor,
             exclude: torch.Tensor | None = None) -> list[dgl.DGLGraph] | dgl.DGLGraph:
        """The blocks (or the subgraph) the sampler draws for partitioned ids ``seeds`` but
        the partitioned edge ids ``exclude`` (its ``exclude_eids``, in the user's ids), their
        ``dgl.NID`` in partitioned ids (collective)."""
        seeds = self.graph.node_ids(seeds)
        skip = None if exclude is None else self.graph.edata.ids(exclude)
        graph = self.graph.drawn_by(base, self.what)
        if isinstance(self.sampler, dgl.dataloading.BlockSampler):
            out, call = self.sampler.sample_blocks(graph, seeds, exclude_eids=skip), \
                "sample_blocks"
        else:
            out, call = self.sampler.sample(graph, seeds, exclude_eids=skip), "sample"
        drawn = out[2] if isinstance(out, tuple) and len(out) == 3 else None
        if isinstance(drawn, dgl.DGLGraph) and not drawn.is_block:
            self._check_subgraph(drawn, out[1], seeds)
            drawn.ndata[dgl.NID] = self.graph.part_ids(drawn.ndata[dgl.NID])
            return drawn
        if not isinstance(drawn, list):
            raise InvalidValueError(f"{self.what}.{call} returned {type(out).__name__}; "
                                    "expected (input_nodes, output_nodes, blocks), as DGL's "
                                    "BlockSampler does, or (input_nodes, output_nodes, "
                                    "subgraph), as its ShaDowKHopSampler does")
        self._check_chain(drawn, seeds)
        for block in drawn:
            for data in (block.srcdata, block.dstdata):
                data[dgl.NID] = self.graph.part_ids(data[dgl.NID])
        return drawn

    def _check_subgraph(self, sub: dgl.DGLGraph, outputs, seeds: torch.Tensor) -> None:
        if dgl.NID not in sub.ndata:
            raise InvalidValueError(f"{self.what}: its subgraph has no ndata[dgl.NID] (make it "
                                    "with g.subgraph(nodes))")
        outputs = torch.as_tensor(outputs)
        if outputs.numel() != seeds.numel() or not bool((outputs == seeds).all()):
            raise InvalidValueError(f"{self.what}: the output nodes of its subgraph are not "
                                    "the seeds it was given")

    def _check_chain(self, blocks: list, seeds: torch.Tensor) -> None:
        want, where = seeds, "the seeds"
        for i in reversed(range(len(blocks))):
            block = blocks[i]
            if not getattr(block, "is_block", False) or dgl.NID not in block.dstdata:
                raise InvalidValueError(f"{self.what}: blocks[{i}] is not a block with "
                                        "dstdata[dgl.NID] (make it with dgl.to_block)")
            dst = block.dstdata[dgl.NID]
            if dst.numel() != want.numel() or not bool((dst == want).all()):
                raise InvalidValueError(f"{self.what}: the blocks do not chain: blocks[{i}]'s "
                                        f"destination nodes are not {where}")
            want, where = block.srcdata[dgl.NID], f"blocks[{i}]'s source nodes"
