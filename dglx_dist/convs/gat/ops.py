"""The tensor tasks of a GAT layer (``GATConv``), as pure functions of float32 arrays.

A GATConv layer with H heads of F features computes ``z = x W`` (W: ``in x H*F``), per head
``el = <z, attn_l>`` and ``er = <z, attn_r>``, per edge ``s = el_u + er_v``,
``e = leaky_relu(s, 0.2)``, ``α = softmax of e over each destination's in-edges`` and
``out_v = Σ_u α_uv z_u``, then adds its bias. The graph server does the sums over edges; the
tasks here do the rest:

* ``gat_av`` (ApplyVertex): the previous layer's bias, ELU and feature dropout on the gathered
  rows (layer 0: dropout only), then ``z``, ``el``, ``er``.
* ``gat_ae`` (ApplyEdge): attention ``α`` of every in-edge of the interval's destinations
  (with attention dropout in training: a hash of (seed, edge key, head), the keys sent along).
* ``gat_ae_grad``: from ``dα`` to ``ds`` per edge (dropout, softmax and leaky ReLU backward,
  the scores recomputed from ``el`` and ``er``) and ``der`` per destination.
* ``gat_av_grad``: from ``dz`` (``Σ_v α_uv dout_v``), ``del`` and ``der`` to the gradients of
  ``W``, ``attn_l``, ``attn_r`` and, for layers after the first, of the previous layer's bias
  and gathered rows (input, ELU and dropout recomputed: tasks are stateless).
* ``gat_loss``: the last layer's bias, the mean over heads, weighted cross entropy and its
  backward (fused); ``gat_out``: the logits only; ``gat_out_grad``: from given logit
  gradients ``dH`` to the last layer's bias and gathered rows (a loop of one's own).

Edges arrive grouped by destination: ``ptr`` (int64, ``n + 1`` entries, ``ptr[0] = 0``,
non-decreasing, ``ptr[n] = E``) says which rows of the per-edge arrays belong to destination
row v (``ptr[v]:ptr[v+1]``); a destination without in-edges gets no attention and ``der = 0``.
The per-edge tasks cannot be split by rows alone (their edge arrays would need re-cutting at
``ptr``), so their :class:`~dglx_dist.convs.ops_base.Op` says ``chunkable=False``; the vertex
tasks chunk by rows like the GCN ones (the dropout mask hashes (seed, node id, column)).

Header fields: ``heads`` (int, required by the vertex tasks), ``prev`` ("none" | "elu",
default "none"), ``dropout``/``seed``/``train`` as for ``av`` (feature dropout in the vertex
tasks, attention dropout in the edge tasks, which then need ``keys``: int64 per edge),
``need_dX`` (bool).
"""
from __future__ import annotations

import numpy as np

from dglx_dist.convs.ops_base import (Arrays, Op, PayloadError, _array, _dropout, _expect, _field,
                                      _rows, dropout_scale, weighted_cross_entropy)

__all__ = ["TASKS", "segment_softmax"]

_SLOPE = np.float32(0.2)  # GATConv's default negative_slope
_PREVS = ("none", "elu")


def _heads(header: dict, width: int, what: str) -> int:
    h = _field(header, "heads", int)
    _expect(h >= 1 and width % h == 0, f"header field 'heads': got {h}, expected a positive "
            f"divisor of the {width} columns of {what}")
    return h


def _ptr(arrays: Arrays, n: int, edges: int) -> np.ndarray:
    ptr = _array(arrays, "ptr", "int64", 1)
    _expect(ptr.shape[0] == n + 1, f"array 'ptr' has {ptr.shape[0]} entries, expected "
            f"{n + 1} (one per destination row, plus one)")
    _expect(ptr[0] == 0 and ptr[-1] == edges, f"array 'ptr' runs from {ptr[0]} to {ptr[-1]}, "
            f"expected 0 to {edges} (the rows of the per-edge arrays)")
    _expect(bool(np.all(ptr[1:] >= ptr[:-1])), "array 'ptr' decreases somewhere; expected "
            "non-decreasing offsets")
    return ptr


def _segments(ptr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(destination of every edge, destinations with in-edges, where their edges start)."""
    deg = np.diff(ptr)
    dst = np.repeat(np.arange(deg.size), deg)
    busy = np.flatnonzero(deg)
    return dst, busy, ptr[:-1][busy]


def _segment_sum(x: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """Sum of each destination's edge rows (0 for a destination without edges)."""
    _, busy, starts = _segments(ptr)
    out = np.zeros((ptr.size - 1,) + x.shape[1:], dtype=x.dtype)
    if busy.size:  # reduceat over non-empty segments only: an empty one would yield x[start]
        out[busy] = np.add.reduceat(x, starts, axis=0)
    return out


def segment_softmax(e: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """Softmax of the edge rows ``e`` over each destination's segment (per column)."""
    dst, busy, starts = _segments(ptr)
    if not busy.size:
        return np.zeros_like(e)
    top = np.zeros((ptr.size - 1,) + e.shape[1:], dtype=e.dtype)
    top[busy] = np.maximum.reduceat(e, starts, axis=0)
    ex = np.exp(e - top[dst])
    return ex / _segment_sum(ex, ptr)[dst]


def _scores(arrays: Arrays) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validated (s per edge, ptr, destination per edge) from EL, ER and ptr."""
    el = _array(arrays, "EL", "float32", 2)
    er = _array(arrays, "ER", "float32", 2)
    _expect(el.shape[1] == er.shape[1], f"arrays 'EL' {el.shape} and 'ER' {er.shape}: "
            f"expected the same number of heads (columns)")
    ptr = _ptr(arrays, er.shape[0], el.shape[0])
    dst = _segments(ptr)[0]
    return el + er[dst], ptr, dst


def _leaky(s: np.ndarray) -> np.ndarray:
    return np.where(s > 0, s, s * _SLOPE)


def _attn_keep(header: dict, arrays: Arrays, edges: int, heads: int) -> np.ndarray | None:
    """Attention dropout's keep scale per (edge, head) in training, else None. The mask hashes
    (seed, edge key, head); an edge's key is the caller's (e.g. source id * N + destination
    id), so the forward and backward tasks agree on it."""
    p, seed = _dropout(header)
    if not (_field(header, "train", bool, False) and p > 0):
        return None
    keys = _rows(arrays, "keys", "int64", edges)
    return dropout_scale(seed, keys, heads, p)


def _gat_ae(header: dict, arrays: Arrays) -> Arrays:
    s, ptr, _ = _scores(arrays)
    alpha = segment_softmax(_leaky(s), ptr)
    keep = _attn_keep(header, arrays, *s.shape)
    if keep is not None:
        alpha = alpha * keep
    return {"A": alpha.astype(np.float32, copy=False)}


def _gat_ae_grad(header: dict, arrays: Arrays) -> Arrays:
    s, ptr, dst = _scores(arrays)
    da = _array(arrays, "dA", "float32", 2)
    _expect(da.shape == s.shape, f"array 'dA' has shape {da.shape}, expected {s.shape} "
            f"(rows of 'EL' x heads)")
    keep = _attn_keep(header, arrays, *s.shape)
    if keep is not None:  # dA is the gradient of the dropped attention
        da = da * keep
    alpha = segment_softmax(_leaky(s), ptr)
    de = alpha * (da - _segment_sum(alpha * da, ptr)[dst])
    ds = (de * np.where(s > 0, np.float32(1), _SLOPE)).astype(np.float32, copy=False)
    return {"DS": ds, "dER": _segment_sum(ds, ptr)}


def _attn(arrays: Arrays, name: str, heads: int, feats: int) -> np.ndarray:
    a = _array(arrays, name, "float32", 2)
    _expect(a.shape == (heads, feats), f"array {name!r} has shape {a.shape}, expected "
            f"({heads}, {feats}) (heads x features per head)")
    return a


def _vertex_inputs(header: dict, arrays: Arrays):
    """Validated X, W, attn_l, attn_r, ids and (H, F)."""
    x = _array(arrays, "X", "float32", 2)
    w = _array(arrays, "W", "float32", 2)
    _expect(x.shape[1] == w.shape[0], f"array 'X' has {x.shape[1]} columns but 'W' has "
            f"{w.shape[0]} rows (shapes {x.shape} and {w.shape}); expected them equal")
    h = _heads(header, w.shape[1], "'W'")
    f = w.shape[1] // h
    ids = _rows(arrays, "ids", "int64", x.shape[0])
    return x, w, _attn(arrays, "al", h, f), _attn(arrays, "ar", h, f), ids, h, f


def _prev(header: dict, arrays: Arrays, x: np.ndarray):
    """The layer's input: the previous layer's bias and ELU (``prev="elu"``), then dropout.

    Returns (input, pre-activation or None, keep scale or None)."""
    prev = _field(header, "prev", str, "none")
    if prev not in _PREVS:
        raise PayloadError(f"header field 'prev': got {prev!r}, expected one of {list(_PREVS)}")
    pre = None
    if prev == "elu":
        b = _array(arrays, "bprev", "float32", 1)
        _expect(b.shape[0] == x.shape[1], f"array 'bprev' has {b.shape[0]} entries, "
                f"expected one per column of 'X' ({x.shape[1]})")
        pre = x + b
        x = np.where(pre > 0, pre, np.expm1(np.minimum(pre, 0)))
    p, seed = _dropout(header)
    scale = None
    if _field(header, "train", bool, False) and p > 0:
        scale = dropout_scale(seed, arrays["ids"], x.shape[1], p)
        x = x * scale
    return x.astype(np.float32, copy=False), pre, scale


def _gat_av(header: dict, arrays: Arrays) -> Arrays:
    x, w, al, ar, _, h, f = _vertex_inputs(header, arrays)
    inp, _, _ = _prev(header, arrays, x)
    z = (inp @ w).astype(np.float32, copy=False)
    zh = z.reshape(-1, h, f)
    return {"Z": z, "EL": (zh * al).sum(-1, dtype=np.float32),
            "ER": (zh * ar).sum(-1, dtype=np.float32)}


def _gat_av_grad(header: dict, arrays: Arrays) -> Arrays:
    x, w, al, ar, _, h, f = _vertex_inputs(header, arrays)
    n = x.shape[0]
    dz = _array(arrays, "dZ", "float32", 2)
    _expect(dz.shape == (n, h * f), f"array 'dZ' has shape {dz.shape}, expected {(n, h * f)}")
    d_el, d_er = (_array(arrays, k, "float32", 2) for k in ("dEL", "dER"))
    for k, d in (("dEL", d_el), ("dER", d_er)):
        _expect(d.shape == (n, h), f"array {k!r} has shape {d.shape}, expected {(n, h)}")
    inp, pre, scale = _prev(header, arrays, x)
    zh = (inp @ w).reshape(n, h, f)
    total = dz.reshape(n, h, f) + d_el[:, :, None] * al + d_er[:, :, None] * ar
    total = total.reshape(n, h * f).astype(np.float32, copy=False)
    out = {"dW": (inp.T @ total).astype(np.float32, copy=False),
           "dal": (d_el[:, :, None] * zh).sum(0, dtype=np.float32),
           "dar": (d_er[:, :, None] * zh).sum(0, dtype=np.float32)}
    if _field(header, "need_dX", bool, False):
        dx = total @ w.T
        if scale is not None:
            dx = dx * scale
        if pre is not None:
            dx = dx * np.where(pre > 0, np.float32(1), np.exp(np.minimum(pre, 0)))
            out["dbprev"] = dx.sum(0, dtype=np.float32)
        out["dX"] = dx.astype(np.float32, copy=False)
    return out


def _head_logits(header: dict, arrays: Arrays) -> tuple[np.ndarray, int]:
    x = _array(arrays, "X", "float32", 2)
    b = _array(arrays, "b", "float32", 1)
    _expect(b.shape[0] == x.shape[1], f"array 'b' has {b.shape[0]} entries, expected one "
            f"per column of 'X' ({x.shape[1]})")
    h = _heads(header, x.shape[1], "'X'")
    return (x + b).reshape(x.shape[0], h, -1).mean(1), h


def _gat_out(header: dict, arrays: Arrays) -> Arrays:
    return {"H": _head_logits(header, arrays)[0].astype(np.float32, copy=False)}


def _gat_loss(header: dict, arrays: Arrays) -> Arrays:
    z, h = _head_logits(header, arrays)
    loss, dz = weighted_cross_entropy(z, arrays, "the output layer's width")
    return {"loss": np.array([loss], dtype=np.float32), **_spread_heads(dz, h)}


def _gat_out_grad(header: dict, arrays: Arrays) -> Arrays:
    dh = _array(arrays, "dH", "float32", 2)
    h = _field(header, "heads", int)
    _expect(h >= 1, f"header field 'heads': got {h}, expected >= 1")
    return _spread_heads(dh, h)


def _spread_heads(dz: np.ndarray, h: int) -> Arrays:
    """The last layer's bias and row gradients from its logits' ``dz``: the mean over ``h``
    heads spreads it evenly."""
    dx = np.tile(dz / np.float32(h), (1, h)).astype(np.float32, copy=False)
    return {"db": dx.sum(0, dtype=np.float32), "dX": dx}


def _w(arrays: Arrays) -> tuple[int, int]:
    return _array(arrays, "W", "float32", 2).shape


def _av_widths(header: dict, arrays: Arrays) -> dict[str, int]:
    fout, h = _w(arrays)[1], _field(header, "heads", int)
    return {"Z": fout, "EL": h, "ER": h}


def _av_grad_widths(header: dict, arrays: Arrays) -> dict[str, int]:
    fin, fout = _w(arrays)
    return {"dW": fin * fout, "dal": fout, "dar": fout, "dbprev": fin, "dX": fin}


def _loss_widths(header: dict, arrays: Arrays) -> dict[str, int]:
    width = _array(arrays, "X", "float32", 2).shape[1]
    return {"loss": 1, "db": width, "dX": width,
            "H": width // max(1, _field(header, "heads", int))}


def _out_grad_widths(header: dict, arrays: Arrays) -> dict[str, int]:
    width = _array(arrays, "dH", "float32", 2).shape[1] * _field(header, "heads", int)
    return {"db": width, "dX": width}


TASKS: dict[str, Op] = {
    "gat_av": Op(_gat_av, inputs=("X", "W", "al", "ar", "ids"), row_inputs=("X", "ids"),
                 row_outputs=("Z", "EL", "ER"), sum_outputs=(), out_widths=_av_widths),
    "gat_ae": Op(_gat_ae, inputs=("EL", "ER", "ptr"), row_inputs=(), row_outputs=(),
                 sum_outputs=(), chunkable=False),
    "gat_ae_grad": Op(_gat_ae_grad, inputs=("EL", "ER", "ptr", "dA"), row_inputs=(),
                      row_outputs=(), sum_outputs=(), chunkable=False),
    "gat_av_grad": Op(_gat_av_grad, inputs=("X", "W", "al", "ar", "ids", "dZ", "dEL", "dER"),
                      row_inputs=("X", "ids", "dZ", "dEL", "dER"), row_outputs=("dX",),
                      sum_outputs=("dW", "dal", "dar", "dbprev"), out_widths=_av_grad_widths),
    "gat_loss": Op(_gat_loss, inputs=("X", "b", "labels", "weight"),
                   row_inputs=("X", "labels", "weight"), row_outputs=("dX",),
                   sum_outputs=("loss", "db"), out_widths=_loss_widths),
    "gat_out_grad": Op(_gat_out_grad, inputs=("dH",), row_inputs=("dH",), row_outputs=("dX",),
                       sum_outputs=("db",), out_widths=_out_grad_widths),
    "gat_out": Op(_gat_out, inputs=("X", "b"), row_inputs=("X",), row_outputs=("H",),
                  sum_outputs=(), out_widths=_loss_widths),
}
