"""Sparse learnable node embeddings kept in a KVStore, and the sparse optimizers that train them
(docs/kvstore.md, "Sparse embeddings": the lazy semantics, what matches torch's optimizers).

Calling a :class:`DistEmbedding` pulls rows into a leaf that requires grad and records it; an
optimizer's ``step()`` pushes the recorded gradients to the rows' owners with an op registered
for it, which updates only the touched rows and their state (``NAME/adam_m``, ...). With a
:class:`~dglx_dist.kvstore.dist.DistKVStore`, building an embedding or an optimizer, calling an
embedding and ``step()`` are collective.
"""
from __future__ import annotations

import abc
from typing import Callable, Sequence

import torch

from dglx_dist.errors import InvalidValueError
from dglx_dist.kvstore.base import KVStore
from dglx_dist.kvstore.ops import Init
from dglx_dist.kvstore.policy import PartitionPolicy

__all__ = ["DistEmbedding", "SparseOptimizer", "SparseAdagrad", "SparseAdam", "same_ids"]


def same_ids(ids: torch.Tensor, other: object) -> bool:
    """Whether ``other`` is a tensor of integer ids with the values of ``ids``, in the same
    order, wherever it lives: how rows pulled ahead for ``ids`` are matched to a read (by
    the ids' values, never by which tensor object a loop passes)."""
    if not isinstance(other, torch.Tensor) or other.shape != ids.shape or \
            other.dtype.is_floating_point or other.dtype.is_complex or other.dtype == torch.bool:
        return False
    return torch.equal(ids, other.to(ids.device, ids.dtype))


class DistEmbedding:
    """Learnable rows ``(num_embeddings, dim)`` in a store, read sparsely.

    Args:
        store: the store holding the rows.
        name: the named tensor to register.
        num_embeddings: rows (must equal ``policy.num_rows``).
        dim: width of a row.
        policy: where the rows live.
        init: "zeros" or ``init(shape, dtype) -> Tensor`` (seeded per part).
        dtype: element type.
    """

    def __init__(self, store: KVStore, name: str, num_embeddings: int, dim: int,
                 policy: PartitionPolicy, init: Init = "zeros",
                 dtype: torch.dtype = torch.float32):
        if policy.num_rows != num_embeddings:
            raise InvalidValueError(f"DistEmbedding {name!r}: num_embeddings={num_embeddings} but "
                                    f"the policy covers {policy.num_rows} rows")
        store.init_data(name, policy, trailing_shape=(int(dim),), dtype=dtype, init=init)
        self.store, self.name, self.policy = store, name, policy
        self.num_embeddings, self.dim, self.dtype = int(num_embeddings), int(dim), dtype
        self._trace: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._offer: tuple | None = None  # rows pulled ahead (offer / take)

    def __call__(self, ids: torch.Tensor, device: torch.device | str | None = None) -> torch.Tensor:
        """Rows ``ids`` as a leaf tensor that requires grad (recorded while grad is enabled).

        Args:
            ids: 1-D int64 row ids (duplicates allowed).
            device: where the leaf lives (default: the store's CPU tensors).
        """
        return self._leaf(ids, self.store.pull(self.name, ids), device)

    def offer(self, key: torch.Tensor, ids: torch.Tensor,
              rows: Callable[[], torch.Tensor]) -> None:
        """Rows ``ids`` pulled ahead (a loader's prefetch; ``rows()`` gives them) for the
        caller's ids ``key``: the next :meth:`take` of ids of the same values gets them
        instead of pulling. The next take of other ids, or an optimizer's step, drops them."""
        self._offer = (key, ids, rows)

    def take(self, key: object, device: torch.device | str | None = None
             ) -> torch.Tensor | None:
        """The rows offered for ids of ``key``'s values, as :meth:`__call__` gives them;
        None when they were not (the offer is dropped either way)."""
        offer, self._offer = self._offer, None
        if offer is None or not same_ids(offer[0], key):
            return None
        return self._leaf(offer[1], offer[2](), device)

    def _leaf(self, ids: torch.Tensor, rows: torch.Tensor,
              device: torch.device | str | None) -> torch.Tensor:
        if device is not None:
            rows = rows.to(device)
        if torch.is_grad_enabled():
            rows.requires_grad_(True)
            self._trace.append((ids, rows))
        return rows

    def gradients(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The ids and gradient rows recorded since the last step (rows without grad skipped)."""
        ids = [i for i, leaf in self._trace if leaf.grad is not None]
        grads = [leaf.grad.detach().to("cpu", self.dtype) for _, leaf in self._trace
                 if leaf.grad is not None]
        if not ids:
            return torch.zeros(0, dtype=torch.int64), torch.zeros((0, self.dim), dtype=self.dtype)
        return torch.cat(ids), torch.cat(grads)

    def zero_grad(self) -> None:
        """Drops the gradients of the recorded leaves (keeps the leaves)."""
        for _, leaf in self._trace:
            leaf.grad = None

    def __repr__(self) -> str:
        return f"DistEmbedding({self.name!r}, {self.num_embeddings} x {self.dim}, {self.policy})"


class SparseOptimizer(abc.ABC):
    """Updates the touched rows of embeddings through a push op registered per embedding.

    Args:
        embeddings: the embeddings to train (their stores get the state tensors and ops).
        lr: learning rate.
    """

    kind: str = ""

    def __init__(self, embeddings: Sequence[DistEmbedding], lr: float):
        if lr <= 0:
            raise InvalidValueError(f"{type(self).__name__}: lr={lr}; expected > 0")
        self.embeddings, self.lr = list(embeddings), float(lr)
        for emb in self.embeddings:
            handler, state = self._handler(emb)
            for suffix, trailing in state.items():
                emb.store.init_data(f"{emb.name}/{suffix}", emb.policy, trailing_shape=trailing,
                                    dtype=emb.dtype)
            emb.store.register_op(self.op_name(emb), handler, combine="sum")

    def op_name(self, emb: DistEmbedding) -> str:
        """The push op this optimizer registered for ``emb``."""
        return f"{emb.name}/sparse_{self.kind}"

    def step(self) -> None:
        """Pushes every embedding's summed gradient rows to their owners (collective): one
        push of all of a store's embeddings (:meth:`KVStore.push_many`)."""
        with torch.no_grad():
            by_store: dict[KVStore, list] = {}
            for emb in self.embeddings:
                ids, grads = emb.gradients()
                by_store.setdefault(emb.store, []).append(
                    (emb.name, ids, grads, self.op_name(emb)))
            for store, pushes in by_store.items():
                store.push_many(pushes)
            for emb in self.embeddings:
                emb._trace.clear()  # the recorded leaves are pushed
                emb._offer = None  # pulled before this step's writes

    def zero_grad(self) -> None:
        """Drops the gradients recorded so far (the next ``step()`` pushes only newer ones)."""
        for emb in self.embeddings:
            emb.zero_grad()

    @abc.abstractmethod
    def _handler(self, emb: DistEmbedding) -> tuple[Callable, dict[str, tuple[int, ...]]]:
        """The op ``fn(rows, grad, local_ids, state) -> new_rows`` for ``emb``, and the state
        tensors it keeps (registered first): name suffix -> row shape."""


class SparseAdagrad(SparseOptimizer):
    """Adagrad on touched rows: ``sum += g^2; w -= lr * g / (sqrt(sum) + eps)``.

    Args:
        embeddings: the embeddings to train.
        lr: learning rate.
        eps: added to the denominator.
    """

    kind = "adagrad"

    def __init__(self, embeddings: Sequence[DistEmbedding], lr: float, eps: float = 1e-10):
        self.eps = float(eps)
        super().__init__(embeddings, lr)

    def _handler(self, emb: DistEmbedding):
        key, lr, eps = f"{emb.name}/adagrad_sum", self.lr, self.eps

        def adagrad(rows, grad, local, state):
            total = state["tensors"][key]
            new_sum = total[local] + grad * grad
            total[local] = new_sum
            return rows - lr * grad / (new_sum.sqrt() + eps)
        return adagrad, {"adagrad_sum": (emb.dim,)}


class SparseAdam(SparseOptimizer):
    """Lazy Adam on touched rows with a per-row step count for the bias correction.

    Args:
        embeddings: the embeddings to train (row-sharded policies only: the step count is a
            per-row value).
        lr: learning rate.
        betas: decay rates of the first and second moments.
        eps: added to the denominator.
    """

    kind = "adam"

    def __init__(self, embeddings: Sequence[DistEmbedding], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        for emb in embeddings:
            if emb.policy.splits_columns:
                raise InvalidValueError(f"SparseAdam keeps a per-row step count, which needs a "
                                        f"row-sharded policy; {emb!r} splits columns")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise InvalidValueError(f"SparseAdam: betas={betas}; expected two values in [0, 1)")
        self.betas, self.eps = (float(betas[0]), float(betas[1])), float(eps)
        super().__init__(embeddings, lr)

    def _handler(self, emb: DistEmbedding):
        keys = [f"{emb.name}/{s}" for s in ("adam_m", "adam_v", "adam_step")]
        lr, (b1, b2), eps = self.lr, self.betas, self.eps

        def adam(rows, grad, local, state):
            m, v, steps = (state["tensors"][k] for k in keys)
            t = steps[local] + 1
            steps[local] = t
            m_new = b1 * m[local] + (1 - b1) * grad
            v_new = b2 * v[local] + (1 - b2) * grad * grad
            m[local], v[local] = m_new, v_new
            t = t.double().unsqueeze(1)
            bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
            denom = v_new.sqrt() / bc2.sqrt() + eps
            return rows - (lr / bc1) * m_new / denom
        return adam, {"adam_m": (emb.dim,), "adam_v": (emb.dim,), "adam_step": ()}
