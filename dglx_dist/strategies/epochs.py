"""What an epoch of ``Trainer.fit`` yields (:class:`EpochResult`), and the hooks the trainer
lends a strategy for it (:class:`TrainHooks`). ``fit`` has one loop for every strategy: the
epochs are :attr:`TrainHooks.loader_epoch`'s, or an
:class:`~dglx_dist.strategies.abilities.OwnEpochs` strategy's own, each yielded once its
update is applied and suspended while the trainer records, evaluates and checkpoints
(docs/architecture.md, "The Trainer and `dglx train`").
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

__all__ = ["EpochResult", "TrainHooks"]


@dataclasses.dataclass(frozen=True)
class EpochResult:
    """One epoch's training on this rank, as its metrics record needs it.

    Attributes:
        epoch: the epoch's index (from 0).
        wall: seconds this rank spent training the epoch (evaluation excluded).
        steps: training steps of the epoch (the same on every rank).
        samples: output nodes trained on, on this rank.
        loss_sum: this rank's per-step losses summed (the record's ``loss`` is their mean over
            steps and ranks).
        first_nonfinite_step: this rank's first step whose loss was NaN or infinite (None:
            none).
        phases: this rank's seconds in each phase of the epoch's steps, by name
            (:data:`~dglx_dist.api.metrics.STEP_PHASES`; the record's ``phases_max`` is the
            largest over ranks); None: not timed (no such field).
        extra: fields the strategy adds to the record (numbers already reduced over the ranks,
            the same on every rank), in the order they are written.
    """

    epoch: int
    wall: float
    steps: int
    samples: int
    loss_sum: float
    first_nonfinite_step: int | None = None
    phases: Mapping[str, float] | None = None
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class TrainHooks:
    """What ``Trainer.fit`` lends :meth:`~dglx_dist.strategies.abilities.OwnEpochs.train_epochs`.

    Attributes:
        loader_epoch: trains epoch ``e`` through the trainer's loader steps (forward, the loss,
            backward, the optimizer step) and returns its result (collective).
        optimizer_step: steps the trainer's optimizer on the gradients the parameters hold
            (and counts the step); for a strategy that computes them itself.
        loss_fn: the loss the caller asked for (``loss_fn(logits, labels)``); a strategy that
            computes its own loss refuses another one.
    """

    loader_epoch: Callable[[int], EpochResult]
    optimizer_step: Callable[[], None]
    loss_fn: Callable
