"""Building DGL blocks (message flow graphs) from sampled edges in global ids."""
from __future__ import annotations

import dgl
import torch

__all__ = ["make_block"]


def make_block(seeds: torch.Tensor, src: torch.Tensor, dst: torch.Tensor,
               num_nodes: int) -> dgl.DGLGraph:
    """A block whose destination nodes are ``seeds`` and whose edges are ``src -> dst``.

    DGL's own relabeling (``dgl.to_block``, as DistDGL's sampler does): the source nodes start
    with the destination nodes in ``seeds`` order, followed by the other sources in order of
    first appearance. ``srcdata[dgl.NID]`` and ``dstdata[dgl.NID]`` hold the global ids.

    Args:
        seeds: unique global ids of the destination nodes.
        src / dst: global ids of the sampled edges; every ``dst`` is in ``seeds``.
        num_nodes: nodes of the whole graph (every id is below it).
    """
    frontier = dgl.graph((src, dst), num_nodes=num_nodes)
    block = dgl.to_block(frontier, seeds)
    del block.edata[dgl.EID]  # edge ids of the throwaway frontier graph mean nothing
    return block
