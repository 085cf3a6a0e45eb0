"""The tensor tasks of a GCN layer, as pure functions of a header and float32 arrays.

Tasks keep nothing between invocations: the backward task recomputes ``Z = A @ W + b`` and the
dropout mask from its inputs (tensor rematerialisation), and the last layer's forward and
backward run as one task (task fusion). Every task works row by row, so callers may chunk the
rows (see :mod:`dglx_dist.convs.ops_base`).

Header fields:
    av:       act ("relu" | "none", required), dropout (float in [0, 1), default 0.0),
              seed (int, default 0), train (bool, default False)
    av_grad:  act (required), dropout, seed as for av; need_dA (bool, default False)
    av_loss:  act (default "none": the conv's own activation on the logits), need_dA (bool,
              default False)
"""
from __future__ import annotations

import numpy as np

from dglx_dist.convs.ops_base import (Arrays, Op, _array, _expect, _field, _rows, activate,
                                      activate_grad, activated_loss)

__all__ = ["TASKS"]


def _linear(arrays: Arrays) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validated A (n x fin), W (fin x fout), b (fout,)."""
    a = _array(arrays, "A", "float32", 2)
    w = _array(arrays, "W", "float32", 2)
    b = _array(arrays, "b", "float32", 1)
    _expect(a.shape[1] == w.shape[0], f"array 'A' has {a.shape[1]} columns but 'W' has "
            f"{w.shape[0]} rows (shapes {a.shape} and {w.shape}); expected them equal")
    _expect(b.shape[0] == w.shape[1], f"array 'b' has {b.shape[0]} entries but 'W' has "
            f"{w.shape[1]} columns; expected them equal")
    return a, w, b


def _forward_parts(arrays: Arrays):
    a, w, b = _linear(arrays)
    ids = _rows(arrays, "ids", "int64", a.shape[0])
    return a, w, a @ w + b, ids


def _av(header: dict, arrays: Arrays) -> Arrays:
    _, _, z, ids = _forward_parts(arrays)
    return {"H": activate(header, z, ids)}


def _av_grad(header: dict, arrays: Arrays) -> Arrays:
    a, w, z, ids = _forward_parts(arrays)
    dh = _array(arrays, "dH", "float32", 2)
    return _linear_grads(header, a, w, activate_grad(header, z, dh, ids))


def _linear_grads(header: dict, a: np.ndarray, w: np.ndarray, dz: np.ndarray) -> Arrays:
    out = {"dW": (a.T @ dz).astype(np.float32, copy=False),
           "db": dz.sum(axis=0, dtype=np.float32)}
    if _field(header, "need_dA", bool, False):
        out["dA"] = (dz @ w.T).astype(np.float32, copy=False)
    return out


def _av_loss(header: dict, arrays: Arrays) -> Arrays:
    a, w, b = _linear(arrays)
    loss, dz = activated_loss(header, a @ w + b, arrays, "columns of 'W'")
    out = _linear_grads(header, a, w, dz)
    out["loss"] = np.array([loss], dtype=np.float32)
    return out


def _av_widths(header: dict, arrays: Arrays) -> dict[str, int]:
    return {"H": _array(arrays, "W", "float32", 2).shape[1]}


def _grad_widths(header: dict, arrays: Arrays) -> dict[str, int]:
    fin, fout = _array(arrays, "W", "float32", 2).shape
    out = {"dW": fin * fout, "db": fout, "loss": 1}
    if _field(header, "need_dA", bool, False):
        out["dA"] = fin
    return out


TASKS: dict[str, Op] = {
    "av": Op(_av, inputs=("A", "W", "b", "ids"), row_inputs=("A", "ids"),
             row_outputs=("H",), sum_outputs=(), out_widths=_av_widths),
    "av_grad": Op(_av_grad, inputs=("A", "W", "b", "ids", "dH"), row_inputs=("A", "ids", "dH"),
                  row_outputs=("dA",), sum_outputs=("dW", "db"), out_widths=_grad_widths),
    "av_loss": Op(_av_loss, inputs=("A", "W", "b", "labels", "weight"),
                  row_inputs=("A", "labels", "weight"), row_outputs=("dA",),
                  sum_outputs=("loss", "dW", "db"), out_widths=_grad_widths),
}
