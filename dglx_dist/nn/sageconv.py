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
rows narrower; on a CPU it runs where it does less work
(:func:`~dglx_dist.nn.graphconv.map_first`: on a sampled block, whose sources outnumber its
destinations, mostly after the sum). ``"lstm"`` is not implemented.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from dglx_dist.graphcore.message import in_degrees, u_mul_e_max
from dglx_dist.errors import InvalidValueError, NotSupportedError
from dglx_dist.nn.graphconv import edge_factor, map_first, per_row, src_and_dst, weighted_sum

__all__ = ["SAGEConv", "averaged"]

AGGREGATORS = ("mean", "gcn", "pool")


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
                        map_first(graph, feat_src, self._out_feats),
                        self._aggre_type, edge_weight, feat_dst if pair else None)


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
