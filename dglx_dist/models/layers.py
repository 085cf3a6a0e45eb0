"""The layer protocol: how a stock dgl.nn conv decomposes, so strategies can split it.

A conv layer = linear maps applied to its input features (its *input linears*) + the rest
(aggregation over the block's edges, bias, attention, activation, normalisation). Because the
input linears are linear, a layer's input can be cut into column slices: each slice's holder
computes a *partial* from its columns with the matching columns of the input linears, the
partials are summed, and the rest runs on the sum (P3's model-parallel first layer, "1M",
followed by the owner's "1D" part). Adapters say, per conv type, what the input linears are,
how to compute a partial and how to finish:

* ``SAGEConv`` mean / gcn: partial = ``fc_neigh(aggregate(x)) + fc_self(x_dst)`` on the slice
  (aggregation and projection commute), ``(dst, out)``; finish adds the bias, activation, norm.
* ``SAGEConv`` pool: the pool projection comes before a ReLU and a max, so the partial is
  ``[fc_pool(x_src) | fc_self(x_dst)]`` (rows of both stacked); finish does the rest. Costs
  ``src x in_feats`` per exchange: correct, but pulling features would often be cheaper.
* ``GraphConv``: partial = the normalised aggregation of the slice times its weight rows.
* ``GATConv``: the projection ``fc(x_src)`` is the partial (``src x heads*out``); finish is
  GATConv's own forward with ``fc`` replaced by the identity (attention needs the full sum:
  P3's "sync" in P-TAGS).

Adapters also say how a conv normalises by its sources' out-degrees
(:meth:`ConvAdapter.degree_source_scale`): on a block holding only part of a source's out-edges
(a rank's share of a full-graph layer) the block's own out-degree is too small, and the adapter
turns the graph's true out-degrees into a per-row factor that restores the full-graph
normalisation.

Adapters are registered under the conv class name in :data:`LAYERS` (entry points
``dglx_dist.layers`` add more); :func:`adapter_for` finds the one for a module.
"""
from __future__ import annotations

import abc
import dataclasses

import dgl
import torch
import torch.nn.functional as F
from torch import nn

from dglx_dist.errors import InvalidValueError
from dglx_dist.registry import Registry

__all__ = ["LAYERS", "ConvAdapter", "ConvWrapper", "InputLinear", "adapter_for", "first_conv", "graph_convs"]

LAYERS: Registry["ConvAdapter"] = Registry("layer adapter", entry_point_group="dglx_dist.layers")


@dataclasses.dataclass(frozen=True)
class InputLinear:
    """A weight applied to the layer's input features.

    Attributes:
        path: the parameter's dotted path inside the conv (e.g. ``"fc_neigh.weight"``).
        in_axis: the weight's axis that runs over input feature columns.
    """

    path: str
    in_axis: int

    def columns(self, weight: torch.Tensor, cols: slice | torch.Tensor) -> torch.Tensor:
        """The part of ``weight`` that multiplies input columns ``cols`` (a slice or indices)."""
        return weight[:, cols] if self.in_axis == 1 else weight[cols]


class ConvAdapter(abc.ABC):
    """How one dgl.nn conv type splits by input columns (see the module docstring)."""

    @dataclasses.dataclass(frozen=True)
    class Config:
        pass

    def __init__(self, config=None):
        self.config = config

    @abc.abstractmethod
    def example(self, in_feats: int, out_feats: int) -> nn.Module:
        """A stock conv of this type that can be split: the layer contract test
        (tests/unit/test_layers.py) checks every registered adapter on its example."""

    def check_column_split(self, conv: nn.Module) -> None:
        """Raises ValueError when this conv's configuration cannot be split by columns."""

    @abc.abstractmethod
    def input_linears(self, conv: nn.Module) -> list[InputLinear]:
        """The weights applied to the input features, in the order :meth:`partial` takes."""

    @abc.abstractmethod
    def partial(self, conv: nn.Module, weights: list[torch.Tensor], block: dgl.DGLGraph,
                x: torch.Tensor) -> list[torch.Tensor]:
        """This column slice's share of the layer: ``x`` holds the slice's columns of the
        block's source nodes, ``weights`` the input linears' matching columns. Shapes depend
        only on the block and the conv, so every slice's partials can be summed."""

    @abc.abstractmethod
    def finish(self, conv: nn.Module, block: dgl.DGLGraph,
               totals: list[torch.Tensor]) -> torch.Tensor:
        """The layer's output from the sums of every slice's partials."""

    def degree_source_scale(self, conv: nn.Module, block: dgl.DGLGraph,
                            out_degree: torch.Tensor) -> torch.Tensor | None:
        """A factor per source row of ``block`` such that ``conv`` on the scaled rows
        normalises by ``out_degree`` (each source node's out-degree in the whole graph) instead
        of the block's out-degrees; None when the conv does not use source degrees."""
        return None

    def strip(self, conv: nn.Module) -> None:
        """Removes the input linears' weights from ``conv`` (their column slices live
        elsewhere now); what stays are the parameters :meth:`finish` uses."""
        for lin in self.input_linears(conv):
            owner, _, name = lin.path.rpartition(".")
            module = conv.get_submodule(owner) if owner else conv
            delattr(module, name)
            module.register_parameter(name, None)


def adapter_for(module: nn.Module) -> ConvAdapter:
    """The adapter registered for ``module``'s class (or its nearest registered base).

    Raises:
        ValueError: no adapter for this type; the message lists the supported ones.
    """
    for cls in type(module).__mro__:
        if cls.__name__ in LAYERS:
            return LAYERS.build(cls.__name__)
    raise InvalidValueError(f"no layer adapter for {type(module).__name__}; supported first "
                            f"layers: {', '.join(LAYERS.names())} (register one in "
                            "dglx_dist.models.layers.LAYERS)")


class ConvWrapper(nn.Module):
    """Base of the modules a strategy puts in a conv's place (``self.conv`` is the conv):
    attributes it does not have are the conv's (e.g. ``_out_feats``), so code that reads
    them from ``model.layers[i]`` keeps working."""

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "conv":
                raise
            return getattr(self.conv, name)


def graph_convs(model: nn.Module) -> list[tuple[nn.Module, str]]:
    """The model's graph convs (in registration order) and their dotted names.

    A module counts as a conv when an adapter is registered for it or it comes from
    ``dgl.nn``; modules inside a conv are part of it.
    """
    found: list[tuple[nn.Module, str]] = []
    for name, module in model.named_modules():
        if module is model or any(name.startswith(f"{outer}.") for _, outer in found):
            continue
        if any(c.__name__ in LAYERS for c in type(module).__mro__) or \
                type(module).__module__.startswith("dgl.nn"):
            found.append((module, name))
    return found


def first_conv(model: nn.Module) -> tuple[nn.Module, str]:
    """The model's first graph conv (see :func:`graph_convs`): what its first block goes
    through.

    Raises:
        ValueError: the model has no dgl.nn conv.
    """
    convs = graph_convs(model)
    if not convs:
        raise InvalidValueError(f"{type(model).__name__} has no dgl.nn conv layer; expected a "
                                f"model whose first layer is one of {', '.join(LAYERS.names())}")
    return convs[0]


def _dropout(conv: nn.Module, x: torch.Tensor) -> torch.Tensor:
    drop = getattr(conv, "feat_drop", None)
    return drop(x) if drop is not None else x


@LAYERS.register("SAGEConv")
class SAGEAdapter(ConvAdapter):
    """SAGEConv with the mean, gcn or pool aggregator."""

    def example(self, in_feats, out_feats):
        return dgl.nn.SAGEConv(in_feats, out_feats, "mean", activation=torch.relu)

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

    def partial(self, conv, weights, block, x):
        x = _dropout(conv, x)
        num_dst, kind = block.num_dst_nodes(), conv._aggre_type
        if kind == "pool":
            return [F.linear(x, weights[0]), F.linear(x[:num_dst], weights[1])]
        w_neigh = weights[0]
        lin_first = x.shape[1] > w_neigh.shape[0]  # project first when it shrinks the rows
        h = F.linear(x, w_neigh) if lin_first else x
        if kind == "mean":
            neigh = dgl.ops.copy_u_mean(block, h)
        else:  # gcn: the neighbours and the node itself, averaged
            deg = block.in_degrees().to(h).unsqueeze(1)
            neigh = (dgl.ops.copy_u_sum(block, h) + h[:num_dst]) / (deg + 1)
        out = neigh if lin_first else F.linear(neigh, w_neigh)
        if kind == "mean":
            out = out + F.linear(x[:num_dst], weights[1])
        return [out]

    def finish(self, conv, block, totals):
        kind = conv._aggre_type
        if kind == "pool":
            pooled = torch.relu(totals[0] + conv.fc_pool.bias)
            # dgl.ops' max leaves -inf on a node with no in-edges; update_all (the stock conv)
            # gives it zeros
            neigh = dgl.ops.copy_u_max(block, pooled)
            neigh = neigh.masked_fill((block.in_degrees() == 0).unsqueeze(1), 0.0)
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


@LAYERS.register("GraphConv")
class GraphConvAdapter(ConvAdapter):
    """GraphConv (any ``norm``) with its own weight."""

    def example(self, in_feats, out_feats):
        return dgl.nn.GraphConv(in_feats, out_feats, allow_zero_in_degree=True)

    def check_column_split(self, conv: nn.Module) -> None:
        if conv.weight is None:
            raise InvalidValueError("GraphConv built with weight=False takes its weight as a "
                                    "forward argument and cannot be split by feature columns; "
                                    "build it with weight=True for the first layer")

    def input_linears(self, conv: nn.Module) -> list[InputLinear]:
        return [InputLinear("weight", 0)]

    def partial(self, conv, weights, block, x):
        if not conv._allow_zero_in_degree and bool((block.in_degrees() == 0).any()):
            raise InvalidValueError("GraphConv: the block has 0-in-degree nodes (add self-loops or "
                                    "build the layer with allow_zero_in_degree=True)")
        w, norm = weights[0], conv._norm
        if norm in ("left", "both"):
            deg = block.out_degrees().to(x).clamp(min=1)
            x = x * (deg.pow(-0.5) if norm == "both" else 1.0 / deg).unsqueeze(1)
        lin_first = x.shape[1] > w.shape[1]
        h = dgl.ops.copy_u_sum(block, x @ w if lin_first else x)
        h = h if lin_first else h @ w
        if norm in ("right", "both"):
            deg = block.in_degrees().to(x).clamp(min=1)
            h = h * (deg.pow(-0.5) if norm == "both" else 1.0 / deg).unsqueeze(1)
        return [h]

    def degree_source_scale(self, conv, block, out_degree):
        if conv._norm not in ("left", "both"):
            return None
        # GraphConv multiplies source rows by deg^-p (p = 1/2 or 1) of the block's
        # out-degrees, linearly before anything else: rows pre-scaled by
        # (block_deg / true_deg)^p come out normalised by the true degree
        power = 0.5 if conv._norm == "both" else 1.0
        ratio = block.out_degrees().to(out_degree.dtype).clamp(min=1) / out_degree.clamp(min=1)
        return ratio.pow(power).float().unsqueeze(1)

    def finish(self, conv, block, totals):
        rst = totals[0] if conv.bias is None else totals[0] + conv.bias
        return conv._activation(rst) if conv._activation is not None else rst


@LAYERS.register("GATConv")
class GATAdapter(ConvAdapter):
    """GATConv without residual and with one shared ``fc``: project, sum, then attention."""

    def example(self, in_feats, out_feats):
        return dgl.nn.GATConv(in_feats, out_feats, 2, allow_zero_in_degree=True)

    def check_column_split(self, conv: nn.Module) -> None:
        if hasattr(conv, "fc_src"):
            raise InvalidValueError("GATConv built with (src, dst) input sizes has two "
                                    "projections; the first layer needs one shared fc (an int "
                                    "in_feats)")
        if conv.res_fc is not None:
            raise InvalidValueError("GATConv with residual=True adds the unprojected input (or its "
                                    "own projection) to the output; build the first layer with "
                                    "residual=False")

    def input_linears(self, conv: nn.Module) -> list[InputLinear]:
        return [InputLinear("fc.weight", 1)]

    def partial(self, conv, weights, block, x):
        return [F.linear(_dropout(conv, x), weights[0])]

    def strip(self, conv: nn.Module) -> None:
        super().strip(conv)
        conv.fc = nn.Identity()  # finish feeds GATConv the summed projection

    def finish(self, conv, block, totals):
        drop, conv.feat_drop = conv.feat_drop, nn.Identity()  # dropout came before the sum
        try:
            return conv(block, totals[0])
        finally:
            conv.feat_drop = drop
