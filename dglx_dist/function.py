"""The edge functions a link-prediction scorer calls, by DGL's names (``dgl.function``'s
``u_add_v``, ``u_sub_v``, ``u_mul_v``, ``u_div_v``, ``u_dot_v``), written in torch, so that
a DGL scorer runs where DGL is not installed with one changed import::

    import dglx_dist.function as fn          # was: import dgl.function as fn

    with pair_graph.local_scope():
        pair_graph.ndata["h"] = h
        pair_graph.apply_edges(fn.u_dot_v("h", "h", "score"))
        return pair_graph.edata["score"][:, 0]

Each is a callable ``(edges) -> {out: rows}``, DGL's form of an edge function, so it also
runs on DGL's graphs (``apply_edges`` takes it as a user-defined function). ``u`` reads the
source nodes' ``lhs_field``, ``v`` the destination nodes' ``rhs_field``; the features'
shapes (the first dimension aside) broadcast as DGL's do, and ``dot`` keeps its reduced last
dimension as 1 (``(E, D)`` rows give ``(E, 1)``; one number per node gives one per edge).
"""
from __future__ import annotations

import dataclasses

import torch

from dglx_dist.errors import InvalidValueError

__all__ = ["EdgeFunction", "u_add_v", "u_sub_v", "u_mul_v", "u_div_v", "u_dot_v"]


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a * b).sum(-1, keepdim=True)


_OPS = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "dot": _dot}


@dataclasses.dataclass(frozen=True)
class EdgeFunction:
    """``op`` (a name of ``_OPS``) of each edge's source rows ``lhs_field`` and destination
    rows ``rhs_field``, written to the edges' ``out``."""

    op: str
    lhs_field: str
    rhs_field: str
    out: str

    def __call__(self, edges) -> dict[str, torch.Tensor]:
        a, b = edges.src[self.lhs_field], edges.dst[self.rhs_field]
        scalar = a.dim() == 1 and b.dim() == 1  # one number per node: one per edge
        a, b = _aligned(a.unsqueeze(-1) if scalar else a, b.unsqueeze(-1) if scalar else b)
        if self.op == "dot" and a.shape[-1] != b.shape[-1]:
            raise InvalidValueError(f"u_dot_v: the rows {self.lhs_field!r} have shape "
                                    f"{tuple(a.shape[1:])} and {self.rhs_field!r} "
                                    f"{tuple(b.shape[1:])}; expected the same last dimension")
        rows = _OPS[self.op](a, b)
        return {self.out: rows.squeeze(-1) if scalar else rows}


def _aligned(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``a`` and ``b`` with as many dimensions, the missing ones of a feature's shape added
    after the first (rows) dimension, as DGL broadcasts features."""
    more = b.dim() - a.dim()
    if more > 0:
        a = a.reshape(a.shape[0], *([1] * more), *a.shape[1:])
    elif more < 0:
        b = b.reshape(b.shape[0], *([1] * -more), *b.shape[1:])
    return a, b


def u_add_v(lhs_field: str, rhs_field: str, out: str) -> EdgeFunction:
    """Each edge's source ``lhs_field`` plus its destination ``rhs_field``, into ``out``."""
    return EdgeFunction("add", lhs_field, rhs_field, out)


def u_sub_v(lhs_field: str, rhs_field: str, out: str) -> EdgeFunction:
    """Each edge's source ``lhs_field`` minus its destination ``rhs_field``, into ``out``."""
    return EdgeFunction("sub", lhs_field, rhs_field, out)


def u_mul_v(lhs_field: str, rhs_field: str, out: str) -> EdgeFunction:
    """Each edge's source ``lhs_field`` times its destination ``rhs_field``, into ``out``."""
    return EdgeFunction("mul", lhs_field, rhs_field, out)


def u_div_v(lhs_field: str, rhs_field: str, out: str) -> EdgeFunction:
    """Each edge's source ``lhs_field`` over its destination ``rhs_field``, into ``out``."""
    return EdgeFunction("div", lhs_field, rhs_field, out)


def u_dot_v(lhs_field: str, rhs_field: str, out: str) -> EdgeFunction:
    """The dot product of each edge's source ``lhs_field`` and destination ``rhs_field`` over
    their last dimension (kept, as 1), into ``out``."""
    return EdgeFunction("dot", lhs_field, rhs_field, out)
