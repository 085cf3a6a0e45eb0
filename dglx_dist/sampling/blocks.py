"""Building DGL blocks (message flow graphs) from sampled edges in global ids."""
from __future__ import annotations

import dgl
import torch

__all__ = ["make_block"]


def make_block(seeds: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> dgl.DGLGraph:
    """A block whose destination nodes are ``seeds`` and whose edges are ``src -> dst``.

    Follows DGL's convention: the source nodes start with the destination nodes (in ``seeds``
    order), followed by the other sources in increasing id. ``srcdata[dgl.NID]`` and
    ``dstdata[dgl.NID]`` hold the global ids.

    Args:
        seeds: unique global ids of the destination nodes.
        src / dst: global ids of the sampled edges; every ``dst`` is in ``seeds``.
    """
    num_seeds = seeds.numel()
    uniq, inverse = torch.unique(torch.cat([seeds, src]), return_inverse=True)
    new_of_uniq = torch.full((uniq.numel(),), -1, dtype=torch.int64)
    new_of_uniq[inverse[:num_seeds]] = torch.arange(num_seeds)
    rest = (new_of_uniq < 0).nonzero().squeeze(1)
    new_of_uniq[rest] = num_seeds + torch.arange(rest.numel())
    src_nodes = torch.empty_like(uniq)
    src_nodes[new_of_uniq] = uniq
    src_local = new_of_uniq[inverse[num_seeds:]]
    sorter = torch.argsort(seeds)
    dst_local = sorter[torch.searchsorted(seeds[sorter], dst)]
    block = dgl.create_block((src_local, dst_local), num_src_nodes=uniq.numel(),
                             num_dst_nodes=num_seeds)
    block.srcdata[dgl.NID] = src_nodes
    block.dstdata[dgl.NID] = seeds
    return block
