"""What the tensor tasks of every layer kind share: the :class:`Op` record (how a task's rows
may be chunked), the checks of header fields and arrays (:class:`PayloadError`, a ValueError),
dropout with a mask hashed from (seed, node id, column), so that no chunking changes it, the
activation and the weighted cross-entropy loss. Numpy and the standard library only, as every
conv folder's ``ops.py`` (docs/architecture.md, "A conv type").
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

__all__ = ["Arrays", "Op", "PayloadError", "activate", "activate_grad", "activated_loss",
           "dropout_mask", "dropout_scale", "linear_tasks", "output_size", "weighted_cross_entropy"]

Arrays = dict[str, np.ndarray]


class PayloadError(ValueError):
    """A payload (or a tensor task's inputs) that does not follow the format; the message
    names the field, what it was and what was expected. Defined here, where the tasks are,
    and raised by the wire format too (:mod:`dglx_dist.offload.tensor_fn.payload`)."""


_ACTS = ("relu", "none")
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_REQUIRED = object()


@dataclasses.dataclass(frozen=True)
class Op:
    """One tensor task.

    Attributes:
        fn: ``(header, arrays) -> outputs``.
        inputs: names of the arrays the task needs.
        row_inputs: inputs whose first axis is the interval's rows (split these to chunk).
        row_outputs: outputs whose first axis is the interval's rows (concatenate chunks').
        sum_outputs: outputs that are sums over rows (add chunks' up).
        out_widths: ``(header, arrays) -> {output: elements per row (row outputs) or in total
            (sum outputs)}``, all float32; used to estimate response sizes before invoking
            (none: a task that is not chunkable, whose size is never needed for splitting).
        chunkable: False for a task whose inputs cannot be cut by rows alone (GAT's per-edge
            tasks); callers then send it whole.
    """

    fn: Callable[[dict, Arrays], Arrays]
    inputs: tuple[str, ...]
    row_inputs: tuple[str, ...]
    row_outputs: tuple[str, ...]
    sum_outputs: tuple[str, ...]
    out_widths: Callable[[dict, Arrays], dict[str, int]] = lambda header, arrays: {}
    chunkable: bool = True


def _field(header: dict, name: str, kind: type, default: Any = _REQUIRED) -> Any:
    if name not in header:
        if default is _REQUIRED:
            raise PayloadError(f"header field {name!r} is missing (op {header.get('op')!r})")
        return default
    value = header[name]
    ok = isinstance(value, bool) if kind is bool else (
        isinstance(value, kind) and not isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        raise PayloadError(f"header field {name!r}: expected {kind.__name__}, got {value!r}")
    return value


def _act(header: dict, default: Any = _REQUIRED) -> str:
    act = _field(header, "act", str, default)
    if act not in _ACTS:
        raise PayloadError(f"header field 'act': got {act!r}, expected one of {list(_ACTS)}")
    return act


def _dropout(header: dict) -> tuple[float, int]:
    p = _field(header, "dropout", float, 0.0)
    if not 0.0 <= p < 1.0:
        raise PayloadError(f"header field 'dropout': got {p}, expected a probability in [0, 1)")
    return p, _field(header, "seed", int, 0)


def _array(arrays: Arrays, name: str, dtype: str, ndim: int) -> np.ndarray:
    if name not in arrays:
        raise PayloadError(f"array {name!r} is missing; got {sorted(arrays)}")
    arr = arrays[name]
    if arr.dtype != np.dtype(dtype):
        raise PayloadError(f"array {name!r}: dtype {arr.dtype}, expected {np.dtype(dtype)}")
    if arr.ndim != ndim:
        raise PayloadError(f"array {name!r}: shape {arr.shape}, expected {ndim} dimensions")
    return arr


def _expect(cond: bool, message: str) -> None:
    if not cond:
        raise PayloadError(message)


def _rows(arrays: Arrays, name: str, dtype: str, n: int, of: str = "A") -> np.ndarray:
    arr = _array(arrays, name, dtype, 1)
    _expect(arr.shape[0] == n, f"array {name!r} has {arr.shape[0]} entries, expected one per "
            f"row of {of!r} ({n})")
    return arr


def _mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijective avalanche on uint64 (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def dropout_mask(seed: int, ids: np.ndarray, cols: int, p: float) -> np.ndarray:
    """The keep mask (bool, ``len(ids) x cols``): entry (i, j) is kept with probability
    ``1 - p``, decided by hashing (seed, ids[i], j) alone, so any row chunking agrees."""
    with np.errstate(over="ignore"):
        row = _mix64(ids.astype(np.int64).view(np.uint64) * _GOLDEN
                     ^ _mix64(np.full(1, seed % 2**64, dtype=np.uint64)))
        col = (np.arange(1, cols + 1, dtype=np.uint64) * _GOLDEN)
        bits = _mix64(row[:, None] + _mix64(col)[None, :])
    uniform = (bits >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)
    return uniform >= p


def dropout_scale(seed: int, ids: np.ndarray, cols: int, p: float) -> np.ndarray:
    """:func:`dropout_mask` times ``1 / (1 - p)``: what a kept entry is multiplied by."""
    return dropout_mask(seed, ids, cols, p) * np.float32(1.0 / (1.0 - p))


def activate(header: dict, z: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``z`` through the header's ``act``, then (``train`` and ``dropout`` > 0) the dropout of
    :func:`dropout_mask` for rows ``ids``; may overwrite ``z``."""
    act = _act(header)
    p, seed = _dropout(header)
    h = np.maximum(z, 0, out=z) if act == "relu" else z
    if _field(header, "train", bool, False) and p > 0:
        h *= dropout_scale(seed, ids, z.shape[1], p)
    return h.astype(np.float32, copy=False)


def activate_grad(header: dict, z: np.ndarray, dh: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The gradient in ``z`` of :func:`activate` (in training) from the gradient ``dh`` of its
    output: the dropout mask regenerated, the ReLU's recomputed from ``z``."""
    act = _act(header)
    p, seed = _dropout(header)
    _expect(dh.shape == z.shape, f"array 'dH' has shape {dh.shape}, expected {z.shape} "
            f"(the layer's rows x its output columns)")
    dz = dh.copy()
    if p > 0:
        dz *= dropout_scale(seed, ids, z.shape[1], p)
    if act == "relu":
        dz *= z > 0
    return dz


def weighted_cross_entropy(z: np.ndarray, arrays: Arrays, classes_from: str
                           ) -> tuple[float, np.ndarray]:
    """``sum_i weight_i * CE(z_i, labels_i)`` over the rows of logits ``z`` and its gradient in
    ``z`` (float64 loss, float32 gradient); ``labels`` and ``weight`` come from ``arrays``,
    and ``classes_from`` names what fixes the class count (for the error message)."""
    n, classes = z.shape
    labels = _rows(arrays, "labels", "int64", n)
    weight = _rows(arrays, "weight", "float32", n)
    if n:
        lo, hi = int(labels.min()), int(labels.max())
        _expect(lo >= 0 and hi < classes, f"array 'labels': values in [{lo}, {hi}], expected "
                f"class ids in [0, {classes}) ({classes_from})")
    shifted = z - z.max(axis=1, keepdims=True) if n else z
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    rows = np.arange(n)
    loss = -np.dot(weight.astype(np.float64), logp[rows, labels].astype(np.float64))
    dz = np.exp(logp)
    dz[rows, labels] -= 1.0
    dz *= weight[:, None]
    return float(loss), dz.astype(np.float32, copy=False)


def activated_loss(header: dict, z: np.ndarray, arrays: Arrays, classes_from: str
                   ) -> tuple[float, np.ndarray]:
    """:func:`weighted_cross_entropy` of the logits ``act(z)`` (the header's ``act``, default
    "none": a last conv's own activation) and its gradient in ``z``."""
    relu = _act(header, "none") == "relu"
    loss, dh = weighted_cross_entropy(np.maximum(z, 0) if relu else z, arrays, classes_from)
    if relu:
        dh *= z > 0
    return loss, dh


def output_size(op: Op, header: dict, arrays: Arrays) -> tuple[int, int]:
    """Estimated raw output bytes of ``op`` as (bytes per row, bytes independent of rows)."""
    widths = op.out_widths(header, arrays)
    per_row = sum(4 * w for name, w in widths.items() if name in op.row_outputs)
    fixed = sum(4 * w for name, w in widths.items() if name in op.sum_outputs)
    return per_row, fixed


def linear_tasks(names: tuple[str, str, str], pairs: tuple[tuple[str, str], ...], need: str,
                 validated: Callable[[Arrays], tuple[list, list, np.ndarray]],
                 classes_from: str) -> dict[str, Op]:
    """The forward, backward and fused-loss tasks (``names``) of a layer whose pre-activation
    is ``Σ_k X_k @ W_k + b``: ``pairs`` names each (input, weight), ``validated`` checks the
    arrays and gives ``([X_k], [W_k], b)``, ``need`` is the header flag asking for the inputs'
    gradients ``dX_k``. GCN's (``av``: A, W) and GraphSAGE's (``sage_av``: X, M, Ws, Wn)."""
    rows_of = pairs[0][0]

    def pre(arrays: Arrays, with_ids: bool = True):
        xs, ws, b = validated(arrays)
        ids = _rows(arrays, "ids", "int64", xs[0].shape[0], of=rows_of) if with_ids else None
        z = xs[0] @ ws[0]
        for x, w in zip(xs[1:], ws[1:]):
            z = z + x @ w
        return xs, ws, (z + b).astype(np.float32, copy=False), ids

    def grads(header: dict, xs: list, ws: list, dz: np.ndarray) -> Arrays:
        out = {f"d{w}": (x.T @ dz).astype(np.float32, copy=False)
               for x, (_, w) in zip(xs, pairs)}
        out["db"] = dz.sum(axis=0, dtype=np.float32)
        if _field(header, need, bool, False):
            out.update({f"d{name}": (dz @ w.T).astype(np.float32, copy=False)
                        for w, (name, _) in zip(ws, pairs)})
        return out

    def forward(header: dict, arrays: Arrays) -> Arrays:
        *_, z, ids = pre(arrays)
        return {"H": activate(header, z, ids)}

    def backward(header: dict, arrays: Arrays) -> Arrays:
        xs, ws, z, ids = pre(arrays)
        dh = _array(arrays, "dH", "float32", 2)
        return grads(header, xs, ws, activate_grad(header, z, dh, ids))

    def fused_loss(header: dict, arrays: Arrays) -> Arrays:
        xs, ws, z, _ = pre(arrays, with_ids=False)
        loss, dz = activated_loss(header, z, arrays, classes_from)
        return {**grads(header, xs, ws, dz), "loss": np.array([loss], dtype=np.float32)}

    return _linear_ops(names, pairs, need, (forward, backward, fused_loss))


def _linear_ops(names: tuple[str, str, str], pairs: tuple[tuple[str, str], ...], need: str,
                fns: tuple[Callable, ...]) -> dict[str, Op]:
    xs, ws = tuple(x for x, _ in pairs), tuple(w for _, w in pairs)
    dxs = tuple(f"d{x}" for x in xs)
    sums = tuple(f"d{w}" for w in ws) + ("db",)

    def av_widths(header: dict, arrays: Arrays) -> dict[str, int]:
        return {"H": _array(arrays, ws[0], "float32", 2).shape[1]}

    def grad_widths(header: dict, arrays: Arrays) -> dict[str, int]:
        fin, fout = _array(arrays, ws[0], "float32", 2).shape
        out = {**{f"d{w}": fin * fout for w in ws}, "db": fout, "loss": 1}
        if _field(header, need, bool, False):
            out.update({d: fin for d in dxs})
        return out

    forward, backward, fused_loss = fns
    return {
        names[0]: Op(forward, inputs=xs + ws + ("b", "ids"), row_inputs=xs + ("ids",),
                     row_outputs=("H",), sum_outputs=(), out_widths=av_widths),
        names[1]: Op(backward, inputs=xs + ws + ("b", "ids", "dH"),
                     row_inputs=xs + ("ids", "dH"), row_outputs=dxs, sum_outputs=sums,
                     out_widths=grad_widths),
        names[2]: Op(fused_loss, inputs=xs + ws + ("b", "labels", "weight"),
                     row_inputs=xs + ("labels", "weight"), row_outputs=dxs,
                     sum_outputs=("loss",) + sums, out_widths=grad_widths),
    }
