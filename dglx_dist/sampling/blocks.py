"""Building DGL blocks (message flow graphs) from sampled edges in global ids; packing a
block's structure into one tensor to send it."""
from __future__ import annotations

import dgl
import torch

from dglx_dist.errors import InvalidValueError

__all__ = ["id_dtype", "make_block", "pack_block", "unpack_block"]


def make_block(seeds: torch.Tensor, src: torch.Tensor, dst: torch.Tensor,
               num_nodes: int, eid: torch.Tensor) -> dgl.DGLGraph:
    """A block whose destination nodes are ``seeds`` and whose edges are ``src -> dst``.

    DGL's own relabeling (``dgl.to_block``, as DistDGL's sampler does): the source nodes start
    with the destination nodes in ``seeds`` order, followed by the other sources in order of
    first appearance. ``srcdata[dgl.NID]`` and ``dstdata[dgl.NID]`` hold the global ids,
    ``edata[dgl.EID]`` the edges' ids ``eid``.

    Args:
        seeds: unique global ids of the destination nodes.
        src: global ids of the sampled edges' sources.
        dst: global ids of the sampled edges' destinations; every one is in ``seeds``.
        num_nodes: nodes of the whole graph (every id is below it).
        eid: the sampled edges' ids in the user's graph.
    """
    frontier = dgl.graph((src, dst), num_nodes=num_nodes)
    block = dgl.to_block(frontier, seeds)
    # to_block numbers the edges by the throwaway frontier's ids: the user's ids instead
    block.edata[dgl.EID] = eid.index_select(0, block.edata[dgl.EID])
    return block


def id_dtype(num_nodes: int) -> torch.dtype:
    """The narrowest integer dtype that holds node ids (and counts) of a graph this size."""
    return torch.int32 if num_nodes < 2**31 else torch.int64


def pack_block(block: dgl.DGLGraph, dtype: torch.dtype) -> torch.Tensor:
    """A block's structure as one 1-D ``dtype`` tensor: ``[num_src, num_dst, num_edges]``,
    the source nodes' global ids, then the in-edges in CSC form (``indptr`` over destination
    nodes, source indices); ``dtype`` must hold every id and count (:func:`id_dtype`)."""
    indptr, indices, _ = block.adj_tensors("csc")
    head = torch.tensor([block.num_src_nodes(), block.num_dst_nodes(), indices.numel()])
    if int(head.max()) > torch.iinfo(dtype).max:
        raise InvalidValueError(f"a block with {head.tolist()} (src, dst, edges) does not fit "
                                f"{dtype}")
    return torch.cat([head, block.srcdata[dgl.NID], indptr, indices]).to(dtype)


def unpack_block(msg: torch.Tensor) -> dgl.DGLGraph:
    """The block :func:`pack_block` packed (int64 ids; edges in CSC order)."""
    msg = msg.long()
    num_src, num_dst, num_edges = msg[:3].tolist()
    gids, indptr, indices = torch.split(msg[3:], [num_src, num_dst + 1, num_edges])
    block = dgl.create_block(("csc", (indptr, indices, torch.zeros(0, dtype=torch.int64))),
                             num_src_nodes=num_src, num_dst_nodes=num_dst)
    block.srcdata[dgl.NID] = gids
    return block
