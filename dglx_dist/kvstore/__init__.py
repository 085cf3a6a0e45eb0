"""KVStore: named tensors (node data, embeddings) in parts: pull reads rows, push updates them.

* :mod:`~dglx_dist.kvstore.policy`: where rows live (:class:`RowPolicy` by a node book,
  :class:`ColumnPolicy` by feature slices).
* :class:`KVStore`: the interface; :class:`LocalKVStore`: every part in one process (the
  reference); :class:`DistKVStore`: parts in shared memory on their servers, remote rows through
  the session's communicators (collective pull/push).
* :class:`DistEmbedding` with :class:`SparseAdagrad` / :class:`SparseAdam`: sparse learnable
  embeddings updated on their owners.
"""
from dglx_dist.kvstore.base import INTERNAL_PREFIX, KVStore, PullUnderWay, typed_key
from dglx_dist.kvstore.entries import TensorEntry
from dglx_dist.kvstore.dist import DistKVStore
from dglx_dist.kvstore.embedding import DistEmbedding, SparseAdagrad, SparseAdam, SparseOptimizer
from dglx_dist.kvstore.local import LocalKVStore
from dglx_dist.kvstore.ops import PushOp
from dglx_dist.kvstore.policy import ColumnPolicy, PartitionPolicy, Piece, RowPolicy

__all__ = ["KVStore", "LocalKVStore", "DistKVStore", "PullUnderWay", "TensorEntry",
           "PartitionPolicy", "RowPolicy", "ColumnPolicy", "Piece", "PushOp", "DistEmbedding",
           "SparseOptimizer", "SparseAdagrad", "SparseAdam", "INTERNAL_PREFIX", "typed_key"]
