"""Metrics over every rank: one call each (collective)."""
from __future__ import annotations

import torch

from dglx_dist.errors import InvalidValueError
from dglx_dist.runtime.session import Session, current_session

__all__ = ["all_reduce", "accuracy"]


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
