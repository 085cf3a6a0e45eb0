"""Messages over a block's edges in torch: DGL's ``dgl.ops`` that the convs' adapters use.

Each function takes a block (the package's :class:`~dglx_dist.graphcore.block.Block`; any graph
that gives ``edges()``, ``num_src_nodes()`` and ``num_dst_nodes()`` reads the same, DGL's block
included) and rows of its sources, and gives rows of its destinations, as DGL's functions of
the same names do: ``copy_u_sum`` sums each destination's sources' rows, ``u_mul_e_sum`` each
row times its edge's weight, ``copy_u_max`` / ``u_mul_e_max`` take the largest (``-inf``
where a destination has no in-edge, as DGL's); ``edge_softmax`` normalizes a score per edge
over each destination's in-edges (DGL's ``dgl.nn.functional.edge_softmax``); ``copy_e_sum``
sums each destination's in-edges' rows. The sums are
:mod:`~dglx_dist.graphcore.aggregate`'s fused gather-sums over the block's kept
:class:`~dglx_dist.graphcore.aggregate.Layout` (no row per edge made, but for a weight's
gradient; as fast as DGL's kernel on this CPU, and its float32 results: bit for bit without
per-edge weights, within rounding with them), the largest and the softmax torch's
``scatter_reduce`` and ``index_add`` (a row per edge; their rows are narrow in the convs
here: GAT's scores, one per head), on any device.
"""
from __future__ import annotations

import dataclasses
import re

import torch

from dglx_dist.errors import InvalidValueError

from dglx_dist.graphcore.aggregate import copy_e_sum as _copy_e_sum
from dglx_dist.graphcore.aggregate import layout_of, sum_by_dst, weighted_sum_by_dst

__all__ = ["in_degrees", "out_degrees", "copy_u_sum", "u_mul_e_sum", "copy_u_max",
           "u_mul_e_max", "edge_softmax", "copy_e_sum", "EdgeFunction", "edge_function"]


def in_degrees(block) -> torch.Tensor:
    """Each destination's in-edges in the block."""
    return layout_of(block).in_degrees


def out_degrees(block) -> torch.Tensor:
    """Each source's out-edges in the block."""
    return layout_of(block).out_degrees


def copy_u_sum(block, h: torch.Tensor) -> torch.Tensor:
    return u_mul_e_sum(block, h, None)


def u_mul_e_sum(block, h: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    """Each destination's sum of its sources' rows, each times its edge's ``weight`` (a row
    per edge, broadcast over the row's width; None: 1)."""
    layout = layout_of(block)
    if weight is None:
        return sum_by_dst(layout, h)
    weight = weight.to(h)
    if weight.numel() == layout.num_edges:  # one weight per edge, over the whole row
        return weighted_sum_by_dst(layout, h, weight)
    heads = _per_head(weight, h)
    if heads is not None:  # GAT's attention: a weight per edge and head
        w, rows = heads
        out = torch.stack([weighted_sum_by_dst(layout, rows[:, k], w[:, k])
                           for k in range(w.shape[1])], 1)
        return out.view(out.shape[0], *h.shape[1:])
    src, dst = layout.edge_src, layout.edge_dst  # any other broadcast: a row per edge
    out = h.new_zeros((block.num_dst_nodes(), *h.shape[1:]))
    return out.index_add(0, dst, _messages(h, src, weight))


def copy_e_sum(block, rows: torch.Tensor) -> torch.Tensor:
    """Each destination's sum of its in-edges' ``rows`` (a row per edge, in edge order)."""
    return _copy_e_sum(layout_of(block), rows)


def _per_head(weight: torch.Tensor, h: torch.Tensor):
    """``weight`` (edges, ..., 1) and ``h`` (sources, ..., width) with the same middle dims
    (GAT's heads) as (edges, heads) and (sources, heads, width); None for any other shape."""
    if weight.dim() != h.dim() or weight.dim() < 3 or weight.shape[-1] != 1 or \
            weight.shape[1:-1] != h.shape[1:-1]:
        return None
    return weight.reshape(weight.shape[0], -1), h.reshape(h.shape[0], -1, h.shape[-1])


def copy_u_max(block, h: torch.Tensor) -> torch.Tensor:
    return u_mul_e_max(block, h, None)


def u_mul_e_max(block, h: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    """Each destination's elementwise largest of its sources' rows (times ``weight``);
    ``-inf`` where it has no in-edge."""
    src, dst = (x.long() for x in block.edges())  # no grouping built for a max alone
    return _max_per_dst(block, dst, _messages(h, src, weight))


def edge_softmax(block, logits: torch.Tensor) -> torch.Tensor:
    """Softmax of ``logits`` (a row per edge, any trailing shape: one per head) over each
    destination's in-edges, elementwise; each destination's largest logit is subtracted
    first, so large logits do not overflow (the gradient is the softmax's: the shift is a
    constant to it)."""
    dst = layout_of(block).edge_dst
    top = _max_per_dst(block, dst, logits.detach()).index_select(0, dst)
    exp = (logits - top).exp()
    total = exp.new_zeros((block.num_dst_nodes(), *exp.shape[1:])).index_add(0, dst, exp)
    return exp / total.index_select(0, dst)


def _max_per_dst(block, dst: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Each destination's elementwise largest of the rows of its in-edges (-inf: none)."""
    out = rows.new_full((block.num_dst_nodes(), *rows.shape[1:]), float("-inf"))
    index = dst.view(-1, *([1] * (rows.dim() - 1))).expand_as(rows)
    return out.scatter_reduce(0, index, rows, "amax", include_self=True)


def _messages(h: torch.Tensor, src: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    msg = h.index_select(0, src)
    return msg if weight is None else msg * weight.to(msg)


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a * b).sum(-1, keepdim=True)


_OPS = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "dot": _dot}


@dataclasses.dataclass(frozen=True)
class EdgeFunction:
    """``op`` (a name of ``_OPS``) of each edge's source rows ``lhs_field`` and destination
    rows ``rhs_field``, written to the edges' ``out``: ``dgl.function``'s ``u_<op>_v``
    (:mod:`dglx_dist.function` makes them)."""

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


_DGLS = re.compile(r"u_(add|sub|mul|div|dot)_v")


def edge_function(func):
    """``func`` as a graph's ``apply_edges`` runs it: DGL's builtin ``dgl.function.u_<op>_v``
    (read by its fields, without DGL) as the :class:`EdgeFunction` of the same op; anything
    else as it is."""
    match = _DGLS.fullmatch(str(getattr(func, "name", "")))
    if callable(func) or match is None or not hasattr(func, "out_field"):
        return func
    return EdgeFunction(match.group(1), func.lhs_field, func.rhs_field, func.out_field)
