"""DGL's ``dgl.distributed.DistEmbedding`` over the graph's KVStore (node ids translated), and
the sparse optimizers of its rows (DGL's ``dgl.distributed.optim``)."""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from dglx_dist.api.graph import DistGraph, current_graph
from dglx_dist.api.ndata import space_for
from dglx_dist.kvstore import embedding as _kv
from dglx_dist.kvstore.embedding import DistEmbedding as _StoreEmbedding

__all__ = ["DistEmbedding", "SparseAdam", "SparseAdagrad"]


class DistEmbedding:
    """Learnable rows, one per node, trained by :class:`SparseAdam` / :class:`SparseAdagrad` (collective
    to create; calling it is a pull: every rank calls at the same step). A ``DataLoader``
    step pulls the rows of its input nodes (of the embedding's type, on a graph with types)
    for every embedding of the graph at once; called with those ids (the values of
    ``input_nodes[ntype]``), it takes them instead of pulling.

    Args:
        num_embeddings: rows: the graph's node count (of one node type on a graph with types).
        embedding_dim: width of a row.
        name: a new name (default: generated, the same on every rank).
        init_func: ``init_func(shape, dtype) -> Tensor`` (default zeros).
        part_policy: ``g.get_node_partition_policy(ntype)``: one row per node of that type
            (default: the type with ``num_embeddings`` nodes, as in DGL).
        graph: the graph (default: the one built last).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, name: str | None = None,
                 init_func: Callable | None = None, part_policy=None,
                 graph: DistGraph | None = None):
        g = graph or current_graph()
        self.space = space_for(g, int(num_embeddings), part_policy,
                               f"DistEmbedding({num_embeddings}, {embedding_dim})")
        self.graph = g
        self.name = self.space.key(name or g.new_name("_dist_embedding_"))
        self.inner = _StoreEmbedding(g.store, self.name, int(num_embeddings), int(embedding_dim),
                                     self.space.policy, init=init_func or "zeros")
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        g.step_rows.embeddings.append(self)

    def __call__(self, ids: torch.Tensor, device=None) -> torch.Tensor:
        taken = self.inner.take(ids, device)  # a loader pulled the rows of its input nodes
        if taken is not None:
            return taken
        ids = self.space.check(torch.as_tensor(ids), repr(self))
        return self.inner(self.space.rows(ids), device)

    def __repr__(self) -> str:
        return f"DistEmbedding({self.name!r}, {self.num_embeddings}, {self.embedding_dim})"


def _inner(params: Sequence) -> list:
    return [getattr(p, "inner", p) for p in params]


class SparseAdagrad(_kv.SparseAdagrad):
    """DGL's ``SparseAdagrad(params, lr, eps=1e-10)``."""

    def __init__(self, params: Sequence, lr: float, eps: float = 1e-10):
        super().__init__(_inner(params), lr, eps)


class SparseAdam(_kv.SparseAdam):
    """DGL's ``SparseAdam(params, lr, betas=(0.9, 0.999), eps=1e-08)``."""

    def __init__(self, params: Sequence, lr: float, betas=(0.9, 0.999), eps: float = 1e-08):
        super().__init__(_inner(params), lr, betas, eps)
