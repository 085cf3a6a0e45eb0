"""The dtype ids travel in; packing a block's structure into one tensor to send it (P3's
push of the first layer's blocks), and back into the package's block."""
from __future__ import annotations

import torch

from dglx_dist.errors import InvalidValueError
from dglx_dist.graphcore.block import Block, group_by, in_order
from dglx_dist.graphcore.frames import NID

__all__ = ["id_dtype", "pack_block", "unpack_block"]


def id_dtype(num_nodes: int) -> torch.dtype:
    """The narrowest integer dtype that holds node ids (and counts) of a graph this size."""
    return torch.int32 if num_nodes < 2**31 else torch.int64


def pack_block(block, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """A block's structure (the package's or DGL's) as one 1-D ``dtype`` tensor:
    ``[num_src, num_dst, num_edges]``, the source nodes' global ids, then the in-edges in
    CSC form (``indptr`` over destination nodes, source indices); ``dtype`` must hold every
    id and count (:func:`id_dtype`). Also each packed edge's position among the block's
    edges (what travels beside an edge, its weight, is packed in that order)."""
    src, dst, eid = block.edges(form="all")
    num_dst = block.num_dst_nodes()
    order, indptr = group_by(dst, num_dst)
    head = torch.tensor([block.num_src_nodes(), num_dst, src.numel()])
    if int(head.max()) > torch.iinfo(dtype).max:
        raise InvalidValueError(f"a block with {head.tolist()} (src, dst, edges) does not fit "
                                f"{dtype}")
    packed = torch.cat([head, block.srcdata[NID].cpu(), indptr.cpu(),
                        in_order(src, order).cpu()]).to(dtype)
    return packed, in_order(eid, order)


def unpack_block(msg: torch.Tensor) -> Block:
    """The block :func:`pack_block` packed (int64 ids; edges in CSC order, without ids)."""
    msg = msg.long()
    num_src, num_dst, num_edges = msg[:3].tolist()
    gids, indptr, indices = torch.split(msg[3:], [num_src, num_dst + 1, num_edges])
    dst = torch.repeat_interleave(torch.arange(num_dst), indptr.diff())
    zeros = torch.zeros_like
    return Block(gids, zeros(gids), (num_dst,), indices, dst, None, zeros(dst))
