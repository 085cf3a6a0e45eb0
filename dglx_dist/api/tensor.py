"""``DistTensor``: a tensor of one row per node, sharded like the node features.

DGL's ``dgl.distributed.DistTensor(shape, dtype, name=None, init_func=None, ...)``: rows live
with their node's owner in the KVStore; ``t[ids]`` reads rows in the order asked and
``t[ids] = values`` writes them, each by this rank alone (the owners' serving threads answer);
as in DGL, other ranks see a write after :meth:`~dglx_dist.api.DistGraph.barrier`.
"""
from __future__ import annotations

from typing import Callable

import torch

from dglx_dist.api.edata import EdgeSpace, edge_tensor
from dglx_dist.api.graph import DistGraph, NodeDataView, current_graph
from dglx_dist.api.ndata import space_for, stored_tensor

__all__ = ["DistTensor"]


class DistTensor(NodeDataView):
    """A node-sharded tensor of the current (or given) :class:`~dglx_dist.api.DistGraph`
    (collective to create).

    Args:
        shape: ``(num_nodes, *row_shape)`` (the nodes of one type on a graph with types).
        dtype: element type.
        name: its name (default: generated, the same on every rank); also visible as
            ``g.ndata[name]``. A name that exists already attaches to that tensor, as in
            DGL, when the shape and dtype are the same (its rows kept, ``init_func`` unused).
        init_func: ``init_func(shape, dtype) -> Tensor`` for the rows (default zeros).
        part_policy: ``g.get_node_partition_policy(ntype)``: one row per node of that type
            (default: the type with ``shape[0]`` nodes, as in DGL); or
            ``g.get_edge_partition_policy(etype)``: one row per edge of that type, stored with
            the edges (the tensor is then a view of ``g.edata[name]``, or of
            ``g.edges[etype].data[name]``).
        persistent: DGL's; accepted.
        is_gdata: DGL's; accepted.
        attach: DGL's; accepted.
        graph: the graph (default: the one built last).
    """

    def __new__(cls, shape, dtype: torch.dtype, name: str | None = None,
                init_func: Callable | None = None, part_policy=None, *args, **kwargs):
        if isinstance(part_policy, EdgeSpace):  # rows by edges: an edge-data view
            g = kwargs.get("graph") or current_graph()
            shape = tuple(int(d) for d in shape)
            view = edge_tensor(g, shape, dtype, name or g.new_name("_dist_tensor_"), init_func,
                               part_policy)
            if name is None:
                view._what = _unnamed(shape)
            return view
        return super().__new__(cls)

    def __init__(self, shape, dtype: torch.dtype, name: str | None = None,
                 init_func: Callable | None = None, part_policy=None, persistent: bool = False,
                 is_gdata: bool = True, attach: bool = True, graph: DistGraph | None = None):
        g = graph or current_graph()
        shape = tuple(int(d) for d in shape)
        space = space_for(g, shape[0] if shape else -1, part_policy, f"DistTensor {shape}")
        given = name
        name = name or g.new_name("_dist_tensor_")
        stored_tensor(g.store, space.key(name), space.policy, shape, dtype, init_func, name)
        super().__init__(g, name, space)
        if given is None:
            self.what = _unnamed(shape)


def _unnamed(shape: tuple[int, ...]) -> str:
    """How messages name a DistTensor made without a name (not by the name generated for
    it, which the user never wrote)."""
    return f"a DistTensor of shape {shape}"
