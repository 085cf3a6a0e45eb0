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
(bool, default False). The tasks are :func:`~dglx_dist.convs.ops_base.linear_tasks` of
``X Ws + M Wn + b``, as GCN's of ``A W + b``: they work row by row, so callers may chunk rows.
"""
from __future__ import annotations

import numpy as np

from dglx_dist.convs.ops_base import Arrays, Op, _array, _expect, linear_tasks

__all__ = ["TASKS"]


def _inputs(arrays: Arrays) -> tuple[list, list, np.ndarray]:
    """Validated [X, M] (n x in), [Ws, Wn] (in x out), b (out,)."""
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
    return [x, m], [ws, wn], b


TASKS: dict[str, Op] = linear_tasks(("sage_av", "sage_av_grad", "sage_loss"),
                                    (("X", "Ws"), ("M", "Wn")), "need_dX", _inputs,
                                    "columns of 'Ws'")
