"""GAT (graph attention network) over blocks (or one whole graph per layer)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dglx_dist.data.normalize import row_normalized
from dglx_dist.models.library import conv_library

__all__ = ["GAT"]


class GAT(nn.Module):
    """``num_layers`` GATConv layers: hidden layers with ``heads`` heads of ``hidden``
    features each, ELU and the heads flattened between layers; the output layer has one head.

    Args:
        in_feats / hidden / num_classes: widths (``hidden`` per head).
        num_layers: GATConv layers (one block each).
        dropout: every conv's feature dropout (on its input).
        row_normalize: see :func:`~dglx_dist.data.normalize.row_normalized`.
        heads: attention heads of the hidden layers.
        attn_drop: every conv's attention dropout (None: ``dropout``).
        convs: whose GATConv (:data:`~dglx_dist.models.library.CONV_LIBRARIES`).
    """

    def __init__(self, in_feats: int, hidden: int, num_classes: int, num_layers: int = 2,
                 dropout: float = 0.5, row_normalize: bool = False, heads: int = 4,
                 attn_drop: float | None = None, convs: str = "dglx"):
        super().__init__()
        gnn = conv_library(convs)
        self.row_normalize = row_normalize
        attn_drop = dropout if attn_drop is None else attn_drop
        dims = [in_feats] + [hidden * heads] * (num_layers - 1)
        outs = [(hidden, heads)] * (num_layers - 1) + [(num_classes, 1)]
        self.layers = nn.ModuleList(
            gnn.GATConv(d, out, h, feat_drop=dropout, attn_drop=attn_drop,
                          allow_zero_in_degree=True)
            for d, (out, h) in zip(dims, outs))

    def forward(self, blocks, x: torch.Tensor) -> torch.Tensor:
        h = row_normalized(x) if self.row_normalize else x
        last = len(self.layers) - 1
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            h = h.mean(1) if i == last else F.elu(h.flatten(1))
        return h
