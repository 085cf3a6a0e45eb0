"""The layer protocol: what the strategies need to know about one conv type (``dglx_dist.nn``'s
or ``dgl.nn``'s class of that name: one adapter serves both).

Each conv folder registers one :class:`ConvAdapter` under the conv's class name in
:data:`LAYERS` (entry-point group ``dglx_dist.layers`` for plug-ins): P3's column split
(:meth:`~ConvAdapter.input_linears`, :meth:`~ConvAdapter.partial`,
:meth:`~ConvAdapter.finish`), the source-degree rescaling of GraNNDis and the full-graph form
(:meth:`~ConvAdapter.degree_source_scale`) and dorylus's stages (:attr:`ConvAdapter.dorylus`);
docs/architecture.md, "A conv type". :func:`adapter_for` finds a module's adapter,
:func:`graph_convs` a model's convs.
"""
from __future__ import annotations

import abc
import dataclasses
import importlib
from typing import Any, Mapping

import torch
from torch import nn

from dglx_dist.convs.ops_base import Op
from dglx_dist.errors import InvalidValueError
from dglx_dist.registry import Registry
from dglx_dist.graphcore.block import Block

# A block an adapter's conv runs on is the package's Block, or DGL's DGLBlock where a model of
# dgl.nn's modules passes one on; ``Any`` names the second without importing DGL, which only
# dglx_dist/dgl/ imports (issue 78).

__all__ = ["LAYERS", "ConvAdapter", "ConvWrapper", "DorylusSupport", "InputLinear", "adapter_for",
           "feat_dropout", "first_conv", "graph_convs", "is_foreign_conv",
           "library_door", "at_the_edge"]

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


@dataclasses.dataclass(frozen=True)
class DorylusSupport:
    """How dorylus runs a conv type.

    Attributes:
        kind: the :class:`~dglx_dist.convs.dorylus_base.LayerKind` subclass that runs its
            stages (the conv folder's ``dorylus.py``).
        tasks: the tensor tasks the kind submits, by name (the conv folder's ``ops.TASKS``:
            :class:`~dglx_dist.convs.ops_base.Op` records); no other conv's kind submits
            them, and the pipeline refuses any other.
    """

    kind: type
    tasks: Mapping[str, Op]


class ConvAdapter(abc.ABC):
    """What the strategies need to know about one conv type: its column split, its
    source-degree normalisation, its dorylus support."""

    #: How dorylus runs this conv type; None: dorylus refuses it.
    dorylus: DorylusSupport | None = None

    @dataclasses.dataclass(frozen=True)
    class Config:
        pass

    def __init__(self, config=None, name: str = ""):
        self.config, self.registered_name = config, name

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
    def partial(self, conv: nn.Module, weights: list[torch.Tensor], block: Block | Any,
                x: torch.Tensor, edge_weight: torch.Tensor | None = None) -> list[torch.Tensor]:
        """This column slice's share of the layer: ``x`` holds the slice's columns of the
        block's source nodes, ``weights`` the input linears' matching columns, ``edge_weight``
        the conv's ``edge_weight=`` (one per edge of ``block``; None: none). Shapes depend
        only on the block and the conv, so every slice's partials can be summed."""

    @abc.abstractmethod
    def finish(self, conv: nn.Module, block: Block | Any, totals: list[torch.Tensor],
               edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        """The layer's output from the sums of every slice's partials (``edge_weight`` as in
        :meth:`partial`)."""

    def degree_source_scale(self, conv: nn.Module, block: Block | Any,
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
    for cls in () if is_foreign_conv(module) else type(module).__mro__:
        if cls.__name__ in LAYERS:
            return LAYERS.build(cls.__name__)
    what = _where(type(module)) if is_foreign_conv(module) else type(module).__name__
    raise InvalidValueError(f"no layer adapter for {what}; supported first "
                            f"layers: {', '.join(LAYERS.names())} (register one in "
                            "dglx_dist.convs.LAYERS)")


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


_CONV_PACKAGES = ("dgl.nn", "dglx_dist.nn")
"""Where graph convs come from: DGL's ``dgl.nn`` and the package's own (the same convs in
torch)."""
_NOT_CONVS = (*(f"dgl.nn.pytorch.{m}." for m in ("utils", "linear", "sparse_emb", "factory")),
              "dglx_dist.nn.relgraphconv.TypedLinear")
"""Their modules that run on no graph (``WeightBasis``, ``TypedLinear``, embeddings), by
qualified name prefix."""


_FOREIGN_BASES = ("torch_geometric.nn.conv.message_passing.MessagePassing",)
"""The bases of other libraries' graph convs (PyG's), by qualified name: such a conv reads
the block itself (``block.edge_index``, ``block.size``: the package's blocks), has no adapter
(its class name, e.g. ``SAGEConv``, names an adapter of another conv) and runs under the
strategies that run a model as it is (``Capabilities.foreign_convs``)."""


def _where(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def is_foreign_conv(module: nn.Module) -> bool:
    """Whether ``module`` is another library's graph conv (:data:`_FOREIGN_BASES`)."""
    return any(_where(c) in _FOREIGN_BASES for c in type(module).__mro__)


def graph_convs(model: nn.Module) -> list[tuple[nn.Module, str]]:
    """The model's graph convs (in registration order) and their dotted names.

    A module counts as a conv when an adapter is registered for it or it comes from
    ``dgl.nn`` or ``dglx_dist.nn`` (but for their helpers that run on no graph,
    :data:`_NOT_CONVS`), or it is another library's conv (:func:`is_foreign_conv`: PyG's
    ``MessagePassing``); modules inside a conv are part of it.
    """
    found: list[tuple[nn.Module, str]] = []
    for name, module in model.named_modules():
        if module is model or any(name.startswith(f"{outer}.") for _, outer in found):
            continue
        where = _where(type(module))
        if is_foreign_conv(module) or any(c.__name__ in LAYERS for c in type(module).__mro__) \
                or where.startswith(_CONV_PACKAGES) and not where.startswith(_NOT_CONVS):
            found.append((module, name))
    return found


_DOORS = {"dgl": "dglx_dist.dgl.models"}
"""The door of each other library whose modules a model may hold, by the library's top-level
package: a module giving ``CONVS`` (the library's convs, for the reference models) and
``at_edge(model)`` (makes a model of its modules take the package's blocks). It is imported by
its name on first use, as an entry point is: nothing below the door imports it."""


def library_door(name: str):
    """The door module of library ``name`` (:data:`_DOORS`; importing it may refuse where the
    library is not installed)."""
    return importlib.import_module(_DOORS[name])


def at_the_edge(model: nn.Module) -> None:
    """Wraps ``model`` once for each other library it holds modules of (its door's
    ``at_edge``: a model of ``dgl.nn``'s modules gets DGL's blocks): the package's loops hand
    every model the package's blocks."""
    held = {type(m).__module__.partition(".")[0] for m in model.modules()}
    for name in sorted(held & _DOORS.keys()):
        library_door(name).at_edge(model)


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


def feat_dropout(conv: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``x`` through the conv's ``feat_drop`` (unchanged when it has none)."""
    drop = getattr(conv, "feat_drop", None)
    return drop(x) if drop is not None else x
