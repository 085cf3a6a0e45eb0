"""What dorylus asks of a conv type: the :class:`LayerKind` base its stage classes
(``convs/<conv>/dorylus.py``) subclass, and what every kind shares (:class:`Stage`,
:func:`add_grad` / :func:`summed_grads`, :func:`activation_name`, :func:`dropout_p`,
:func:`task_seed`, :func:`dropout_header`, :func:`cross_edges`, :func:`csr`, :func:`f32`). The
seam with ``strategies/dorylus/``: docs/architecture.md, "A conv type".
"""
from __future__ import annotations

import abc
import dataclasses
import functools
import warnings
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dglx_dist.errors import InvalidValueError

__all__ = ["LayerKind", "Slot", "Stage", "add_grad", "activation_name", "cross_edges", "csr",
           "dropout_header",
           "dropout_p", "f32", "summed_grads", "task_seed"]

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
    return {key: functools.reduce(torch.add, [g for i in sorted(per_interval)
                                              for g in per_interval[i]])
            for key, per_interval in (grads or {}).items()}


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


def dropout_header(p: float, train: bool, seed: int) -> dict:
    """A task's dropout fields: probability ``p`` in training (none otherwise), ``seed``."""
    p = p if train else 0.0
    return {"dropout": p, "seed": seed, "train": bool(p > 0)}


def _to_param(param: torch.Tensor, transposed: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    """A gradient of the tasks' as ``param``'s."""
    return (lambda g: g.t()) if transposed else (lambda g: g.reshape(param.shape))


def f32(t: torch.Tensor | np.ndarray) -> np.ndarray:
    """``t`` as a contiguous float32 array, a task's input."""
    return np.ascontiguousarray(t.numpy() if isinstance(t, torch.Tensor) else t,
                                dtype=np.float32)


def cross_edges(gs, extra: torch.Tensor) -> tuple[list[torch.Tensor], list[tuple]]:
    """Sends each in-edge whose source another rank owns to that owner, with its ``extra``
    (one value per in-edge; collective). Returns the masks of the in-edges sent to each rank,
    and per rank what came from it: the sources' own rows, the destinations' columns among
    the reverse ghosts (after the own rows) and their ``extra``."""
    dst_row, _, src, src_owner = gs.in_edges
    me = gs.comm.group_rank
    cross = [(src_owner == p) & (p != me) for p in range(gs.comm.size)]
    got = [gs.comm.all_to_all_v([t[c] for c in cross]) for t in (src, gs.core[dst_row], extra)]
    rkey = gs.rghost_owner * gs.num_nodes + gs.rghost_ids  # sorted: the reverse-ghost columns
    return cross, [(torch.searchsorted(gs.core, s),
                    gs.n + torch.searchsorted(rkey, p * gs.num_nodes + d), x)
                   for p, (s, d, x) in enumerate(zip(*got))]


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

    #: The gradient names of :meth:`tensors`, in order (a task returns ``d<name>``).
    GRADS: tuple[str, ...] = ()
    #: Those whose gradient is its parameter's transpose (a task's ``x @ W`` of an
    #: ``nn.Linear``'s weight).
    TRANSPOSED: frozenset[str] = frozenset()

    @classmethod
    @abc.abstractmethod
    def tensors(cls, conv: nn.Module) -> tuple[torch.Tensor | None, ...]:
        """What a parameter server keeps of this layer (in the order requests read it)."""

    @classmethod
    def param_slots(cls, conv: nn.Module, layer: int) -> list[Slot]:
        """The conv's parameters (:meth:`tensors` but None) and where their gradients come
        from: the tasks' ``d<name>`` (:attr:`GRADS`), transposed where :attr:`TRANSPOSED`
        says so, else shaped as the parameter."""
        return [(p, (layer, name), _to_param(p, name in cls.TRANSPOSED))
                for p, name in zip(cls.tensors(conv), cls.GRADS) if p is not None]

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

    #: The stage that starts the backward from given logit gradients.
    LOGITS_BACKWARD = "BAV"

    @staticmethod
    @abc.abstractmethod
    def forward_stages(num_layers: int) -> list[Stage]:
        """The forward up to the last layer's apply (AVL or AVO)."""

    @staticmethod
    @abc.abstractmethod
    def backward_stages(num_layers: int) -> list[Stage]:
        """The backward after the last layer's apply's (AVL or :attr:`LOGITS_BACKWARD`)."""

    @classmethod
    def train_program(cls, num_layers: int) -> list[Stage]:
        """Forward, the fused loss, the backward."""
        return cls.forward_stages(num_layers) + [Stage("AVL", num_layers - 1)] + \
            cls.backward_stages(num_layers)

    @classmethod
    def forward_program(cls, num_layers: int) -> list[Stage]:
        """Forward only, ending with the logits (AVO)."""
        return cls.forward_stages(num_layers) + [Stage("AVO", num_layers - 1)]

    @classmethod
    def backward_program(cls, num_layers: int) -> list[Stage]:
        """The backward from given logit gradients (a loop of one's own)."""
        return [Stage(cls.LOGITS_BACKWARD, num_layers - 1)] + cls.backward_stages(num_layers)

    # -- one pipeline --------------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def logits_width(self) -> int:
        """Columns of the logits."""

    @abc.abstractmethod
    def graph_task(self, st: Stage, i: int) -> None:
        """Runs a graph stage of interval ``i`` (for SC/BSC: what precedes the sends)."""

    @abc.abstractmethod
    def buffer(self, back: bool, layer: int) -> torch.Tensor:
        """The rows a scatter of ``layer`` (forward or ``back``) sends and fills."""

    def pack(self, back: bool, layer: int, route) -> torch.Tensor:
        """The message of a scatter along ``route`` (the graph server's ``Route``: ``peer``,
        ``interval`` and the buffer ``rows`` it carries), 1-D."""
        return self.buffer(back, layer)[route.rows].reshape(-1)

    def recv_numel(self, back: bool, layer: int, route) -> int:
        """Elements of the message arriving along ``route``."""
        return route.rows.numel() * self.buffer(back, layer).shape[1]

    def unpack(self, back: bool, layer: int, route, msg: torch.Tensor) -> None:
        """Stores a message that arrived along ``route`` (its first rows: the buffer's)."""
        buf = self.buffer(back, layer)
        buf[route.rows] = msg[:route.rows.numel() * buf.shape[1]].view(-1, buf.shape[1])

    @abc.abstractmethod
    def request(self, st: Stage, i: int, epoch: int, weights: list, train: bool,
                extra: dict) -> tuple[dict, dict[str, np.ndarray]]:
        """The header and arrays of interval ``i``'s tensor task ``st``."""

    @abc.abstractmethod
    def result(self, st: Stage, i: int, epoch: int, out: dict, acc: dict) -> None:
        """Takes in the outputs of interval ``i``'s tensor task ``st``."""

