"""DGL's ``dgl.distributed.DistEmbedding`` over the graph's KVStore (node ids translated)."""
from __future__ import annotations

from typing import Callable

import torch

from dglx_dist.api.graph import DistGraph, current_graph
from dglx_dist.errors import InvalidValueError
from dglx_dist.kvstore import RowPolicy
from dglx_dist.kvstore.embedding import DistEmbedding as _StoreEmbedding

__all__ = ["DistEmbedding"]


class DistEmbedding:
    """Learnable rows, one per node, trained by :mod:`dglx_dist.distributed.optim` (collective
    to create; calling it is a pull: every rank calls at the same step).

    Args:
        num_embeddings: rows; must be the graph's node count.
        embedding_dim: width of a row.
        name: a new name (default: generated, the same on every rank).
        init_func: ``init_func(shape, dtype) -> Tensor`` (default zeros).
        part_policy: DGL's; accepted (rows follow the node partitions).
        graph: the graph (default: the one built last).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, name: str | None = None,
                 init_func: Callable | None = None, part_policy=None,
                 graph: DistGraph | None = None):
        g = graph or current_graph()
        if int(num_embeddings) != g.num_nodes():
            raise InvalidValueError(f"DistEmbedding: num_embeddings={num_embeddings}; node "
                                    f"embeddings need one row per node ({g.num_nodes()})")
        self.graph = g
        self.name = name or g.new_name("_dist_embedding_")
        self.inner = _StoreEmbedding(g.store, self.name, int(num_embeddings), int(embedding_dim),
                                     RowPolicy(g.pdir.book), init=init_func or "zeros")
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)

    def __call__(self, ids: torch.Tensor, device=None) -> torch.Tensor:
        return self.inner(self.graph.part_ids(torch.as_tensor(ids).long()), device)

    def __repr__(self) -> str:
        return f"DistEmbedding({self.name!r}, {self.num_embeddings}, {self.embedding_dim})"
