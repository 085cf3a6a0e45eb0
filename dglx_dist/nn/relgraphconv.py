"""DGL's ``RelGraphConv`` (R-GCN layer) and the ``TypedLinear`` it transforms messages with,
in torch: the same constructor arguments, parameter names and results as ``dgl.nn``'s, so
a ``state_dict`` of one loads into the other.

The per-type products run one matrix product per type over the rows of that type (the rows
ordered by type once, unless ``presorted``), never a weight matrix per row.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from dglx_dist.graphcore.message import copy_e_sum
from dglx_dist.errors import InvalidValueError
from dglx_dist.nn.graphconv import check_rows

__all__ = ["TypedLinear", "RelGraphConv"]

REGULARIZERS = (None, "basis", "bdd")


class TypedLinear(nn.Module):
    """``x @ W[t]`` for each row ``x`` of type ``t`` (DGL's ``dgl.nn.TypedLinear``).

    Parameters (DGL's names): without ``regularizer``, ``W`` of shape ``(num_types,
    in_size, out_size)``; with ``"basis"``, ``num_bases`` matrices ``W`` (``(num_bases,
    in_size, out_size)``) mixed per type by ``coeff`` (``(num_types, num_bases)``); with
    ``"bdd"``, ``W`` of shape ``(num_types, num_bases * submat_in * submat_out)``: each type's
    ``num_bases`` diagonal blocks of ``submat_in x submat_out``, ``in_size`` and ``out_size``
    split evenly among them.
    """

    def __init__(self, in_size: int, out_size: int, num_types: int, regularizer=None,
                 num_bases: int | None = None):
        super().__init__()
        if regularizer not in REGULARIZERS:
            raise InvalidValueError(f"TypedLinear: regularizer {regularizer!r}; expected one "
                                    f"of {list(REGULARIZERS)}")
        if regularizer is not None and num_bases is None:
            raise InvalidValueError(f"TypedLinear: regularizer {regularizer!r} without "
                                    "num_bases; expected num_bases (an int)")
        self.in_size, self.out_size, self.num_types = in_size, out_size, num_types
        self.regularizer = regularizer
        if regularizer is None:
            self.W = nn.Parameter(torch.empty(num_types, in_size, out_size))
        elif regularizer == "basis":
            self.num_bases = num_bases
            self.W = nn.Parameter(torch.empty(num_bases, in_size, out_size))
            self.coeff = nn.Parameter(torch.empty(num_types, num_bases))
        else:
            if in_size % num_bases or out_size % num_bases:
                raise InvalidValueError(
                    f"TypedLinear: in_size {in_size} and out_size {out_size} with bdd's "
                    f"num_bases {num_bases}; expected both divisible by num_bases")
            self.num_bases = num_bases
            self.submat_in, self.submat_out = in_size // num_bases, out_size // num_bases
            self.W = nn.Parameter(torch.empty(num_types,
                                              num_bases * self.submat_in * self.submat_out))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """DGL's initialisation: ``W`` uniform within ``1/sqrt(fan_in)`` (a block's fan-in
        under bdd), ``coeff`` Xavier-uniform with ReLU's gain."""
        fan_in = self.submat_in if self.regularizer == "bdd" else self.in_size
        with torch.no_grad():
            nn.init.uniform_(self.W, -1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in))
            if self.regularizer == "basis":
                nn.init.xavier_uniform_(self.coeff, gain=nn.init.calculate_gain("relu"))

    def get_weight(self) -> torch.Tensor:
        """Each type's weight: ``(num_types, in_size, out_size)``, or bdd's ``W`` as it is."""
        if self.regularizer != "basis":
            return self.W
        mixed = self.coeff @ self.W.view(self.num_bases, -1)
        return mixed.view(self.num_types, self.in_size, self.out_size)

    def forward(self, x: torch.Tensor, x_type, sorted_by_type: bool = False) -> torch.Tensor:
        """Each row of ``x`` times the weight of its type ``x_type`` (``sorted_by_type``: the
        rows are in the order of their types already)."""
        x_type = torch.as_tensor(x_type, device=x.device).long()
        weight = self.get_weight()
        order = None if sorted_by_type else torch.argsort(x_type, stable=True)
        rows = x if order is None else x.index_select(0, order)
        if bool(((x_type < 0) | (x_type >= self.num_types)).any()):
            raise InvalidValueError(f"TypedLinear: a type id outside 0..{self.num_types - 1};"
                                    f" expected one of its {self.num_types} types")
        counts = torch.bincount(x_type, minlength=self.num_types).tolist()
        parts = [self._product(part, weight[t])
                 for t, part in enumerate(torch.split(rows, counts)) if counts[t]]
        out = torch.cat(parts) if parts else x.new_zeros((0, self.out_size))
        return out if order is None else torch.empty_like(out).index_copy(0, order, out)

    def _product(self, rows: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """``rows`` (of one type) times that type's ``weight``."""
        if self.regularizer != "bdd":
            return rows @ weight
        blocks = weight.view(self.num_bases, self.submat_in, self.submat_out)
        out = torch.einsum("nbi,bio->nbo", rows.reshape(-1, self.num_bases, self.submat_in),
                           blocks)
        return out.reshape(-1, self.out_size)

    def extra_repr(self) -> str:
        kind = "" if self.regularizer is None else \
            f", regularizer={self.regularizer}, num_bases={self.num_bases}"
        return (f"in_size={self.in_size}, out_size={self.out_size}, "
                f"num_types={self.num_types}{kind}")


class RelGraphConv(nn.Module):
    """The relational graph convolution of R-GCN (DGL's ``dgl.nn.RelGraphConv``): each
    destination sums its in-edges' messages, a message being its source's row times its
    edge type's weight (:class:`TypedLinear` ``linear_r``, times the edge's ``norm`` where
    given); then, in this order, ``layer_norm`` (``layer_norm_weight``), the bias
    (``h_bias``), the self-loop (the destinations' own rows times ``loop_weight``),
    ``activation`` and ``dropout``.

    Where ``regularizer`` is given without ``num_bases``, there is a basis per relation.
    """

    def __init__(self, in_feat: int, out_feat: int, num_rels: int, regularizer=None,
                 num_bases: int | None = None, bias: bool = True, activation=None,
                 self_loop: bool = True, dropout: float = 0.0, layer_norm: bool = False):
        super().__init__()
        if regularizer is not None and num_bases is None:
            num_bases = num_rels
        self.linear_r = TypedLinear(in_feat, out_feat, num_rels, regularizer, num_bases)
        self.bias, self.activation = bias, activation
        self.self_loop, self.layer_norm = self_loop, layer_norm
        if bias:
            self.h_bias = nn.Parameter(torch.zeros(out_feat))
        if layer_norm:
            self.layer_norm_weight = nn.LayerNorm(out_feat, elementwise_affine=True)
        if self_loop:
            self.loop_weight = nn.Parameter(torch.empty(in_feat, out_feat))
            nn.init.xavier_uniform_(self.loop_weight, gain=nn.init.calculate_gain("relu"))
        self.dropout = nn.Dropout(dropout)

    def forward(self, g, feat: torch.Tensor, etypes, norm: torch.Tensor | None = None, *,
                presorted: bool = False) -> torch.Tensor:
        """The destinations' new rows on block ``g`` (one edge type; the package's block or
        DGL's) from the sources' rows ``feat``, with each edge's relation ``etypes`` (in the
        order of ``g``'s edges) and ``norm`` (a row per edge; None: 1). ``presorted``: the
        edges are in the order of their relations."""
        check_rows(g, "RelGraphConv", feat)
        msg = self.linear_r(feat.index_select(0, g.edges()[0].long()), etypes, presorted)
        if norm is not None:
            msg = msg * norm
        h = copy_e_sum(g, msg)
        if self.layer_norm:
            h = self.layer_norm_weight(h)
        if self.bias:
            h = h + self.h_bias
        if self.self_loop:
            h = h + feat[:g.num_dst_nodes()] @ self.loop_weight
        if self.activation:
            h = self.activation(h)
        return self.dropout(h)
