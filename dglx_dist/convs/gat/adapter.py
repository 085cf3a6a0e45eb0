"""``GATConv``'s adapter (``dglx_dist.nn``'s and ``dgl.nn``'s: one class name): P3's column split
(the projection ``fc(x_src)`` is the partial, GATConv's own forward runs on the sum;
docs/strategies/p3.md, "First layers that split") and dorylus
(:class:`~dglx_dist.convs.gat.dorylus.GatLayers`; tasks ``gat_*`` in :mod:`.ops`), both needing
one projection ``fc`` applied to the input alone (:func:`~.dorylus.projection_problems`); no
source-degree normalisation.
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from dglx_dist.convs.base import LAYERS, ConvAdapter, DorylusSupport, InputLinear, feat_dropout
from dglx_dist.convs.gat.dorylus import GatLayers, projection_problems
from dglx_dist.convs.gat.ops import TASKS
from dglx_dist.errors import InvalidValueError
from dglx_dist.nn.gatconv import GATConv

__all__ = ["GATAdapter"]


@LAYERS.register("GATConv")
class GATAdapter(ConvAdapter):
    """GATConv without residual and with one shared ``fc``: project, sum, then attention."""

    dorylus = DorylusSupport(GatLayers, TASKS)

    def example(self, in_feats, out_feats):
        return GATConv(in_feats, out_feats, 2, allow_zero_in_degree=True)

    def check_column_split(self, conv: nn.Module) -> None:
        problems = projection_problems(conv)
        if problems:
            raise InvalidValueError("GATConv cannot be split by feature columns with "
                                    f"{'; '.join(problems)}; the first layer needs one shared fc")

    def input_linears(self, conv: nn.Module) -> list[InputLinear]:
        return [InputLinear("fc.weight", 1)]

    def partial(self, conv, weights, block, x, edge_weight=None):
        return [F.linear(feat_dropout(conv, x), weights[0])]

    def strip(self, conv: nn.Module) -> None:
        super().strip(conv)
        conv.fc = nn.Identity()  # finish feeds GATConv the summed projection

    def finish(self, conv, block, totals, edge_weight=None):
        drop, conv.feat_drop = conv.feat_drop, nn.Identity()  # dropout came before the sum
        try:  # edge weights scale the attention of this rank's own block
            return conv(block, totals[0], edge_weight=edge_weight)
        finally:
            conv.feat_drop = drop
