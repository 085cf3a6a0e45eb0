"""GraphSAGE over blocks, as in DGL's node-classification examples."""
from __future__ import annotations

import dgl.nn as dglnn
import torch
from torch import nn

from dglx_dist.data.normalize import row_normalized

__all__ = ["SAGE"]


class SAGE(nn.Module):
    """``num_layers`` SAGEConv layers with ReLU and dropout between them.

    Args:
        in_feats / hidden / num_classes: layer widths.
        num_layers: number of SAGEConv layers (one block each).
        aggregator: SAGEConv aggregator ("mean", "gcn", "pool", "lstm").
        dropout: dropout between layers.
        row_normalize: divide each input row by its sum first (what DGL's Planetoid loaders
            do to non-negative bag-of-words features such as Cora's; meaningless for signed
            features, so rows whose sum is not positive are left as they are).
    """

    def __init__(self, in_feats: int, hidden: int, num_classes: int, num_layers: int = 2,
                 aggregator: str = "mean", dropout: float = 0.5, row_normalize: bool = False):
        super().__init__()
        self.row_normalize = row_normalize
        dims = [in_feats] + [hidden] * (num_layers - 1) + [num_classes]
        self.layers = nn.ModuleList(dglnn.SAGEConv(a, b, aggregator)
                                    for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks, x: torch.Tensor) -> torch.Tensor:
        h = row_normalized(x) if self.row_normalize else x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i != len(self.layers) - 1:
                h = self.dropout(torch.relu(h))
        return h
