"""Dorylus's weights: parameter-server replicas with weight stashing (:class:`ParamServers`)
and the per-epoch update, summed over the job and stepped through the trainer's optimizer
(:class:`WeightUpdates`); docs/strategies/dorylus.md, "What it does".
"""
from __future__ import annotations

import time
from typing import Callable, NamedTuple

import numpy as np
import torch

from dglx_dist.errors import StateError
from dglx_dist.runtime.autograd import set_grads

__all__ = ["ParamServers", "WeightUpdates", "Applied"]


def _snapshot(t: torch.Tensor | None) -> np.ndarray | None:
    return None if t is None else t.detach().numpy().astype(np.float32, copy=True)


class ParamServers:
    """``count`` parameter-server replicas of the model's layer parameters.

    Args:
        layers: per layer, the tensors its tasks need (None for an absent one, e.g. a bias);
            a version holds float32 copies of them in the same order.
        count: replicas.

    Versions are snapshots of the parameters; a version stays alive while an interval that
    checked it out (its stash) has not released it.
    """

    def __init__(self, layers: list[tuple[torch.Tensor | None, ...]], count: int):
        self.layers, self.count = layers, count
        self.version, self._load = -1, [0] * count
        self._stash: list[dict[int, list]] = [{} for _ in range(count)]
        self._refs: dict[tuple[int, int], int] = {}
        self.refresh()

    def refresh(self) -> None:
        """A new latest version from the current parameters (after an update)."""
        self.version += 1
        self._latest = [tuple(_snapshot(t) for t in layer) for layer in self.layers]

    def checkout(self) -> tuple[int, int]:
        """(server, version) for an interval starting its epoch: the latest weights, stashed
        on the least-loaded server."""
        ps = min(range(self.count), key=lambda k: self._load[k])
        self._stash[ps].setdefault(self.version, self._latest)
        self._refs[(ps, self.version)] = self._refs.get((ps, self.version), 0) + 1
        self._load[ps] += 1
        return ps, self.version

    def weights(self, ps: int, version: int) -> list[tuple[np.ndarray | None, ...]]:
        try:
            return self._stash[ps][version]
        except KeyError:
            raise StateError(f"parameter server {ps} holds no stash of version {version} "
                             f"(held: {sorted(self._stash[ps])})") from None

    def release(self, ps: int, version: int) -> None:
        key = (ps, version)
        self._refs[key] -= 1
        self._load[ps] -= 1
        if self._refs[key] == 0:
            del self._refs[key]
            del self._stash[ps][version]

    def stashes(self) -> int:
        return sum(len(s) for s in self._stash)


class Applied(NamedTuple):
    """An epoch's weight update, applied: the epoch, the job's training loss in it, and the
    seconds since the previous update was applied (or the run began) on this rank."""

    epoch: int
    loss: float
    wall: float


class WeightUpdates:
    """Weight updates of a training run: one all-reduce per epoch on a group of its own, then
    the optimizer step once it completes.

    Args:
        strategy: gives ``param_grads(acc_grads)``, ``params``, ``wu_comm`` and ``ps``.
        optimizer_step: steps the trainer's optimizer on the parameters' gradients (the
            trainer's hook, :attr:`~dglx_dist.strategies.epochs.TrainHooks.optimizer_step`).
        first: the run's first epoch.
    """

    def __init__(self, strategy, optimizer_step: Callable[[], None], first: int):
        self.s, self.optimizer_step = strategy, optimizer_step
        self.applied, self._queue = first - 1, []
        self.restart_clock()

    def restart_clock(self) -> None:
        """The next update's ``wall`` counts from now (what the caller did with the last one,
        e.g. an evaluation, is not the next epoch's)."""
        self._t0 = time.perf_counter()

    def epoch_done(self, epoch: int, acc: dict) -> None:
        grads = self.s.param_grads(acc["grads"].pop(epoch, None))
        flat = torch.cat([g.reshape(-1) for g in grads] +
                         [torch.tensor([acc["loss"].pop(epoch, 0.0)])]).double()
        self._queue.append((epoch, self.s.wu_comm.start_all_reduce(flat)))

    def in_flight(self) -> list:
        """The all-reduces of updates under way (:class:`~dglx_dist.runtime.pending.Pending`),
        oldest first."""
        return [pending for _, pending in self._queue]

    def poll(self) -> Applied | None:
        """Applies the oldest update if its all-reduce completed; returns it (None: none)."""
        if not self._queue or not self._queue[0][1].done():
            return None
        epoch, pending = self._queue.pop(0)
        flat = pending.wait()
        set_grads(self.s.params, flat[:-1])
        self.optimizer_step()
        self.s.ps.refresh()
        self.applied = epoch
        return Applied(epoch, float(flat[-1]), time.perf_counter() - self._t0)
