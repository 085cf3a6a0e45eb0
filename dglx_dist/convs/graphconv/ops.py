"""The tensor tasks of a GCN layer, as pure functions of a header and float32 arrays.

Tasks keep nothing between invocations: the backward task recomputes ``Z = A @ W + b`` and the
dropout mask from its inputs (tensor rematerialisation), and the last layer's forward and
backward run as one task (task fusion). Every task works row by row, so callers may chunk the
rows: they are :func:`~dglx_dist.convs.ops_base.linear_tasks` of ``Z = A @ W + b``.

Header fields:
    av:       act ("relu" | "none", required), dropout (float in [0, 1), default 0.0),
              seed (int, default 0), train (bool, default False)
    av_grad:  act (required), dropout, seed as for av; need_dA (bool, default False)
    av_loss:  act (default "none": the conv's own activation on the logits), need_dA (bool,
              default False)
"""
from __future__ import annotations

import numpy as np

from dglx_dist.convs.ops_base import Arrays, Op, _array, _expect, linear_tasks

__all__ = ["TASKS"]


def _linear(arrays: Arrays) -> tuple[list, list, np.ndarray]:
    """Validated [A] (n x fin), [W] (fin x fout), b (fout,)."""
    a = _array(arrays, "A", "float32", 2)
    w = _array(arrays, "W", "float32", 2)
    b = _array(arrays, "b", "float32", 1)
    _expect(a.shape[1] == w.shape[0], f"array 'A' has {a.shape[1]} columns but 'W' has "
            f"{w.shape[0]} rows (shapes {a.shape} and {w.shape}); expected them equal")
    _expect(b.shape[0] == w.shape[1], f"array 'b' has {b.shape[0]} entries but 'W' has "
            f"{w.shape[1]} columns; expected them equal")
    return [a], [w], b


TASKS: dict[str, Op] = linear_tasks(("av", "av_grad", "av_loss"), (("A", "W"),), "need_dA",
                                    _linear, "columns of 'W'")
