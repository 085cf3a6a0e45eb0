"""What dorylus asks of a conv type: the :class:`LayerKind` base its stage classes
(``convs/<conv>/dorylus.py``) subclass, and what every kind shares (:class:`Stage`,
:func:`add_grad` / :func:`summed_grads`, :func:`activation_name`, :func:`dropout_p`,
:func:`task_seed`, :func:`csr`, :func:`f32`). The seam with ``strategies/dorylus/``:
docs/architecture.md, "A conv type".
"""
from __future__ import annotations

import abc
import dataclasses
import warnings
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dglx_dist.errors import InvalidValueError

__all__ = ["LayerKind", "Slot", "Stage", "add_grad", "activation_name", "csr", "dropout_p", "f32",
           "summed_grads", "task_seed"]

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


def dropout_p(module, override: float) -> float:
    """``override`` (the strategy's ``dropout`` option) unless it is -1, else ``module``'s
    probability (0 unless it is an ``nn.Dropout``)."""
    return override if override >= 0 else (module.p if isinstance(module, nn.Dropout) else 0.0)


def task_seed(seed: int, epoch: int, layer: int) -> int:
    """The dropout seed of a layer in an epoch (forward and backward tasks agree on it)."""
    return (seed * 1_000_003 + epoch * 131 + layer) % (1 << 62)


def f32(t: torch.Tensor | np.ndarray) -> np.ndarray:
    """``t`` as a contiguous float32 array, a task's input."""
    return np.ascontiguousarray(t.numpy() if isinstance(t, torch.Tensor) else t,
                                dtype=np.float32)


def csr(rows: torch.Tensor, cols: torch.Tensor, vals: torch.Tensor, shape) -> torch.Tensor:
    """The sparse CSR matrix of the (row, column, value) entries; repeated entries are added."""
    order = torch.argsort(rows * shape[1] + cols)
    coo = torch.sparse_coo_tensor(torch.stack([rows[order], cols[order]]), vals[order],
                                  shape).coalesce()
    with warnings.catch_warnings():  # "sparse CSR support is in beta": the ops used here work
        warnings.simplefilter("ignore", UserWarning)
        return coo.to_sparse_csr()


class LayerKind(abc.ABC):
    """One conv type's share of the pipeline (docs/architecture.md, "A conv type").

    Args:
        plan: what :meth:`plan` returned.
        gs: the graph server (``strategies/dorylus/graph.py``'s ``GraphServer``: the part's
            rows ``n``, ghosts, intervals ``rows(i)``, the gathers ``gather``/``gather_back``/
            ``rows_mm``, the in-edges and the comm for :meth:`plan`'s collectives).
        feat: layer-0 rows (own then ghosts).
        spec: per-layer dropout and the seed.
    """

    def __init__(self, plan, gs, feat: torch.Tensor, spec):
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
    def plan(cls, gs, convs: list[tuple[nn.Module, str]]):
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
    def pack(self, back: bool, layer: int, route) -> torch.Tensor:
        """The message of a scatter along ``route`` (the graph server's ``Route``: ``peer``,
        ``interval`` and the buffer ``rows`` it carries), 1-D."""

    @abc.abstractmethod
    def recv_numel(self, back: bool, layer: int, route) -> int:
        """Elements of the message arriving along ``route``."""

    @abc.abstractmethod
    def unpack(self, back: bool, layer: int, route, msg: torch.Tensor) -> None:
        """Stores a message that arrived along ``route``."""

    @abc.abstractmethod
    def request(self, st: Stage, i: int, epoch: int, weights: list, train: bool,
                extra: dict) -> tuple[dict, dict[str, np.ndarray]]:
        """The header and arrays of interval ``i``'s tensor task ``st``."""

    @abc.abstractmethod
    def result(self, st: Stage, i: int, epoch: int, out: dict, acc: dict) -> None:
        """Takes in the outputs of interval ``i``'s tensor task ``st``."""

