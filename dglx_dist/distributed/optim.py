"""DGL's ``dgl.distributed.optim``: sparse optimizers of :class:`DistEmbedding` s."""
from __future__ import annotations

from typing import Sequence

from dglx_dist.kvstore import embedding as _kv

__all__ = ["SparseAdam", "SparseAdagrad"]


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
