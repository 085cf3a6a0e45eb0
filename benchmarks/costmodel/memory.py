"""How a rank's memory grows with the graph: each strategy's peak resident memory per rank,
measured at several graph sizes, fitted as ``base + a x nodes per rank + b x edges per rank``,
and the largest graph of a given degree that fits a machine (``benchmarks/cluster_model.py
memory``). The fit is a :class:`dglx_dist.memory.MemoryModel`, the form in which each strategy
carries its own measured fit (a ``Costed`` strategy's ``cost.memory``) for ``dglx train``'s
refusal."""
from __future__ import annotations

import numpy as np

from dglx_dist.errors import InvalidValueError
from dglx_dist.memory import MemoryModel

__all__ = ["fit_memory", "parse_sizes"]

MB = 1 << 20


def parse_sizes(text: str) -> list[tuple[int, int]]:
    """``NODES:EDGES,...`` (at least 3, for a fit of three coefficients)."""
    try:
        sizes = [tuple(int(x) for x in item.split(":")) for item in text.split(",")]
    except ValueError:
        sizes = []
    if len(sizes) < 3 or any(len(s) != 2 or min(s) < 1 for s in sizes):
        raise InvalidValueError(f"--sizes {text!r}: expected at least 3 NODES:EDGES pairs, e.g. "
                                f"100000:1500000,300000:9000000,1000000:20000000")
    return sizes


def fit_memory(points: list[tuple[float, float, float]]) -> MemoryModel:
    """The least-squares fit of ``(nodes per rank, edges per rank, peak bytes)`` points, every
    coefficient at least 0 (scipy's non-negative least squares: noise in a few measured peaks
    must not make a node cost negative bytes). Columns are scaled to unit size for the solver."""
    from scipy.optimize import nnls

    a = np.array([[1.0, n, e] for n, e, _ in points])
    y = np.array([p for _, _, p in points])
    scale = np.abs(a).max(axis=0)
    coef, _ = nnls(a / scale, y)
    base, per_node, per_edge = coef / scale
    return MemoryModel(float(base), float(per_node), float(per_edge))
