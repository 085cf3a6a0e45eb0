"""Dorylus's weights: parameter-server replicas with weight stashing, and the per-epoch update.

* :class:`ParamServers`: ``count`` full replicas of every layer's parameters; an interval's
  weight version is stashed on the least-loaded replica when its epoch starts and used for its
  whole pass.
* :class:`WeightUpdates`: the update of an epoch sums every interval's gradients over the job
  (one all-reduce on a group of its own), then steps the trainer's optimizer.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch

from dglx_dist.errors import StateError
from dglx_dist.runtime.autograd import set_grads

__all__ = ["ParamServers", "WeightUpdates"]


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


class WeightUpdates:
    """Weight updates of a training run: one all-reduce per epoch on a group of its own, the
    optimizer step once it completes, then the trainer's per-epoch callback.

    Args:
        strategy: gives ``param_grads(acc_grads)``, ``params``, ``wu_comm`` and ``ps``.
        optimizer: stepped once per epoch.
        first: the run's first epoch.
        on_epoch: ``(epoch, {"loss", "wall"})`` once an epoch's update is applied.
    """

    def __init__(self, strategy, optimizer, first: int, on_epoch: Callable[[int, dict], None]):
        self.s, self.optimizer, self.on_epoch = strategy, optimizer, on_epoch
        self.applied, self._queue = first - 1, []
        self._t0 = time.perf_counter()

    def epoch_done(self, epoch: int, acc: dict) -> None:
        grads = self.s.param_grads(acc["grads"].pop(epoch, None))
        flat = torch.cat([g.reshape(-1) for g in grads] +
                         [torch.tensor([acc["loss"].pop(epoch, 0.0)])]).double()
        self._queue.append((epoch, self.s.wu_comm.start_all_reduce(flat)))

    def poll(self) -> bool:
        if not self._queue or not self._queue[0][1].done():
            return False
        epoch, pending = self._queue.pop(0)
        flat = pending.wait()
        set_grads(self.s.params, flat[:-1])
        self.optimizer.step()
        self.s.ps.refresh()
        self.applied = epoch
        wall = time.perf_counter() - self._t0
        self.on_epoch(epoch, {"loss": float(flat[-1]), "wall": wall})
        self._t0 = time.perf_counter()  # the callback's evaluation is not the next epoch's
        return True

    def applied_through(self) -> int:
        return self.applied
