"""Metrics over every rank: one call each (collective)."""
from __future__ import annotations

import math
from typing import Any, Mapping

import torch

from dglx_dist.errors import InvalidValueError
from dglx_dist.memory import peak_rss_bytes
from dglx_dist.runtime.session import Session, current_session
from dglx_dist.strategies.epochs import EpochResult

__all__ = ["all_reduce", "accuracy", "epoch_record"]

_BYTES = ("sent_intra", "sent_inter", "recv_intra", "recv_inter")


def all_reduce(value, op: str = "sum", session: Session | None = None) -> torch.Tensor:
    """``value`` (a number or tensor) summed, averaged ("mean"), or the "max"/"min" over
    every rank; a new float64 tensor (collective)."""
    session = session or current_session()
    t = torch.as_tensor(value, dtype=torch.float64).clone().reshape(-1)
    if op in ("sum", "mean"):
        session.world.all_reduce(t)
        if op == "mean":
            t /= session.world_size
    elif op in ("max", "min"):
        every = torch.stack(session.world.all_gather(t))
        t = every.max(0).values if op == "max" else every.min(0).values
    else:
        raise InvalidValueError(f"all_reduce: op {op!r}; expected 'sum', 'mean', 'max' or 'min'")
    return t.reshape(torch.as_tensor(value).shape)


def accuracy(logits: torch.Tensor, labels: torch.Tensor,
             session: Session | None = None) -> float:
    """The share of rows whose argmax is the label, over every rank's rows (collective;
    ranks may pass different numbers of rows, none included)."""
    pred = logits.argmax(1) if logits.dim() > 1 else logits
    counts = all_reduce(torch.tensor([float((pred == labels).sum()), float(labels.numel())]),
                        session=session)
    return float(counts[0] / counts[1]) if counts[1] > 0 else 0.0


def epoch_record(result: EpochResult, before: Mapping[str, int], after: Mapping[str, int],
                 strategy: str, saved_peak: int | None = None,
                 session: Session | None = None) -> dict[str, Any]:
    """The epoch's metrics record (``docs/metrics.md``) from this rank's ``result`` and the
    byte counters (``session.counter.snapshot()``) before and after its training: numbers
    summed (bytes, samples, loss) or maxed (time, memory) over ranks, then the strategy's
    extra fields (collective). ``saved_peak``: this rank's largest activation bytes of a
    forward, reported as ``peak_saved_mb`` (None: not measured, no such field)."""
    session = session or current_session()
    world, steps = session.world, result.steps
    sums = torch.tensor([after[k] - before[k] for k in _BYTES] +
                        [result.samples, result.loss_sum], dtype=torch.float64)
    world.all_reduce(sums)
    bad = result.first_nonfinite_step
    maxes = torch.tensor([result.wall, float(peak_rss_bytes()), float(saved_peak or 0),
                          -math.inf if bad is None else -bad], dtype=torch.float64)
    world.all_reduce(maxes, op="max")
    record = {"epoch": result.epoch, "strategy": strategy, "world_size": session.world_size,
              "servers": session.topology.num_servers,
              "epoch_time": round(float(maxes[0]), 4), "steps": steps,
              "samples": int(sums[4]),
              "loss": round(float(sums[5]) / max(steps, 1) / session.world_size, 5)}
    record.update({f"bytes_{k}": int(v) for k, v in zip(_BYTES, sums[:4])})
    record["peak_mem_mb"] = round(float(maxes[1]) / (1 << 20), 1)
    if saved_peak is not None:
        record["peak_saved_mb"] = round(float(maxes[2]) / (1 << 20), 2)
    if math.isfinite(float(maxes[3])):  # the earliest over ranks
        record["first_nonfinite_step"] = int(-maxes[3])
    record.update(result.extra)
    return record
