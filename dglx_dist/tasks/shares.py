"""How the link task splits a graph's undirected pairs (:func:`dglx_dist.tasks.link.split_pairs`),
without torch: the plan (:mod:`dglx_dist.planner`) counts the link task's training edges with
it."""
from __future__ import annotations

__all__ = ["HELDOUT", "split_sizes"]

HELDOUT = (0.05, 0.10)
"""The shares of the pairs held out for validation and for test."""


def split_sizes(pairs: int) -> tuple[int, int, int]:
    """(validation, test, training) pairs of ``pairs`` undirected pairs."""
    val, test = (int(share * pairs) for share in HELDOUT)
    return val, test, pairs - val - test
