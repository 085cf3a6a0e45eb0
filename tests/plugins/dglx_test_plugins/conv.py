"""The column split of ``dgl.nn.GINConv`` whose ``apply_func`` is one ``nn.Linear``.

GIN computes ``apply_func((1 + eps) * x_dst + aggregate(x_src))``. With a linear
``apply_func`` and a sum or mean aggregation every step before the bias is linear in the input
columns, so a column slice's partial is ``((1 + eps) * x_dst + aggregate(x_src)) @ W_cols.T``
and the rest (bias, activation) runs on the sum. A max aggregation is not linear and is refused.

The adapter leaves ``dorylus`` at None: dorylus refuses GINConv, and its ``conv_types`` leave it
out (tests/unit/test_dorylus_parts.py checks both).
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from dglx_dist.convs import ConvAdapter, InputLinear
from dglx_dist.errors import InvalidValueError


class GINAdapter(ConvAdapter):
    """GINConv with ``apply_func=nn.Linear(...)`` and the sum or mean aggregator."""

    def example(self, in_feats: int, out_feats: int) -> nn.Module:
        import dgl  # on use: every process that looks an adapter up loads this plug-in

        return dgl.nn.GINConv(nn.Linear(in_feats, out_feats), "mean", init_eps=0.5,
                              activation=F.relu)

    def check_column_split(self, conv: nn.Module) -> None:
        if not isinstance(conv.apply_func, nn.Linear):
            raise InvalidValueError("GINConv is split by feature columns only when apply_func "
                                    f"is one nn.Linear; got {type(conv.apply_func).__name__}")
        if conv._aggregator_type == "max":
            raise InvalidValueError("GINConv with aggregator 'max' cannot be split by feature "
                                    "columns; use 'sum' or 'mean'")

    def input_linears(self, conv: nn.Module) -> list[InputLinear]:
        return [InputLinear("apply_func.weight", 1)]

    def partial(self, conv, weights, block, x):
        import dgl

        from dglx_dist.dgl.blocks import to_dgl_block  # DGL's door: the package's block as DGL's
        from dglx_dist.graphcore.block import Block

        graph = to_dgl_block(block) if isinstance(block, Block) else block
        reduce = dgl.ops.copy_u_sum if conv._aggregator_type == "sum" else dgl.ops.copy_u_mean
        h = (1 + conv.eps) * x[: block.num_dst_nodes()] + reduce(graph, x)
        return [F.linear(h, weights[0])]

    def finish(self, conv, block, totals):
        rst = totals[0] if conv.apply_func.bias is None else totals[0] + conv.apply_func.bias
        return conv.activation(rst) if conv.activation is not None else rst
