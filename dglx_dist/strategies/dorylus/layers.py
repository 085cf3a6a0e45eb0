"""What Dorylus does per conv type: the programs, buffers, graph tasks and tensor-task requests.

The pipeline (:mod:`~dglx_dist.strategies.dorylus.pipeline`) walks intervals through a program
of stages and moves messages; everything that depends on the layer's math lives in a
:class:`LayerKind`. Which kind runs a conv type is said by the conv's own module in
:mod:`dglx_dist.convs`: its adapter's ``dorylus`` (a
:class:`~dglx_dist.convs.base.DorylusSupport`: the kind, by import path or class, and the
tensor tasks it may submit). :func:`layer_kind` resolves it, :func:`dorylus_conv_types` lists
the conv types that have one (``DorylusStrategy.conv_types``). A kind says:

* class level (the strategy, once per model): :meth:`~LayerKind.check` the convs,
  :meth:`~LayerKind.tensors` a parameter server snapshots per layer,
  :meth:`~LayerKind.param_slots` mapping the tasks' gradients to parameters,
  :meth:`~LayerKind.dropouts`, :meth:`~LayerKind.plan` (static structures, may use
  collectives) and the programs;
* instance level (one per pipeline): buffers, :meth:`~LayerKind.graph_task`, messages
  (:meth:`~LayerKind.pack` / :meth:`~LayerKind.unpack`), :meth:`~LayerKind.request` and
  :meth:`~LayerKind.result` of tensor tasks.

``GraphConv`` (GCN) is here; ``GATConv`` in :mod:`~dglx_dist.strategies.dorylus.gat`,
``SAGEConv`` (mean) in :mod:`~dglx_dist.strategies.dorylus.sage`.
"""
from __future__ import annotations

import abc
import dataclasses
import importlib
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dglx_dist.convs import LAYERS
from dglx_dist.convs.base import DorylusSupport
from dglx_dist.convs.graphconv import weight_problem
from dglx_dist.errors import InvalidTypeError, InvalidValueError
from dglx_dist.strategies.dorylus.graph import GraphServer, Route

__all__ = ["LayerKind", "GcnLayers", "GcnPlan", "Stage", "add_grad", "activation_name",
           "dorylus_conv_types", "ConvTypesOfAdapters", "layer_kind", "summed_grads",
           "task_seed"]

#: (parameter, (layer, gradient name), gradient -> the parameter's shape)
Slot = tuple[nn.Parameter, tuple[int, str], Callable[[torch.Tensor], torch.Tensor]]


@dataclasses.dataclass(frozen=True)
class Stage:
    """One step of an interval's program.

    Attributes:
        kind: GA SC BGA BSC (graph tasks) or a tensor task (AV AE AVL AVO BAE BAV BAVO).
        layer: the layer it belongs to.
        gate: (backward?, layer): in sync mode (and an async run's first epoch) the stage waits
            until every interval of every rank has done that layer's scatter.
    """

    kind: str
    layer: int
    gate: tuple[bool, int] | None = None


def add_grad(acc: dict, epoch: int, key: tuple[int, str], value: np.ndarray,
             interval: int) -> None:
    """Records a task's gradient for the epoch under (layer, name), by interval: tasks finish
    in any order, and :func:`summed_grads` adds them up in interval order, so a run's weights
    do not depend on which task came back first."""
    per_interval = acc["grads"].setdefault(epoch, {}).setdefault(key, {})
    per_interval.setdefault(interval, []).append(
        torch.from_numpy(np.array(value, dtype=np.float32)))


def summed_grads(grads: dict | None) -> dict[tuple[int, str], torch.Tensor]:
    """An epoch's gradients by (layer, name): every interval's, summed in interval order (an
    interval's own contributions in the order its program made them)."""
    out = {}
    for key, per_interval in (grads or {}).items():
        parts = [g for i in sorted(per_interval) for g in per_interval[i]]
        total = parts[0].clone()
        for g in parts[1:]:
            total += g
        out[key] = total
    return out


def activation_name(activation, conv: str) -> str:
    """What the tensor tasks call a conv's own ``activation``: "none" (None or
    ``nn.Identity``) or "relu" (``F.relu``, ``torch.relu`` or an ``nn.ReLU``).

    Raises:
        ValueError: any other activation, naming it and the conv ``conv``.
    """
    if activation is None or isinstance(activation, nn.Identity):
        return "none"
    if activation in (F.relu, torch.relu) or isinstance(activation, nn.ReLU):
        return "relu"
    raise InvalidValueError(f"dorylus cannot run {conv} with activation={activation!r}: the tensor "
                            f"tasks apply ReLU (F.relu, torch.relu, nn.ReLU) or no activation "
                            f"(None, nn.Identity)")


def task_seed(seed: int, epoch: int, layer: int) -> int:
    """The dropout seed of a layer in an epoch (forward and backward tasks agree on it)."""
    return (seed * 1_000_003 + epoch * 131 + layer) % (1 << 62)


class ConvTypesOfAdapters:
    """``conv_types`` computed on every access, on the class too: the registry may gain
    entry-point plug-ins (:func:`dorylus_conv_types`)."""

    def __get__(self, obj, owner=None) -> tuple[str, ...]:
        return dorylus_conv_types()


def dorylus_conv_types() -> tuple[str, ...]:
    """The conv class names dorylus runs: those whose adapter in
    :data:`~dglx_dist.convs.LAYERS` has dorylus support (entry-point plug-ins too)."""
    return tuple(name for name in LAYERS.names() if LAYERS.get(name).dorylus is not None)


def layer_kind(conv_type: str) -> tuple[type["LayerKind"], DorylusSupport]:
    """The :class:`LayerKind` that runs conv class ``conv_type`` and its support record.

    Raises:
        InvalidValueError: dorylus has no layer kind for it (naming the ones it has).
        InvalidTypeError: the adapter's ``dorylus.kind`` is not a LayerKind.
    """
    support = LAYERS.get(conv_type).dorylus if conv_type in LAYERS else None
    if support is None:
        raise InvalidValueError(f"dorylus cannot run {conv_type}; it runs "
                                f"{', '.join(dorylus_conv_types())}")
    kind = support.kind
    if isinstance(kind, str):
        module, _, qualname = kind.partition(":")
        kind = importlib.import_module(module)
        for part in qualname.split("."):
            kind = getattr(kind, part)
    if not (isinstance(kind, type) and issubclass(kind, LayerKind)):
        raise InvalidTypeError(f"the {conv_type} adapter's dorylus kind {support.kind!r} is not "
                               "a dglx_dist.strategies.dorylus.layers.LayerKind subclass")
    return kind, support


class LayerKind(abc.ABC):
    """One conv type's share of the pipeline (see the module docstring).

    Args:
        plan: what :meth:`plan` returned.
        gs: the graph server.
        feat: layer-0 rows (own then ghosts).
        spec: per-layer dropout and the seed.
    """

    def __init__(self, plan, gs: GraphServer, feat: torch.Tensor, spec):
        self.plan, self.gs, self.feat, self.spec = plan, gs, feat, spec

    # -- the model (class level) ---------------------------------------------------------------
    @classmethod
    @abc.abstractmethod
    def check(cls, convs: list[tuple[nn.Module, str]]) -> None:
        """Raises ValueError naming the conv and what is expected when one cannot run."""

    @classmethod
    @abc.abstractmethod
    def tensors(cls, conv: nn.Module) -> tuple[torch.Tensor | None, ...]:
        """What a parameter server keeps of this layer (in the order requests read it)."""

    @classmethod
    @abc.abstractmethod
    def param_slots(cls, conv: nn.Module, layer: int) -> list[Slot]:
        """The conv's parameters and where their gradients come from."""

    @classmethod
    @abc.abstractmethod
    def dropouts(cls, model: nn.Module, convs: list[tuple[nn.Module, str]],
                 override: float) -> tuple[float, ...]:
        """The dropout probability per layer as the tasks apply it: the model's, or
        ``override`` (the strategy's ``dropout`` option) where that is not -1."""

    @classmethod
    def plan(cls, gs: GraphServer, convs: list[tuple[nn.Module, str]]):
        """Static structures the pipelines share (may run collectives: every rank calls it)."""
        return None

    @staticmethod
    @abc.abstractmethod
    def train_program(num_layers: int) -> list[Stage]:
        """Forward, the fused loss, the backward."""

    @staticmethod
    @abc.abstractmethod
    def forward_program(num_layers: int) -> list[Stage]:
        """Forward only, ending with the logits (AVO)."""

    @staticmethod
    @abc.abstractmethod
    def backward_program(num_layers: int) -> list[Stage]:
        """The backward from given logit gradients (a loop of one's own)."""

    # -- one pipeline --------------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def logits_width(self) -> int:
        """Columns of the logits."""

    @abc.abstractmethod
    def graph_task(self, st: Stage, i: int) -> None:
        """Runs a graph stage of interval ``i`` (for SC/BSC: what precedes the sends)."""

    @abc.abstractmethod
    def pack(self, back: bool, layer: int, route: Route) -> torch.Tensor:
        """The message of a scatter along ``route`` (1-D)."""

    @abc.abstractmethod
    def recv_numel(self, back: bool, layer: int, route: Route) -> int:
        """Elements of the message arriving along ``route``."""

    @abc.abstractmethod
    def unpack(self, back: bool, layer: int, route: Route, msg: torch.Tensor) -> None:
        """Stores a message that arrived along ``route``."""

    @abc.abstractmethod
    def request(self, st: Stage, i: int, epoch: int, weights: list, train: bool,
                extra: dict) -> tuple[dict, dict[str, np.ndarray]]:
        """The header and arrays of interval ``i``'s tensor task ``st``."""

    @abc.abstractmethod
    def result(self, st: Stage, i: int, epoch: int, out: dict, acc: dict) -> None:
        """Takes in the outputs of interval ``i``'s tensor task ``st``."""


def _f32(t: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.numpy(), dtype=np.float32)


@dataclasses.dataclass(frozen=True)
class GcnPlan:
    """Per layer: (input, output) widths and the conv's own activation ("relu" or "none")."""

    dims: tuple[tuple[int, int], ...]
    acts: tuple[str, ...]

    def act(self, layer: int) -> str:
        """What the layer's apply ends with: ReLU between layers (the model's; a conv's own
        ReLU before it changes nothing), the conv's own activation after the last."""
        return self.acts[layer] if layer == len(self.dims) - 1 else "relu"


class GcnLayers(LayerKind):
    """GCN (``GraphConv``, ``norm="both"``, ReLU and dropout between layers): gather, then
    apply (``A W + b``, ReLU, dropout) per interval; the last layer's apply fused with the loss.
    A conv's own activation (``activation=F.relu``) is applied in its apply too.

    Buffers: ``H[l]`` the input rows of layer l (own then ghosts), ``G[l]`` the gradients of
    layer l's gathered rows (own then reverse ghosts).
    """

    def __init__(self, plan: GcnPlan, gs, feat, spec):
        super().__init__(plan, gs, feat, spec)
        self.dims, self.L = plan.dims, len(plan.dims)
        n = gs.n
        self.H = [feat] + [torch.zeros(n + gs.num_ghosts, d[0]) for d in self.dims[1:]]
        self.G = [None] + [torch.zeros(n + gs.num_rghosts, d[0]) for d in self.dims[1:]]
        self.saved_a: dict[tuple[int, int], torch.Tensor] = {}  # (layer, interval) -> GA out
        self.saved_dh: dict[tuple[int, int], torch.Tensor] = {}  # (layer, interval) -> ∇GA
        self.ids = gs.core.numpy()

    @classmethod
    def check(cls, convs):
        for conv, name in convs:
            problems = [] if conv._norm == "both" else [f"norm={conv._norm!r} (expected 'both')"]
            problems += [p for p in [weight_problem(conv)] if p]
            if problems:
                raise InvalidValueError(f"dorylus cannot run {name} (GraphConv): "
                                        f"{'; '.join(problems)}")
            activation_name(conv._activation, f"{name} (GraphConv)")

    @classmethod
    def tensors(cls, conv):
        return (conv.weight, conv.bias)

    @classmethod
    def param_slots(cls, conv, layer):
        same = lambda g: g  # noqa: E731
        return [(p, (layer, key), same) for p, key in ((conv.weight, "W"), (conv.bias, "b"))
                if p is not None]

    @classmethod
    def dropouts(cls, model, convs, override):
        drop = getattr(model, "dropout", None)
        p = override if override >= 0 else (drop.p if isinstance(drop, nn.Dropout) else 0.0)
        return tuple([p] * (len(convs) - 1) + [0.0])  # after every layer but the last

    @classmethod
    def plan(cls, gs, convs):
        return GcnPlan(tuple((conv.weight.shape[0], conv.weight.shape[1]) for conv, _ in convs),
                       tuple(activation_name(conv._activation, name) for conv, name in convs))

    @staticmethod
    def train_program(num_layers):
        return _gcn_forward_to_last(num_layers) + [Stage("AVL", num_layers - 1)] + \
            _gcn_backward_from(num_layers - 1)

    @staticmethod
    def forward_program(num_layers):
        return _gcn_forward_to_last(num_layers) + [Stage("AVO", num_layers - 1)]

    @staticmethod
    def backward_program(num_layers):
        return [Stage("BAV", num_layers - 1)] + _gcn_backward_from(num_layers - 1)

    @property
    def logits_width(self):
        return self.dims[-1][1]

    # -- graph side ----------------------------------------------------------------------------
    def graph_task(self, st, i):
        if st.kind == "GA":
            self.saved_a[(st.layer, i)] = self.gs.gather(i, self.H[st.layer])
        elif st.kind == "BGA":
            self.saved_dh[(st.layer, i)] = self.gs.gather_back(i, self.G[st.layer])

    def _buffer(self, back, layer):
        return self.G[layer] if back else self.H[layer + 1]

    def pack(self, back, layer, route):
        return self._buffer(back, layer)[route.rows].reshape(-1)

    def recv_numel(self, back, layer, route):
        return route.rows.numel() * self._buffer(back, layer).shape[1]

    def unpack(self, back, layer, route, msg):
        buf = self._buffer(back, layer)
        buf[route.rows] = msg.view(-1, buf.shape[1])

    # -- tensor tasks --------------------------------------------------------------------------
    def request(self, st, i, epoch, weights, train, extra):
        rows = self.gs.rows(i)
        W, b = weights[st.layer]
        if b is None:
            b = np.zeros(W.shape[1], dtype=np.float32)
        last = st.layer == self.L - 1
        drop = self.spec.dropout[st.layer] if train else 0.0
        arrays = {"A": self.saved_a[(st.layer, i)].numpy(), "W": W, "b": b,
                  "ids": self.ids[rows]}
        header = {"act": self.plan.act(st.layer), "dropout": drop,
                  "seed": task_seed(self.spec.seed, epoch, st.layer),
                  "train": bool(train and drop > 0)}
        if st.kind == "AVL":
            header = {"op": "av_loss", "act": header["act"], "need_dA": self.L > 1}
            arrays.pop("ids")
            arrays.update(extra["labels"](rows))
        elif st.kind == "BAV":
            dh = (extra["dlogits"][rows] if last else self.saved_dh[(st.layer + 1, i)])
            header.update(op="av_grad", need_dA=st.layer >= 1)
            arrays["dH"] = _f32(dh)
        else:
            header["op"] = "av"
        return header, arrays

    def result(self, st, i, epoch, out, acc):
        rows = self.gs.rows(i)
        if st.kind == "AV":
            self.H[st.layer + 1][rows] = torch.from_numpy(np.array(out["H"]))
        elif st.kind == "AVO":
            acc["logits"][rows] = torch.from_numpy(np.array(out["H"]))
        else:
            add_grad(acc, epoch, (st.layer, "W"), out["dW"], i)
            add_grad(acc, epoch, (st.layer, "b"), out["db"], i)
            if st.kind == "AVL":
                acc["loss"][epoch] = acc["loss"].get(epoch, 0.0) + float(out["loss"][0])
            if "dA" in out:
                self.G[st.layer][rows] = torch.from_numpy(np.array(out["dA"]))
        self.saved_dh.pop((st.layer + 1, i), None)


def _gcn_backward_from(layer: int) -> list[Stage]:
    out = []
    for l in range(layer, -1, -1):
        if l != layer:
            out.append(Stage("BAV", l))
        if l >= 1:
            out += [Stage("BSC", l), Stage("BGA", l, gate=(True, l))]
    return out


def _gcn_forward_to_last(num_layers: int) -> list[Stage]:
    out = []
    for l in range(num_layers - 1):
        out += [Stage("GA", l, gate=(False, l - 1) if l else None), Stage("AV", l),
                Stage("SC", l)]
    last = num_layers - 1
    return out + [Stage("GA", last, gate=(False, last - 1) if last else None)]
