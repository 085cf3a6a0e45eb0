"""``dgl.nn.SAGEConv`` in torch, on the package's blocks (GraphSAGE, Hamilton et al.).

Built with DGL's arguments, it holds DGL's parameters under DGL's names (``fc_pool``,
``fc_neigh``, ``fc_self``; ``bias`` for ``"gcn"``, which has no ``fc_self``), so a
``state_dict`` of either loads into the other, and given the same block it gives what DGL's
gives. A destination's neighbourhood row is, by ``aggregator_type``:

- ``"mean"``: the mean of its sources' rows (0 without in-edges);
- ``"gcn"``: (the sum of its sources' rows + its own row) / (in-degree + 1), and no
  separate self term;
- ``"pool"``: the elementwise largest of ``relu(fc_pool(row))`` over its sources (0 without
  in-edges, as DGL's: DGL turns every infinity of a max into 0).

With ``edge_weight``, each source's row (after ``fc_pool`` for ``"pool"``) is multiplied by
its edge's weight first; the degrees still count edges. ``fc_neigh`` maps the neighbourhood
row, ``fc_self`` the destination's own row, and the output is their sum, then ``activation``,
then ``norm``. For "mean" and "gcn" ``fc_neigh`` runs before the sum or after it (the same
rows in exact arithmetic, within rounding in floats): DGL runs it first wherever it makes
rows narrower; on a CPU it runs where it does less work (:func:`neigh_first`: on a sampled
block, whose sources outnumber its destinations, mostly after the sum). ``"lstm"`` is not
implemented.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from dglx_dist.graphcore.aggregate import layout_of
from dglx_dist.graphcore.message import in_degrees, u_mul_e_max
from dglx_dist.errors import InvalidValueError, NotSupportedError
from dglx_dist.nn.graphconv import edge_factor, per_row, src_and_dst, weighted_sum

__all__ = ["SAGEConv", "averaged", "neigh_first"]

AGGREGATORS = ("mean", "gcn", "pool")

MESSAGE_COST = (2.0, 0.01)
"""What one number of a row summed over an edge costs on a CPU, in multiply-adds of a linear
layer (forward and backward): ``a + b * width`` for rows ``width`` wide (wider rows miss the
caches more). Fitted to this project's CPU (``benchmarks/sage_order.py`` measures both
orders and what this rule picks)."""


class SAGEConv(nn.Module):
    """DGL's ``SAGEConv(in_feats, out_feats, aggregator_type, feat_drop, bias, norm,
    activation)``; ``in_feats`` an int or a pair (the sources', the destinations' width)."""

    def __init__(self, in_feats, out_feats: int, aggregator_type: str, feat_drop: float = 0.0,
                 bias: bool = True, norm=None, activation=None):
        super().__init__()
        if aggregator_type == "lstm":
            raise NotSupportedError("SAGEConv: aggregator_type='lstm' is not implemented in "
                                    f"dglx_dist.nn; use one of {list(AGGREGATORS)}")
        if aggregator_type not in AGGREGATORS:
            raise InvalidValueError(f"SAGEConv: aggregator_type={aggregator_type!r}; expected "
                                    f"one of {list(AGGREGATORS)}")
        pair = in_feats if isinstance(in_feats, tuple) else (in_feats, in_feats)
        self._in_src_feats, self._in_dst_feats = pair
        self._out_feats = out_feats
        self._aggre_type = aggregator_type
        self.norm = norm
        self.feat_drop = nn.Dropout(feat_drop)
        self.activation = activation
        if aggregator_type == "pool":
            self.fc_pool = nn.Linear(pair[0], pair[0])
        self.fc_neigh = nn.Linear(pair[0], out_feats, bias=False)
        if aggregator_type != "gcn":
            self.fc_self = nn.Linear(pair[1], out_feats, bias=bias)
        elif bias:
            self.bias = nn.Parameter(torch.zeros(out_feats))
        else:
            self.register_buffer("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """DGL's initialisation: Xavier-uniform weights with ReLU's gain; the linear layers'
        biases as ``nn.Linear`` draws them (``"gcn"``'s bias stays as it is)."""
        gain = nn.init.calculate_gain("relu")
        if self._aggre_type == "pool":
            nn.init.xavier_uniform_(self.fc_pool.weight, gain=gain)
        if self._aggre_type != "gcn":
            nn.init.xavier_uniform_(self.fc_self.weight, gain=gain)
        nn.init.xavier_uniform_(self.fc_neigh.weight, gain=gain)

    def forward(self, graph, feat, edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        """Rows of the destinations from ``feat`` (rows of the sources, or a pair ``(rows of
        the sources, rows of the destinations)``)."""
        feat_src, feat_dst = src_and_dst(graph, feat, "SAGEConv")
        feat_src = self.feat_drop(feat_src)
        feat_dst = self.feat_drop(feat_dst) if isinstance(feat, tuple) else \
            feat_src[:graph.num_dst_nodes()]
        if self._aggre_type == "pool":
            pooled = u_mul_e_max(graph, F.relu(self.fc_pool(feat_src)),
                                 edge_factor(graph, edge_weight, feat_src))
            h_neigh = self.fc_neigh(pooled.masked_fill(torch.isinf(pooled), 0))
        else:
            h_neigh = self._averaged(graph, feat, feat_src, feat_dst, edge_weight)
        if self._aggre_type == "gcn":
            rst = h_neigh if self.bias is None else h_neigh + self.bias
        else:
            rst = self.fc_self(feat_dst) + h_neigh
        if self.activation is not None:
            rst = self.activation(rst)
        return rst if self.norm is None else self.norm(rst)

    def _averaged(self, graph, feat, feat_src, feat_dst, edge_weight) -> torch.Tensor:
        """``"mean"``'s and ``"gcn"``'s neighbourhood row, through ``fc_neigh``."""
        pair = isinstance(feat, tuple)
        if self._aggre_type == "gcn" and pair and feat_src.shape[1:] != feat_dst.shape[1:]:
            raise InvalidValueError(
                f"SAGEConv('gcn'): the sources' rows are {tuple(feat_src.shape[1:])} wide and "
                f"the destinations' {tuple(feat_dst.shape[1:])}; expected the same")
        return averaged(graph, feat_src, self.fc_neigh,
                        neigh_first(graph, feat_src, self._out_feats),
                        self._aggre_type, edge_weight, feat_dst if pair else None)


def neigh_first(graph, feat_src: torch.Tensor, out_feats: int) -> bool:
    """Whether the neighbourhood's linear map (``out_feats`` wide) runs on the sources' rows
    ``feat_src`` before their sum, or on the sums after it. Never first where it widens the
    rows; on a GPU wherever it narrows them (DGL's rule); on a CPU where that does less work:
    the map's multiply-adds over the rows it maps plus the sum's numbers over the edges, each
    at :data:`MESSAGE_COST`. A sampled block has many more sources than destinations, so its
    sum mostly comes first (at 98,000 sources, 26,000 destinations and 260,000 edges, rows
    of 128 mapped to 32: half the time, forward and backward)."""
    in_feats = feat_src.shape[1] if feat_src.dim() > 1 else 1
    if in_feats <= out_feats or feat_src.device.type != "cpu":
        return in_feats > out_feats
    edges, per_edge = layout_of(graph).num_edges, MESSAGE_COST

    def work(rows: int, width: int) -> float:
        return rows * in_feats * out_feats + (per_edge[0] + per_edge[1] * width) * edges * width

    return work(feat_src.shape[0], out_feats) < work(graph.num_dst_nodes(), in_feats)


def averaged(graph, feat_src: torch.Tensor, fc, fc_first: bool, kind: str,
             edge_weight: torch.Tensor | None, feat_dst: torch.Tensor | None = None
             ) -> torch.Tensor:
    """``"mean"``'s or ``"gcn"``'s (``kind``) neighbourhood row through ``fc`` (before the
    sum where ``fc_first``), ``feat_dst`` the destinations' own rows (None: the first of
    ``feat_src``); its P3 partial too (:class:`~dglx_dist.convs.sage.adapter.SAGEAdapter`)."""
    h_src = fc(feat_src) if fc_first else feat_src
    deg = per_row(in_degrees(graph).to(h_src), h_src)
    total = weighted_sum(graph, h_src, edge_weight)
    if kind == "mean":
        neigh = total / deg.clamp(min=1)
    else:  # "gcn": each destination's own row counts as one more neighbour
        own = h_src[:graph.num_dst_nodes()] if feat_dst is None else \
            fc(feat_dst) if fc_first else feat_dst
        neigh = (total + own) / (deg + 1)
    return neigh if fc_first else fc(neigh)
