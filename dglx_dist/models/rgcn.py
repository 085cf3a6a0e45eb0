"""R-GCN over heterogeneous blocks: the model of ``examples/rgcn_hetero.py`` (and of its plain
DGL original), shared by both sides of ``dglx bench`` on a typed graph so that DGL's DistDGL
and ours train the same module with the same initial weights.

Each layer is a ``HeteroGraphConv`` of one ``GraphConv`` (right-normalised) per relation
(:mod:`dglx_dist.nn`'s, DGL's in torch; or ``dgl.nn``'s, ``convs="dgl"``), summed per
destination type, plus a self-loop linear map shared by every type.
Types with features are projected to the hidden width first; featureless types enter as rows
of a learnable embedding (a ``DistEmbedding`` in a distributed run) already that wide.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from dglx_dist.models.library import conv_library

__all__ = ["RGCN", "node_inputs"]


class RGCN(nn.Module):
    """One GraphConv per relation, summed per destination type, plus a self-loop term.

    Relations and featured types are taken in sorted order, so that the same seed gives the
    same weights whatever order a graph lists them in (DGL's DistGraph and ours may differ).

    Args:
        in_sizes: feature width of each type that has features.
        rels: the relation names (edge types); repeats are ignored.
        hidden: hidden width (and the featureless types' embedding width).
        num_classes: output width.
        num_layers: layers (one block each).
        dropout: dropout after every layer but the last.
        category: the node type whose outputs are returned.
        convs: whose HeteroGraphConv and GraphConv
            (:data:`~dglx_dist.models.library.CONV_LIBRARIES`); both give the same parameters
            by name from the same seed.
    """

    def __init__(self, in_sizes: Mapping[str, int], rels: Sequence[str], hidden: int,
                 num_classes: int, num_layers: int = 2, dropout: float = 0.5,
                 category: str = "paper", convs: str = "dglx"):
        super().__init__()
        gnn = conv_library(convs)
        self.category = category
        self.proj = nn.ModuleDict({nt: nn.Linear(in_sizes[nt], hidden)
                                   for nt in sorted(in_sizes)})
        sizes = [(hidden, hidden)] * (num_layers - 1) + [(hidden, num_classes)]
        self.layers = nn.ModuleList([gnn.HeteroGraphConv(
            {rel: gnn.GraphConv(i, o, norm="right", allow_zero_in_degree=True)
             for rel in sorted(set(rels))}, aggregate="sum") for i, o in sizes])
        self.loops = nn.ModuleList([nn.Linear(i, o) for i, o in sizes])
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks, x: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``x``: features of the featured types (projected here), embedding rows of the rest;
        returns the category's rows of the last block's destinations."""
        h = {nt: self.proj[nt](v) if nt in self.proj else v for nt, v in x.items()}
        for i, (layer, loop, block) in enumerate(zip(self.layers, self.loops, blocks)):
            out = layer(block, h)
            h = {nt: out.get(nt, 0) + loop(h[nt][:block.num_dst_nodes(nt)])
                 for nt in block.dsttypes if block.num_dst_nodes(nt)}
            if i != len(self.layers) - 1:
                h = {nt: self.dropout(F.relu(v)) for nt, v in h.items()}
        return h[self.category]


def node_inputs(g, input_nodes: Mapping[str, torch.Tensor], embeds) -> dict[str, torch.Tensor]:
    """The first layer's inputs: ``feat`` rows where a type has them, ``embeds[type](ids)``
    (learned rows) for the types in ``embeds``. ``g`` is any graph with DGL's
    ``g.nodes[ntype].data`` (a DGLGraph, DGL's DistGraph, ours)."""
    x = {nt: g.nodes[nt].data["feat"][ids] for nt, ids in input_nodes.items()
         if nt not in embeds}
    x.update({nt: embeds[nt](ids) for nt, ids in input_nodes.items() if nt in embeds})
    return x
