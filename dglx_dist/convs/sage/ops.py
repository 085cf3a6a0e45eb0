"""The tensor tasks of a GraphSAGE layer (``SAGEConv``, aggregator "mean"): GCN's three
(:mod:`dglx_dist.convs.graphconv.ops`) with the rows' own part kept, both
:func:`~dglx_dist.convs.ops_base.linear_tasks`.

A mean SAGEConv computes ``rst_v = x_v Ws + mean_{u -> v}(x_u) Wn + b``; the graph server
computes ``M``, the mean of each row's in-neighbours (zero without in-edges, as in DGL), and
the tasks the rest: ``sage_av`` ``H = dropout(act(X Ws + M Wn + b))``, ``sage_av_grad`` the
gradients of ``Ws``, ``Wn``, ``b`` and (``need_dX``) of ``X`` and ``M`` (which the graph
server sends back to the neighbours divided by the row's in-degree), ``sage_loss`` the last
layer's apply (``act`` default "none") fused with the loss and its backward.

Arrays: ``X`` and ``M`` (rows x in), ``Ws`` and ``Wn`` (in x out: the transposed
``fc_self.weight`` and ``fc_neigh.weight``), ``b`` (out), ``ids`` (int64 per row), ``dH``
(rows x out), ``labels``/``weight`` (the loss). Header fields: ``act``, ``dropout``, ``seed``,
``train`` as for GCN's ``av``; ``need_dX`` (bool, default False).
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
