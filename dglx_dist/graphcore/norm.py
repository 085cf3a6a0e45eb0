"""GraphConv's degree normalisation and its weight, said once for its adapter
(:mod:`.adapter`), its dorylus stages (:mod:`.dorylus`) and dorylus's graph server.

A source row is multiplied by ``out_deg^-p_src`` before the sum over in-edges and a
destination row by ``in_deg^-p_dst`` after it, with ``(p_src, p_dst)`` from the conv's
``norm`` (:func:`norm_powers`, :func:`degree_factor`). Nothing is imported: the functions work
on whatever tensors and convs they are given.
"""
from __future__ import annotations

__all__ = ["degree_factor", "norm_powers", "weight_problem"]

_POWERS = {"both": (0.5, 0.5), "left": (1.0, 0.0), "right": (0.0, 1.0), "none": (0.0, 0.0)}


def norm_powers(norm: str) -> tuple[float, float]:
    """GraphConv's degree exponents ``(p_src, p_dst)`` for its ``norm``."""
    return _POWERS[norm]


def degree_factor(deg, power: float):
    """``deg^-power`` per node, a degree of 0 counting as 1 (as GraphConv does)."""
    return deg.clamp(min=1).pow(-power)


def weight_problem(conv) -> str | None:
    """What keeps a GraphConv from having its weight as a parameter, or None."""
    if conv.weight is None:
        return ("weight=False (its weight is a forward argument, not a parameter: build it "
                "with weight=True)")
    return None
