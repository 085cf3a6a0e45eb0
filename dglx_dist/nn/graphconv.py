"""``dgl.nn.GraphConv`` in torch, on the package's blocks (Kipf and Welling's graph convolution).

Built with DGL's arguments, it holds DGL's parameters under DGL's names (``weight``, shape
``(in_feats, out_feats)``, and ``bias``), so a ``state_dict`` of either loads into the other,
and given the same block it gives what DGL's gives. Each destination sums its sources' rows
(each times its edge's weight where ``edge_weight`` is given); ``norm`` scales a source's row
by its out-degree and a destination's sum by its in-degree (a degree of 0 counts as 1):
``"both"`` by ``deg^-1/2`` on each side, ``"left"`` by ``1/out_deg`` on the sources,
``"right"`` by ``1/in_deg`` on the destinations, ``"none"`` not at all. The degrees count
edges, whatever their weights. The weight multiplies the rows before the sum or after it (the
same rows in exact arithmetic, within rounding in floats): DGL multiplies first wherever that
makes the rows narrower; on a CPU it goes where it does less work (:func:`map_first`).
"""
from __future__ import annotations

import torch
from torch import nn

from dglx_dist.graphcore.aggregate import layout_of
from dglx_dist.graphcore.norm import degree_factor, norm_powers
from dglx_dist.graphcore.message import in_degrees, out_degrees, u_mul_e_sum
from dglx_dist.errors import InvalidValueError

__all__ = ["GraphConv"]

NORMS = ("both", "right", "none", "left")


class GraphConv(nn.Module):
    """DGL's ``GraphConv(in_feats, out_feats, norm, weight, bias, activation,
    allow_zero_in_degree)``; ``weight=False``: the weight is forward's ``weight=`` argument
    (or none at all)."""

    def __init__(self, in_feats: int, out_feats: int, norm: str = "both", weight: bool = True,
                 bias: bool = True, activation=None, allow_zero_in_degree: bool = False):
        super().__init__()
        if norm not in NORMS:
            raise InvalidValueError(f"GraphConv: norm={norm!r}; expected one of {list(NORMS)}")
        self._in_feats, self._out_feats = in_feats, out_feats
        self._norm = norm
        self._allow_zero_in_degree = allow_zero_in_degree
        self.register_parameter("weight", nn.Parameter(torch.empty(in_feats, out_feats))
                                if weight else None)
        self.register_parameter("bias", nn.Parameter(torch.empty(out_feats)) if bias else None)
        self.reset_parameters()
        self._activation = activation

    def reset_parameters(self) -> None:
        """DGL's initialisation: Xavier-uniform weight, zero bias."""
        if self.weight is not None:
            nn.init.xavier_uniform_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def set_allow_zero_in_degree(self, set_value: bool) -> None:
        self._allow_zero_in_degree = set_value

    def forward(self, graph, feat, weight: torch.Tensor | None = None,
                edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        """Rows of the destinations from ``feat`` (rows of the sources, or a pair ``(rows of
        the sources, rows of the destinations)``)."""
        if not self._allow_zero_in_degree:
            refuse_zero_in_degree(graph, "GraphConv")
        feat_src, _ = src_and_dst(graph, feat)
        weight = self._weight(weight)
        rst = normalized_sum(graph, feat_src, weight, self._norm, edge_weight,
                             weight is not None and map_first(graph, feat_src, weight.shape[1]))
        if self.bias is not None:
            rst = rst + self.bias
        return rst if self._activation is None else self._activation(rst)

    def _weight(self, given: torch.Tensor | None) -> torch.Tensor | None:
        if given is None:
            return self.weight
        if self.weight is not None:
            raise InvalidValueError("GraphConv: forward got weight= but the conv has a weight "
                                    "parameter of its own; build it with weight=False to pass one")
        return given

    def extra_repr(self) -> str:
        return (f"in={self._in_feats}, out={self._out_feats}, normalization={self._norm}, "
                f"activation={self._activation}")


def normalized_sum(graph, feat_src: torch.Tensor, weight: torch.Tensor | None, norm: str,
                   edge_weight: torch.Tensor | None, weight_first: bool) -> torch.Tensor:
    """GraphConv's rows before its bias: the sources' rows scaled by ``norm``, times
    ``weight`` (None: none; before the sum where ``weight_first``), summed per destination
    (times ``edge_weight``), scaled by ``norm`` again; its P3 partial too
    (:class:`~dglx_dist.convs.graphconv.adapter.GraphConvAdapter`)."""
    p_src, p_dst = norm_powers(norm)
    if p_src:
        feat_src = feat_src * per_row(degree_factor(out_degrees(graph).to(feat_src), p_src),
                                      feat_src)
    if weight_first:
        feat_src = torch.matmul(feat_src, weight)
    rst = weighted_sum(graph, feat_src, edge_weight)
    if weight is not None and not weight_first:
        rst = torch.matmul(rst, weight)
    if p_dst:
        rst = rst * per_row(degree_factor(in_degrees(graph).to(rst), p_dst), rst)
    return rst


# -- the pieces SAGEConv shares ------------------------------------------------------------------
MESSAGE_COST = (2.0, 0.01)
"""What one number of a row summed over an edge costs on a CPU, in multiply-adds of a linear
map (forward and backward): ``a + b * width`` for rows ``width`` wide (wider rows miss the
caches more). Fitted to this project's CPU (``benchmarks/map_order.py`` times both orders
and reports what :func:`map_first` picks)."""


def map_first(graph, feat_src: torch.Tensor, out_feats: int) -> bool:
    """Whether a linear map to ``out_feats`` columns runs on the sources' rows ``feat_src``
    before their sum over ``graph``'s edges, or on the sums after it. Never first where it
    widens the rows; off a CPU wherever it narrows them (DGL's rule); on a CPU where that
    does less work: the map's multiply-adds over the rows it maps plus the sum's numbers
    over the edges, each at :data:`MESSAGE_COST`. A sampled block has many more sources
    than destinations, so there the sum mostly comes first (98,000 sources, 26,000
    destinations, 260,000 edges, rows of 128 mapped to 32: half the time of mapping first,
    forward and backward)."""
    in_feats = feat_src.shape[1] if feat_src.dim() > 1 else 1
    if in_feats <= out_feats or feat_src.device.type != "cpu":
        return in_feats > out_feats
    return cheaper_first(feat_src.shape[0], graph.num_dst_nodes(), layout_of(graph).num_edges,
                         in_feats, out_feats)


def cheaper_first(num_src: float, num_dst: float, edges: float, in_feats: int,
                  out_feats: int) -> bool:
    """:func:`map_first`'s choice on a CPU, from the counts (the cluster model's too)."""
    a, b = MESSAGE_COST

    def work(rows: float, width: int) -> float:
        return rows * in_feats * out_feats + (a + b * width) * edges * width

    return work(num_src, out_feats) < work(num_dst, in_feats)


def src_and_dst(graph, feat, conv: str = "GraphConv") -> tuple[torch.Tensor, torch.Tensor]:
    """``feat`` as (the sources' rows, the destinations' rows): a pair as it is; one tensor
    holds the sources' rows, the destinations' the first of them (a block numbers them first).
    Rows that do not match the block's nodes are refused (:func:`check_rows`)."""
    if isinstance(feat, tuple):
        check_rows(graph, conv, *feat)
        return feat
    check_rows(graph, conv, feat)
    return feat, feat[:graph.num_dst_nodes()]


def check_rows(graph, conv: str, feat_src: torch.Tensor,
               feat_dst: torch.Tensor | None = None) -> None:
    """Refuses rows of another count than the block's sources (and destinations), in one line
    as DGL's convs do, before any kernel sees them."""
    for rows, count, what in ((feat_src, graph.num_src_nodes(), "source"),
                              (feat_dst, graph.num_dst_nodes(), "destination")):
        if rows is not None and rows.shape[0] != count:
            raise InvalidValueError(f"{conv}: the block has {count} {what} nodes but the "
                                    f"features have {rows.shape[0]} rows; expected one row per "
                                    f"{what} node")


def refuse_zero_in_degree(graph, conv: str) -> None:
    """Raise where a destination of ``graph`` has no in-edge."""
    lonely = int((in_degrees(graph) == 0).sum())
    if lonely:
        raise InvalidValueError(
            f"{conv}: {lonely} destination node(s) have no in-edges, so their output would be "
            f"meaningless; add self loops to the graph (dgl.add_self_loop) or build the conv "
            f"with allow_zero_in_degree=True")


def per_row(factor: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``factor`` (one number per row) shaped to multiply the rows of ``like``."""
    return factor.reshape(-1, *([1] * (like.dim() - 1)))


def weighted_sum(graph, h: torch.Tensor, edge_weight: torch.Tensor | None) -> torch.Tensor:
    """Each destination's sum of its sources' rows of ``h``, each times its edge's weight."""
    return u_mul_e_sum(graph, h, edge_factor(graph, edge_weight, h))


def edge_factor(graph, edge_weight: torch.Tensor | None, h: torch.Tensor):
    """``edge_weight`` (one number per edge, or None) shaped to multiply the rows of ``h``."""
    if edge_weight is None:
        return None
    edges = graph.edges()[0].shape[0]
    if edge_weight.shape[0] != edges:
        raise InvalidValueError(f"edge_weight has {edge_weight.shape[0]} rows; expected one per "
                                f"edge of the graph ({edges})")
    return per_row(edge_weight, h) if edge_weight.dim() == 1 else edge_weight
