"""Sums over a block's edges by destination, without a row per edge: the kernels behind
:mod:`~dglx_dist.graphcore.message` on the package's blocks.

A block's :class:`Layout` is its edges grouped by destination (each group in edge order, as
DGL's in-edge CSR has them) and, for the backward, by source (sorted when a backward first
asks); it is built once per block and kept on it
(:attr:`~dglx_dist.graphcore.block.Block.layout`: the block is the batch, so the layout goes
where the batch goes and is dropped with it).

Each sum is an autograd function whose forward and backward are both one fused gather-sum,
the backward over the reversed layout:

- without weights, ``embedding_bag(mode="sum")`` over the grouped sources;
- with one weight per edge, a CSR product (``torch.sparse.mm``) whose values are the
  weights; ``embedding_bag``'s ``per_sample_weights`` would do it too, but on CPU it
  multiplies and adds in one rounding (fused multiply-add), so float32 sums differ from
  DGL's in the last bits, while the CSR product rounds the product and the sum apart, as
  DGL's kernel and ``index_add`` of weighted rows do;
- ``copy_e_sum`` (a row per edge already made: R-GCN's messages) is ``embedding_bag`` over
  the edges in their groups' order, its backward each edge's destination's gradient row.

Each destination adds its rows in edge order, one after the other, as DGL's CPU kernels and
``index_add`` do: on CPU the float32 sums without per-edge weights are DGL's bit for bit;
with them, MKL's CSR product adds in an order that depends on the CPU (DGL's bit for bit on
an AVX2 CPU, a few ulps apart on an AVX-512 one; checked in tests/unit/test_aggregate.py).
"""
from __future__ import annotations

import dataclasses
import functools
import warnings

import torch
from torch.nn import functional as F

from dglx_dist.graphcore.block import group_by, in_order

__all__ = ["Layout", "layout_of", "sum_by_dst", "weighted_sum_by_dst", "copy_e_sum"]


@dataclasses.dataclass(frozen=True)
class Layout:
    """A block's edges grouped by destination and, on first use, by source.

    Attributes:
        order: the edge ids grouped by destination (stable: edge order in each group).
        src: each of those edges' source (``src[order]``).
        offsets: where each destination's group starts in ``order`` (and the end: D + 1).
        edge_src: each edge's source, in edge order (int64).
        edge_dst: each edge's destination, in edge order (int64).
        num_src: the block's source nodes (S).

    The grouping by source (:attr:`rorder`, :attr:`rdst`, :attr:`roffsets`) is what a sum's
    backward reads; it is sorted the first time a backward asks, so a layer whose input needs
    no gradient (the first layer's features) and evaluation never sort the sources.
    """

    order: torch.Tensor
    src: torch.Tensor
    offsets: torch.Tensor
    edge_src: torch.Tensor
    edge_dst: torch.Tensor
    num_src: int

    @classmethod
    def of_edges(cls, src: torch.Tensor, dst: torch.Tensor, num_src: int,
                 num_dst: int) -> "Layout":
        src, dst = src.long(), dst.long()
        order, offsets = group_by(dst, num_dst)
        return cls(_positions(order, src), in_order(src, order), offsets, src, dst, num_src)

    @functools.cached_property
    def _by_source(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        rorder, roffsets = group_by(self.edge_src, self.num_src)
        return _positions(rorder, self.edge_src), in_order(self.edge_dst, rorder), roffsets

    @property
    def rorder(self) -> torch.Tensor:
        """The edge ids grouped by source (stable)."""
        return self._by_source[0]

    @property
    def rdst(self) -> torch.Tensor:
        """Each of :attr:`rorder`'s edges' destination (``dst[rorder]``)."""
        return self._by_source[1]

    @property
    def roffsets(self) -> torch.Tensor:
        """Where each source's group starts in :attr:`rorder` (S + 1)."""
        return self._by_source[2]

    @property
    def in_degrees(self) -> torch.Tensor:
        return self.offsets.diff()

    @property
    def out_degrees(self) -> torch.Tensor:
        return torch.bincount(self.edge_src, minlength=self.num_src)

    @property
    def num_edges(self) -> int:
        return self.order.numel()


def _positions(order: torch.Tensor | None, edges: torch.Tensor) -> torch.Tensor:
    """The edge ids in :func:`group_by`'s ``order`` (None: the edges' own order)."""
    return torch.arange(edges.numel(), device=edges.device) if order is None else order


def layout_of(block) -> Layout:
    """The block's :class:`Layout`: the one kept on it (built on first use), or a new one for
    a graph that has no place to keep it."""
    kept = getattr(block, "layout", None)
    if isinstance(kept, list) and kept:
        return kept[0]
    src, dst = block.edges()
    layout = Layout.of_edges(src, dst, block.num_src_nodes(), block.num_dst_nodes())
    if isinstance(kept, list):
        kept.append(layout)
    return layout


def sum_by_dst(layout: Layout, h: torch.Tensor) -> torch.Tensor:
    """Each destination's sum of its sources' rows of ``h`` (any trailing shape)."""
    return _by_row(_Sum, h, layout)


def weighted_sum_by_dst(layout: Layout, h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Each destination's sum of its sources' rows of ``h``, each times its edge's
    ``weight`` (one number per edge, any shape of E elements)."""
    return _by_row(_WeightedSum, h, weight.reshape(-1).to(h.dtype), layout)


def copy_e_sum(layout: Layout, rows: torch.Tensor) -> torch.Tensor:
    """Each destination's sum of its in-edges' ``rows`` (a row per edge)."""
    return _by_row(_EdgeSum, rows, layout)


def _by_row(function, rows: torch.Tensor, *args) -> torch.Tensor:
    """The autograd ``function`` of ``rows`` flattened to one row each (and ``args``), its
    rows in ``rows``' trailing shape."""
    out = function.apply(rows.reshape(rows.shape[0], -1), *args)
    return out.view(out.shape[0], *rows.shape[1:])


def _bags(indices: torch.Tensor, rows: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Each group's sum of ``rows[indices]`` (groups by ``offsets``, D + 1 of them)."""
    if indices.numel() == 0 or rows.shape[1] == 0:
        return rows.new_zeros((offsets.numel() - 1, rows.shape[1]))
    return F.embedding_bag(indices, rows, offsets[:-1], mode="sum")


class _Sum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, layout):
        ctx.layout = layout
        return _bags(layout.src, h.contiguous(), layout.offsets)

    @staticmethod
    def backward(ctx, grad):
        layout = ctx.layout
        return _bags(layout.rdst, grad.contiguous(), layout.roffsets), None


def _csr(offsets, columns, values, shape) -> torch.Tensor:
    with warnings.catch_warnings():  # "sparse CSR support is in beta": the product works
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(offsets, columns, values, shape)


def _product(offsets, columns, values, rows: torch.Tensor) -> torch.Tensor:
    """The CSR matrix (``offsets``, ``columns``, ``values``) times ``rows``."""
    out_rows = offsets.numel() - 1
    if columns.numel() == 0 or rows.shape[1] == 0:
        return rows.new_zeros((out_rows, rows.shape[1]))
    matrix = _csr(offsets, columns, values, (out_rows, rows.shape[0]))
    return torch.sparse.mm(matrix, rows.contiguous())


class _WeightedSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, layout):
        ctx.layout = layout
        ctx.save_for_backward(h, weight)
        return _product(layout.offsets, layout.src, weight.index_select(0, layout.order), h)

    @staticmethod
    def backward(ctx, grad):
        layout, (h, weight) = ctx.layout, ctx.saved_tensors
        grad_h = grad_w = None
        if ctx.needs_input_grad[0]:
            grad_h = _product(layout.roffsets, layout.rdst,
                              weight.index_select(0, layout.rorder), grad)
        if ctx.needs_input_grad[1]:  # each edge's message's gradient, dotted with its row
            grad_w = (grad.index_select(0, layout.edge_dst) *
                      h.index_select(0, layout.edge_src)).sum(-1)
        return grad_h, grad_w, None


class _EdgeSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, rows, layout):
        ctx.layout = layout
        return _bags(layout.order, rows.contiguous(), layout.offsets)

    @staticmethod
    def backward(ctx, grad):
        return grad.index_select(0, ctx.layout.edge_dst), None
