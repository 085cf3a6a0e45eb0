"""GAT's layer in torch, on the package's blocks: ``dgl.nn.GATConv`` without DGL.

The constructor takes DGL's arguments and makes DGL's parameters under DGL's names and shapes,
so a ``state_dict`` of either loads into the other (strictly), and given the same parameters and
the same block both give the same output and gradients:

* ``fc`` (``fc_src`` and ``fc_dst`` where ``in_feats`` is a (source, destination) pair): the
  bias-free projection to ``num_heads * out_feats``;
* ``attn_l`` / ``attn_r`` of shape (1, heads, out): a source's and a destination's share of
  each edge's score, ``leaky_relu(el[src] + er[dst])``, normalized by :func:`edge_softmax`;
* ``res_fc``: with ``residual``, a Linear from the destinations' input where its width is not
  ``num_heads * out_feats`` (its own bias holds ``bias`` then), the input itself where it is
  (a parameter-free identity); ``bias`` a parameter of its own unless ``res_fc`` is a Linear.

Dropout (``feat_drop`` on the input, ``attn_drop`` on the attention) is torch's, so it draws
other masks than DGL's: compare the two with both at 0, or in eval mode.
"""
from __future__ import annotations

import torch
from torch import nn

from dglx_dist.graphcore.message import edge_softmax, u_mul_e_sum
from dglx_dist.errors import InvalidTypeError, InvalidValueError
from dglx_dist.nn.graphconv import refuse_zero_in_degree, src_and_dst

__all__ = ["GATConv"]


class GATConv(nn.Module):
    """Multi-head graph attention (Velickovic et al.), with DGL's constructor and forward.

    ``forward(graph, feat, edge_weight=None, get_attention=False)``: ``graph`` is a block
    (anything with ``edges()``, ``num_src_nodes()`` and ``num_dst_nodes()``), ``feat`` its
    sources' rows (a block's destinations are its first sources), or a (sources, destinations)
    pair of them; gives (destinations, ..., heads, out_feats), and with ``get_attention`` also
    each edge's attention (edges, ..., heads, 1), after dropout and ``edge_weight``.
    """

    def __init__(self, in_feats, out_feats: int, num_heads: int, feat_drop: float = 0.0,
                 attn_drop: float = 0.0, negative_slope: float = 0.2, residual: bool = False,
                 activation=None, allow_zero_in_degree: bool = False, bias: bool = True):
        super().__init__()
        pair = isinstance(in_feats, tuple)
        self._in_src_feats, self._in_dst_feats = in_feats if pair else (in_feats, in_feats)
        self._out_feats, self._num_heads = out_feats, num_heads
        self._allow_zero_in_degree = allow_zero_in_degree
        width = out_feats * num_heads
        if pair:
            self.fc_src = nn.Linear(self._in_src_feats, width, bias=False)
            self.fc_dst = nn.Linear(self._in_dst_feats, width, bias=False)
        else:
            self.fc = nn.Linear(in_feats, width, bias=False)
        self.attn_l = nn.Parameter(torch.empty(1, num_heads, out_feats))
        self.attn_r = nn.Parameter(torch.empty(1, num_heads, out_feats))
        self.feat_drop, self.attn_drop = nn.Dropout(feat_drop), nn.Dropout(attn_drop)
        self.leaky_relu = nn.LeakyReLU(negative_slope)
        self.has_linear_res = residual and self._in_dst_feats != width
        self.has_explicit_bias = bias and not self.has_linear_res
        if self.has_linear_res:
            self.res_fc = nn.Linear(self._in_dst_feats, width, bias=bias)
        elif residual:
            self.res_fc = nn.Identity()
        else:
            self.register_buffer("res_fc", None)
        if self.has_explicit_bias:
            self.bias = nn.Parameter(torch.empty(width))
        else:
            self.register_buffer("bias", None)
        self.activation = activation
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-normal weights (ReLU's gain), zero biases: DGL's initialization."""
        gain = nn.init.calculate_gain("relu")
        for name in ("fc", "fc_src", "fc_dst", "attn_l", "attn_r"):
            if hasattr(self, name):
                param = getattr(self, name)
                nn.init.xavier_normal_(getattr(param, "weight", param), gain=gain)
        if self.has_linear_res:
            nn.init.xavier_normal_(self.res_fc.weight, gain=gain)
        for bias in (self.bias, getattr(self.res_fc, "bias", None)):
            if bias is not None:
                nn.init.zeros_(bias)

    def set_allow_zero_in_degree(self, set_value: bool) -> None:
        self._allow_zero_in_degree = set_value

    def forward(self, graph, feat, edge_weight: torch.Tensor | None = None,
                get_attention: bool = False):
        if not self._allow_zero_in_degree:
            refuse_zero_in_degree(graph, "GATConv")
        h_dst, feat_src, feat_dst = self._project(graph, feat)
        el = (feat_src * self.attn_l).sum(-1, keepdim=True)
        er = (feat_dst * self.attn_r).sum(-1, keepdim=True)
        src, dst = (x.long() for x in graph.edges())
        scores = self.leaky_relu(el.index_select(0, src) + er.index_select(0, dst))
        attention = self.attn_drop(edge_softmax(graph, scores))
        if edge_weight is not None:
            attention = attention * _per_edge(edge_weight, attention)
        rst = u_mul_e_sum(graph, feat_src, attention)
        if self.res_fc is not None:
            rst = rst + self.res_fc(h_dst).view(*h_dst.shape[:-1], -1, self._out_feats)
        if self.bias is not None:
            rst = rst + self.bias.view(self._num_heads, self._out_feats)
        if self.activation:
            rst = self.activation(rst)
        return (rst, attention) if get_attention else rst

    def _project(self, graph, feat):
        """The destinations' input after dropout, and the sources' and destinations'
        projections, (nodes, ..., heads, out_feats)."""
        heads = (self._num_heads, self._out_feats)
        src_and_dst(graph, feat, "GATConv")  # rows of the block's nodes, or one line
        if isinstance(feat, tuple):
            h_src, h_dst = (self.feat_drop(x) for x in feat)
            fc_src, fc_dst = (self.fc, self.fc) if hasattr(self, "fc") else \
                (self.fc_src, self.fc_dst)
            return (h_dst, fc_src(h_src).view(*h_src.shape[:-1], *heads),
                    fc_dst(h_dst).view(*h_dst.shape[:-1], *heads))
        if not hasattr(self, "fc"):
            raise InvalidTypeError(
                f"GATConv: feat is one {type(feat).__name__}; expected a (source rows, "
                "destination rows) pair, since in_feats was given as a pair")
        h_src = self.feat_drop(feat)
        feat_src = self.fc(h_src).view(*h_src.shape[:-1], *heads)
        num_dst = graph.num_dst_nodes()
        return h_src[:num_dst], feat_src, feat_src[:num_dst]


def _per_edge(edge_weight: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    """``edge_weight`` (one per edge) shaped to multiply each edge's attention rows."""
    if edge_weight.dim() != 1 or edge_weight.shape[0] != attention.shape[0]:
        raise InvalidValueError(
            f"GATConv: edge_weight of shape {tuple(edge_weight.shape)}; expected "
            f"({attention.shape[0]},), one weight per edge of the graph")
    return edge_weight.view(-1, *([1] * (attention.dim() - 1)))
