"""GraphSAGE over blocks, as in DGL's node-classification examples."""
from __future__ import annotations

from dglx_dist.models.gcn import ConvStack
from dglx_dist.models.library import conv_library

__all__ = ["SAGE"]


class SAGE(ConvStack):
    """``num_layers`` SAGEConv layers with ReLU and dropout between them.

    Args:
        in_feats / hidden / num_classes: layer widths.
        num_layers: number of SAGEConv layers (one block each).
        aggregator: SAGEConv aggregator ("mean", "gcn", "pool").
        dropout: dropout between layers.
        row_normalize: see :func:`~dglx_dist.data.normalize.row_normalized`.
        convs: whose SAGEConv (:data:`~dglx_dist.models.library.CONV_LIBRARIES`).
    """

    def __init__(self, in_feats: int, hidden: int, num_classes: int, num_layers: int = 2,
                 aggregator: str = "mean", dropout: float = 0.5, row_normalize: bool = False,
                 convs: str = "dglx"):
        gnn = conv_library(convs)
        super().__init__(lambda a, b: gnn.SAGEConv(a, b, aggregator), in_feats, hidden,
                         num_classes, num_layers, dropout, row_normalize)
