"""GCN and the deep residual ResGCN+ over blocks (or one whole graph per layer)."""
from __future__ import annotations

import torch
from torch import nn

from dglx_dist.data.normalize import row_normalized
from dglx_dist.errors import InvalidValueError
from dglx_dist.models.library import conv_library

__all__ = ["ConvStack", "GCN", "ResGCN"]


class ConvStack(nn.Module):
    """``num_layers`` convs ``make(in, out)`` with ReLU and dropout between them: GCN's and
    :class:`~dglx_dist.models.SAGE`'s body (``row_normalize``: see
    :func:`~dglx_dist.data.normalize.row_normalized`)."""

    def __init__(self, make, in_feats: int, hidden: int, num_classes: int, num_layers: int,
                 dropout: float, row_normalize: bool):
        super().__init__()
        self.row_normalize = row_normalize
        dims = [in_feats] + [hidden] * (num_layers - 1) + [num_classes]
        self.layers = nn.ModuleList(make(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks, x: torch.Tensor) -> torch.Tensor:
        h = row_normalized(x) if self.row_normalize else x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            if i:
                h = self.dropout(torch.relu(h))
            h = layer(block, h)
        return h


class GCN(ConvStack):
    """``num_layers`` GraphConv layers (symmetric normalisation) with ReLU and dropout between.

    Args:
        in_feats / hidden / num_classes: layer widths.
        num_layers: GraphConv layers (one block each).
        dropout: dropout before every layer but the first.
        row_normalize: see :func:`~dglx_dist.data.normalize.row_normalized`.
        convs: whose GraphConv (:data:`~dglx_dist.models.library.CONV_LIBRARIES`).
    """

    def __init__(self, in_feats: int, hidden: int, num_classes: int, num_layers: int = 2,
                 dropout: float = 0.5, row_normalize: bool = False, convs: str = "dglx"):
        gnn = conv_library(convs)
        super().__init__(lambda a, b: gnn.GraphConv(a, b, allow_zero_in_degree=True),
                         in_feats, hidden, num_classes, num_layers, dropout, row_normalize)


class ResGCN(nn.Module):
    """ResGCN+ (DeeperGCN's pre-activation residual blocks), GraNNDis's deep model.

    ``x -> Linear -> conv_1``, then per layer ``h = h + conv(dropout(relu(norm(h))))``, then
    ``norm -> relu -> dropout -> Linear``. LayerNorm rather than BatchNorm: it is per row, so
    it gives the same result however the rows are spread over ranks.

    Args:
        in_feats / hidden / num_classes: widths (every conv is ``hidden x hidden``).
        num_layers: graph convs (one block each); trains at 28 and more.
        dropout: dropout inside every residual block and before the head.
        conv: "gcn" (GraphConv) or "sage" (SAGEConv, mean).
        row_normalize: see :func:`~dglx_dist.data.normalize.row_normalized`.
        convs: whose convs (:data:`~dglx_dist.models.library.CONV_LIBRARIES`).
    """

    def __init__(self, in_feats: int, hidden: int, num_classes: int, num_layers: int = 28,
                 dropout: float = 0.5, conv: str = "gcn", row_normalize: bool = False,
                 convs: str = "dglx"):
        super().__init__()
        gnn = conv_library(convs)
        if conv not in ("gcn", "sage"):
            raise InvalidValueError(f"conv {conv!r}; expected 'gcn' or 'sage'")
        self.row_normalize = row_normalize
        self.encoder = nn.Linear(in_feats, hidden)
        make = ((lambda: gnn.GraphConv(hidden, hidden, allow_zero_in_degree=True))
                if conv == "gcn" else (lambda: gnn.SAGEConv(hidden, hidden, "mean")))
        self.convs = nn.ModuleList(make() for _ in range(num_layers))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(num_layers))
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, blocks, x: torch.Tensor) -> torch.Tensor:
        h = self.encoder(row_normalized(x) if self.row_normalize else x)
        h = self.convs[0](blocks[0], h)
        for conv, norm, block in zip(self.convs[1:], self.norms[:-1], blocks[1:]):
            z = self.dropout(torch.relu(norm(h)))
            h = h[:block.num_dst_nodes()] + conv(block, z)
        return self.head(self.dropout(torch.relu(self.norms[-1](h))))
