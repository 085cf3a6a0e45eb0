"""DGL's ``dgl.distributed.optim``: the sparse optimizers of :class:`DistEmbedding` s
(:mod:`dglx_dist.api.embedding`), where a DistDGL script imports them."""
from dglx_dist.api.embedding import SparseAdagrad, SparseAdam

__all__ = ["SparseAdam", "SparseAdagrad"]
