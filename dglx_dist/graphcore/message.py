"""Messages over a block's edges in torch: DGL's ``dgl.ops`` that the convs' adapters use.

Each function takes a block (the package's :class:`~dglx_dist.graphcore.block.Block` or DGL's:
both give ``edges()``, ``num_src_nodes()`` and ``num_dst_nodes()``) and rows of its sources,
and gives rows of its destinations, as DGL's functions of the same names do: ``copy_u_sum``
sums each destination's sources' rows, ``u_mul_e_sum`` each row times its edge's weight,
``copy_u_max`` / ``u_mul_e_max`` take the largest (``-inf`` where a destination has no
in-edge, as DGL's); ``edge_softmax`` normalizes a score per edge over each destination's
in-edges (DGL's ``dgl.nn.functional.edge_softmax``); ``copy_e_sum`` sums each
destination's in-edges' rows. On DGL's blocks, DGL's own kernels; on the package's, the sums
are :mod:`~dglx_dist.graphcore.aggregate`'s fused gather-sums over the block's kept
:class:`~dglx_dist.graphcore.aggregate.Layout` (no row per edge made, but for a weight's
gradient; as fast as DGL's kernel on this CPU, and its float32 results: bit for bit without
per-edge weights, within rounding with them), the
largest and the softmax torch's ``scatter_reduce`` and ``index_add`` (a row per edge; their
rows are narrow in the convs here: GAT's scores, one per head), on any device.
"""
from __future__ import annotations

import torch

from dglx_dist.graphcore.aggregate import copy_e_sum as _copy_e_sum
from dglx_dist.graphcore.aggregate import layout_of, sum_by_dst, weighted_sum_by_dst

__all__ = ["in_degrees", "out_degrees", "copy_u_sum", "u_mul_e_sum", "copy_u_max",
           "u_mul_e_max", "edge_softmax", "copy_e_sum"]


def in_degrees(block) -> torch.Tensor:
    """Each destination's in-edges in the block."""
    if _of_dgl(block):
        return torch.bincount(block.edges()[1].long(), minlength=block.num_dst_nodes())
    return layout_of(block).in_degrees


def out_degrees(block) -> torch.Tensor:
    """Each source's out-edges in the block."""
    if _of_dgl(block):
        return torch.bincount(block.edges()[0].long(), minlength=block.num_src_nodes())
    return layout_of(block).out_degrees


def copy_u_sum(block, h: torch.Tensor) -> torch.Tensor:
    return u_mul_e_sum(block, h, None)


def u_mul_e_sum(block, h: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    """Each destination's sum of its sources' rows, each times its edge's ``weight`` (a row
    per edge, broadcast over the row's width; None: 1)."""
    if _of_dgl(block):  # DGL's kernel, on DGL's block: no row per edge held
        import dgl  # noqa: PLC0415 - the edge

        return dgl.ops.copy_u_sum(block, h) if weight is None else \
            dgl.ops.u_mul_e_sum(block, h, weight.to(h))
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
    if _of_dgl(block):
        import dgl  # noqa: PLC0415 - the edge

        return dgl.ops.copy_e_sum(block, rows)
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
    if _of_dgl(block):
        import dgl  # noqa: PLC0415 - the edge

        return dgl.ops.copy_u_max(block, h) if weight is None else \
            dgl.ops.u_mul_e_max(block, h, weight.to(h))
    src, dst = (x.long() for x in block.edges())  # no grouping built for a max alone
    return _max_per_dst(block, dst, _messages(h, src, weight))


def edge_softmax(block, logits: torch.Tensor) -> torch.Tensor:
    """Softmax of ``logits`` (a row per edge, any trailing shape: one per head) over each
    destination's in-edges, elementwise; each destination's largest logit is subtracted
    first, so large logits do not overflow (the gradient is the softmax's: the shift is a
    constant to it)."""
    if _of_dgl(block):
        from dgl.nn.functional import edge_softmax as dgl_edge_softmax  # noqa: PLC0415

        return dgl_edge_softmax(block, logits)
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


def _of_dgl(block) -> bool:
    return type(block).__module__.startswith("dgl.")


def _messages(h: torch.Tensor, src: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    msg = h.index_select(0, src)
    return msg if weight is None else msg * weight.to(msg)
