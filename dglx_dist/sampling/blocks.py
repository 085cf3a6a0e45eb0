"""The dtype ids travel in; packing a DGL block's structure into one tensor to send it (P3's
push of the first layer's blocks), and back."""
from __future__ import annotations

import torch

from dglx_dist.errors import InvalidValueError
from dglx_dist.sampling.frames import NID

__all__ = ["id_dtype", "pack_block", "unpack_block"]

def id_dtype(num_nodes: int) -> torch.dtype:
    """The narrowest integer dtype that holds node ids (and counts) of a graph this size."""
    return torch.int32 if num_nodes < 2**31 else torch.int64


def pack_block(block, dtype: torch.dtype) -> torch.Tensor:
    """A block's structure as one 1-D ``dtype`` tensor: ``[num_src, num_dst, num_edges]``,
    the source nodes' global ids, then the in-edges in CSC form (``indptr`` over destination
    nodes, source indices); ``dtype`` must hold every id and count (:func:`id_dtype`)."""
    indptr, indices, _ = block.adj_tensors("csc")
    head = torch.tensor([block.num_src_nodes(), block.num_dst_nodes(), indices.numel()])
    if int(head.max()) > torch.iinfo(dtype).max:
        raise InvalidValueError(f"a block with {head.tolist()} (src, dst, edges) does not fit "
                                f"{dtype}")
    return torch.cat([head, block.srcdata[NID], indptr, indices]).to(dtype)


def unpack_block(msg: torch.Tensor):
    """The block :func:`pack_block` packed (int64 ids; edges in CSC order)."""
    import dgl  # noqa: PLC0415 - P3's blocks are DGL's (the edge)

    msg = msg.long()
    num_src, num_dst, num_edges = msg[:3].tolist()
    gids, indptr, indices = torch.split(msg[3:], [num_src, num_dst + 1, num_edges])
    block = dgl.create_block(("csc", (indptr, indices, torch.zeros(0, dtype=torch.int64))),
                             num_src_nodes=num_src, num_dst_nodes=num_dst)
    block.srcdata[NID] = gids
    return block
