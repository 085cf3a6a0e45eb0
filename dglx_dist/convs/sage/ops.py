"""The tensor tasks of a GraphSAGE layer (``dgl.nn.SAGEConv``, aggregator "mean"), as pure
functions of float32 arrays.

A mean SAGEConv computes ``rst_v = x_v Ws + mean_{u -> v}(x_u) Wn + b`` (``fc_self`` with its
bias, ``fc_neigh`` without), then its own activation. The graph server computes ``M``, the
mean of each row's in-neighbours (zero for a row without in-edges, as in DGL); the tasks do
the rest, row by row:

* ``sage_av`` (ApplyVertex): ``H = dropout(act(X Ws + M Wn + b))``; ``act`` is the model's
  ReLU between layers (or the conv's own activation), the dropout that of the GCN tasks.
* ``sage_av_grad``: from ``dH``, the gradient of that output, to the gradients of ``Ws``,
  ``Wn``, ``b`` and (``need_dX``) of ``X`` (the rows themselves) and ``M`` (their mean, which
  the graph server sends back to the neighbours divided by the row's in-degree). The
  pre-activation and the dropout mask are recomputed (tasks keep nothing).
* ``sage_loss``: the last layer's apply (``act`` default "none") fused with the weighted
  cross entropy and its backward.

Arrays: ``X`` and ``M`` (rows x in), ``Ws`` and ``Wn`` (in x out: the transposed
``fc_self.weight`` and ``fc_neigh.weight``), ``b`` (out), ``ids`` (int64 per row; the dropout
mask hashes (seed, id, column)), ``dH`` (rows x out), ``labels``/``weight`` (the loss).
Header fields: ``act``, ``dropout``, ``seed``, ``train`` as for GCN's ``av``; ``need_dX``
(bool, default False). Every task works row by row, so callers may chunk the rows like the
GCN tasks'.
"""
from __future__ import annotations

import numpy as np

from dglx_dist.convs.ops_base import (Arrays, Op, _array, _expect, _field, _rows, activate,
                                      activate_grad, activated_loss)

__all__ = ["TASKS"]


def _inputs(arrays: Arrays) -> tuple[np.ndarray, ...]:
    """Validated X, M (n x in), Ws, Wn (in x out), b (out,)."""
    x = _array(arrays, "X", "float32", 2)
    m = _array(arrays, "M", "float32", 2)
    _expect(m.shape == x.shape, f"array 'M' has shape {m.shape}, expected {x.shape} (the "
            f"neighbours' mean of the rows of 'X', column by column)")
    ws = _array(arrays, "Ws", "float32", 2)
    wn = _array(arrays, "Wn", "float32", 2)
    _expect(ws.shape == wn.shape, f"arrays 'Ws' {ws.shape} and 'Wn' {wn.shape}: expected the "
            f"same shape (in x out)")
    _expect(x.shape[1] == ws.shape[0], f"array 'X' has {x.shape[1]} columns but 'Ws' has "
            f"{ws.shape[0]} rows (shapes {x.shape} and {ws.shape}); expected them equal")
    b = _array(arrays, "b", "float32", 1)
    _expect(b.shape[0] == ws.shape[1], f"array 'b' has {b.shape[0]} entries but 'Ws' has "
            f"{ws.shape[1]} columns; expected them equal")
    return x, m, ws, wn, b


def _pre(arrays: Arrays, with_ids: bool = True):
    """(X, M, Ws, Wn, the pre-activation ``X Ws + M Wn + b``, ids or None)."""
    x, m, ws, wn, b = _inputs(arrays)
    ids = _rows(arrays, "ids", "int64", x.shape[0], of="X") if with_ids else None
    return x, m, ws, wn, (x @ ws + m @ wn + b).astype(np.float32, copy=False), ids


def _grads(header: dict, x: np.ndarray, m: np.ndarray, ws: np.ndarray, wn: np.ndarray,
           dz: np.ndarray) -> Arrays:
    out = {"dWs": (x.T @ dz).astype(np.float32, copy=False),
           "dWn": (m.T @ dz).astype(np.float32, copy=False),
           "db": dz.sum(axis=0, dtype=np.float32)}
    if _field(header, "need_dX", bool, False):
        out["dX"] = (dz @ ws.T).astype(np.float32, copy=False)
        out["dM"] = (dz @ wn.T).astype(np.float32, copy=False)
    return out


def _sage_av(header: dict, arrays: Arrays) -> Arrays:
    *_, z, ids = _pre(arrays)
    return {"H": activate(header, z, ids)}


def _sage_av_grad(header: dict, arrays: Arrays) -> Arrays:
    x, m, ws, wn, z, ids = _pre(arrays)
    dh = _array(arrays, "dH", "float32", 2)
    return _grads(header, x, m, ws, wn, activate_grad(header, z, dh, ids))


def _sage_loss(header: dict, arrays: Arrays) -> Arrays:
    x, m, ws, wn, z, _ = _pre(arrays, with_ids=False)
    loss, dz = activated_loss(header, z, arrays, "columns of 'Ws'")
    out = _grads(header, x, m, ws, wn, dz)
    out["loss"] = np.array([loss], dtype=np.float32)
    return out


def _av_widths(header: dict, arrays: Arrays) -> dict[str, int]:
    return {"H": _array(arrays, "Ws", "float32", 2).shape[1]}


def _grad_widths(header: dict, arrays: Arrays) -> dict[str, int]:
    fin, fout = _array(arrays, "Ws", "float32", 2).shape
    out = {"dWs": fin * fout, "dWn": fin * fout, "db": fout, "loss": 1}
    if _field(header, "need_dX", bool, False):
        out.update(dX=fin, dM=fin)
    return out


TASKS: dict[str, Op] = {
    "sage_av": Op(_sage_av, inputs=("X", "M", "Ws", "Wn", "b", "ids"),
                  row_inputs=("X", "M", "ids"), row_outputs=("H",), sum_outputs=(),
                  out_widths=_av_widths),
    "sage_av_grad": Op(_sage_av_grad, inputs=("X", "M", "Ws", "Wn", "b", "ids", "dH"),
                       row_inputs=("X", "M", "ids", "dH"), row_outputs=("dX", "dM"),
                       sum_outputs=("dWs", "dWn", "db"), out_widths=_grad_widths),
    "sage_loss": Op(_sage_loss, inputs=("X", "M", "Ws", "Wn", "b", "labels", "weight"),
                    row_inputs=("X", "M", "labels", "weight"), row_outputs=("dX", "dM"),
                    sum_outputs=("loss", "dWs", "dWn", "db"), out_widths=_grad_widths),
}
