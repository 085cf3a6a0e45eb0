"""``SAGEConv``'s adapter (``dglx_dist.nn``'s and ``dgl.nn``'s: one class name): P3's column split
of the mean, gcn and pool aggregators (LSTM is refused; each one's partial:
docs/strategies/p3.md, "First layers that split"), no source-degree normalisation (the mean
divides by in-degrees), and dorylus's mean aggregator
(:class:`~dglx_dist.convs.sage.dorylus.SageLayers`; tasks ``sage_*`` in :mod:`.ops`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dglx_dist.convs.base import LAYERS, ConvAdapter, DorylusSupport, InputLinear, feat_dropout
from dglx_dist.graphcore.message import in_degrees, u_mul_e_max
from dglx_dist.convs.sage.dorylus import SageLayers
from dglx_dist.convs.sage.ops import TASKS
from dglx_dist.errors import InvalidValueError
from dglx_dist.nn.graphconv import edge_factor, map_first
from dglx_dist.nn.sageconv import SAGEConv, averaged

__all__ = ["SAGEAdapter"]


@LAYERS.register("SAGEConv")
class SAGEAdapter(ConvAdapter):
    """SAGEConv with the mean, gcn or pool aggregator."""

    dorylus = DorylusSupport(SageLayers, TASKS)

    def example(self, in_feats, out_feats):
        return SAGEConv(in_feats, out_feats, "mean", activation=torch.relu)

    def check_column_split(self, conv: nn.Module) -> None:
        if conv._aggre_type == "lstm":
            raise InvalidValueError("SAGEConv with aggregator 'lstm' cannot be split by feature "
                                    "columns (the LSTM is not linear in its input); use 'mean', "
                                    "'gcn' or 'pool' for the first layer")

    def input_linears(self, conv: nn.Module) -> list[InputLinear]:
        kind = conv._aggre_type
        lins = [InputLinear("fc_pool.weight" if kind == "pool" else "fc_neigh.weight", 1)]
        if kind != "gcn":
            lins.append(InputLinear("fc_self.weight", 1))
        return lins

    def partial(self, conv, weights, block, x, edge_weight=None):
        x = feat_dropout(conv, x)
        num_dst, kind = block.num_dst_nodes(), conv._aggre_type
        if kind == "pool":
            return [F.linear(x, weights[0]), F.linear(x[:num_dst], weights[1])]
        w_neigh = weights[0]  # projected before the sum or after it, as the conv does
        out = averaged(block, x, lambda h: F.linear(h, w_neigh),
                       map_first(block, x, w_neigh.shape[0]), kind, edge_weight)
        if kind == "mean":
            out = out + F.linear(x[:num_dst], weights[1])
        return [out]

    def finish(self, conv, block, totals, edge_weight=None):
        kind = conv._aggre_type
        if kind == "pool":
            pooled = torch.relu(totals[0] + conv.fc_pool.bias)
            # dgl.ops' max leaves -inf on a node with no in-edges; update_all (the stock conv)
            # gives it zeros
            neigh = u_mul_e_max(block, pooled, edge_factor(block, edge_weight, pooled))
            neigh = neigh.masked_fill((in_degrees(block) == 0).unsqueeze(1), 0.0)
            rst = conv.fc_neigh(neigh) + totals[1]
            bias = conv.fc_self.bias
        else:
            rst = totals[0]
            bias = conv.bias if kind == "gcn" else conv.fc_self.bias
        if bias is not None:
            rst = rst + bias
        if conv.activation is not None:
            rst = conv.activation(rst)
        if conv.norm is not None:
            rst = conv.norm(rst)
        return rst
