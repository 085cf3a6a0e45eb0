"""``GraphConv``'s adapter (``dglx_dist.nn``'s and ``dgl.nn``'s: one class name): P3's column
split (any ``norm``, with its own weight; docs/strategies/p3.md, "First layers that split"),
GraNNDis's source scaling (``norm`` "left" or "both": rows pre-scaled by
``(block_deg / true_deg)^p_src``) and dorylus's GCN (``norm="both"``:
:class:`~dglx_dist.convs.graphconv.dorylus.GcnLayers`; tasks in :mod:`.ops`), all with the
degree normalisation said once in :mod:`.norm`.
"""
from __future__ import annotations

from torch import nn

from dglx_dist.convs.base import LAYERS, ConvAdapter, DorylusSupport, InputLinear
from dglx_dist.graphcore.message import out_degrees
from dglx_dist.convs.graphconv.dorylus import GcnLayers
from dglx_dist.graphcore.norm import norm_powers, weight_problem
from dglx_dist.convs.graphconv.ops import TASKS
from dglx_dist.errors import InvalidValueError
from dglx_dist.nn.graphconv import GraphConv, map_first, normalized_sum, refuse_zero_in_degree

__all__ = ["GraphConvAdapter"]


@LAYERS.register("GraphConv")
class GraphConvAdapter(ConvAdapter):
    """GraphConv (any ``norm``) with its own weight."""

    dorylus = DorylusSupport(GcnLayers, TASKS)

    def example(self, in_feats, out_feats):
        return GraphConv(in_feats, out_feats, allow_zero_in_degree=True)

    def check_column_split(self, conv: nn.Module) -> None:
        problem = weight_problem(conv)
        if problem:
            raise InvalidValueError(f"GraphConv built with {problem} cannot be split by feature "
                                    "columns for the first layer")

    def input_linears(self, conv: nn.Module) -> list[InputLinear]:
        return [InputLinear("weight", 0)]

    def partial(self, conv, weights, block, x, edge_weight=None):
        if not conv._allow_zero_in_degree:
            refuse_zero_in_degree(block, "GraphConv")
        w = weights[0]
        return [normalized_sum(block, x, w, conv._norm, edge_weight,
                               map_first(block, x, w.shape[1]))]

    def degree_source_scale(self, conv, block, out_degree):
        p_src = norm_powers(conv._norm)[0]
        if not p_src:
            return None
        # GraphConv multiplies source rows by deg^-p of the block's out-degrees, linearly
        # before anything else: rows pre-scaled by (block_deg / true_deg)^p come out
        # normalised by the true degree
        ratio = out_degrees(block).to(out_degree.dtype).clamp(min=1) / out_degree.clamp(min=1)
        return ratio.pow(p_src).float().unsqueeze(1)

    def finish(self, conv, block, totals, edge_weight=None):
        rst = totals[0] if conv.bias is None else totals[0] + conv.bias
        return conv._activation(rst) if conv._activation is not None else rst
