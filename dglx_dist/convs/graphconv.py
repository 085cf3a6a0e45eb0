"""``dgl.nn.GraphConv``: what the strategies need to know about it.

GraphConv's degree normalisation is said once here (:func:`norm_powers`,
:func:`degree_factor`): a source row is multiplied by ``out_deg^-p_src`` before the sum over
in-edges and a destination row by ``in_deg^-p_dst`` after it, with ``(p_src, p_dst)`` from the
conv's ``norm``. The column split, the GraNNDis source scaling and dorylus's graph server
(``Â = out_deg^-1/2 in_deg^-1/2`` of the whole graph) all use it.

* P3's column split (any ``norm``, with its own weight): partial = the normalised aggregation
  of the slice times its weight rows; finish adds the bias and the activation.
* GraNNDis: ``norm`` "left" or "both" normalises by the sources' out-degrees; rows pre-scaled
  by ``(block_deg / true_deg)^p_src`` come out normalised by the whole graph's degrees.
* Dorylus: ``norm="both"``, the paper's GCN
  (:class:`~dglx_dist.strategies.dorylus.layers.GcnLayers`; tasks ``av``, ``av_grad``,
  ``av_loss`` in ``offload/tensor_fn/gcn_ops.py``).
"""
from __future__ import annotations

import dgl
import torch
from torch import nn

from dglx_dist.convs.base import LAYERS, ConvAdapter, DorylusSupport, InputLinear
from dglx_dist.errors import InvalidValueError

__all__ = ["GraphConvAdapter", "degree_factor", "norm_powers", "weight_problem"]

_POWERS = {"both": (0.5, 0.5), "left": (1.0, 0.0), "right": (0.0, 1.0), "none": (0.0, 0.0)}


def norm_powers(norm: str) -> tuple[float, float]:
    """GraphConv's degree exponents ``(p_src, p_dst)`` for its ``norm``."""
    return _POWERS[norm]


def degree_factor(deg: torch.Tensor, power: float) -> torch.Tensor:
    """``deg^-power`` per node, a degree of 0 counting as 1 (as GraphConv does)."""
    return deg.clamp(min=1).pow(-power)


def weight_problem(conv: nn.Module) -> str | None:
    """What keeps a GraphConv from having its weight as a parameter, or None."""
    if conv.weight is None:
        return ("weight=False (its weight is a forward argument, not a parameter: build it "
                "with weight=True)")
    return None


@LAYERS.register("GraphConv")
class GraphConvAdapter(ConvAdapter):
    """GraphConv (any ``norm``) with its own weight."""

    dorylus = DorylusSupport("dglx_dist.strategies.dorylus.layers:GcnLayers",
                             ("av", "av_grad", "av_loss"))

    def example(self, in_feats, out_feats):
        return dgl.nn.GraphConv(in_feats, out_feats, allow_zero_in_degree=True)

    def check_column_split(self, conv: nn.Module) -> None:
        problem = weight_problem(conv)
        if problem:
            raise InvalidValueError(f"GraphConv built with {problem} cannot be split by feature "
                                    "columns for the first layer")

    def input_linears(self, conv: nn.Module) -> list[InputLinear]:
        return [InputLinear("weight", 0)]

    def partial(self, conv, weights, block, x):
        if not conv._allow_zero_in_degree and bool((block.in_degrees() == 0).any()):
            raise InvalidValueError("GraphConv: the block has 0-in-degree nodes (add self-loops or "
                                    "build the layer with allow_zero_in_degree=True)")
        w = weights[0]
        p_src, p_dst = norm_powers(conv._norm)
        if p_src:
            x = x * degree_factor(block.out_degrees().to(x), p_src).unsqueeze(1)
        lin_first = x.shape[1] > w.shape[1]
        h = dgl.ops.copy_u_sum(block, x @ w if lin_first else x)
        h = h if lin_first else h @ w
        if p_dst:
            h = h * degree_factor(block.in_degrees().to(x), p_dst).unsqueeze(1)
        return [h]

    def degree_source_scale(self, conv, block, out_degree):
        p_src = norm_powers(conv._norm)[0]
        if not p_src:
            return None
        # GraphConv multiplies source rows by deg^-p of the block's out-degrees, linearly
        # before anything else: rows pre-scaled by (block_deg / true_deg)^p come out
        # normalised by the true degree
        ratio = block.out_degrees().to(out_degree.dtype).clamp(min=1) / out_degree.clamp(min=1)
        return ratio.pow(p_src).float().unsqueeze(1)

    def finish(self, conv, block, totals):
        rst = totals[0] if conv.bias is None else totals[0] + conv.bias
        return conv._activation(rst) if conv._activation is not None else rst
