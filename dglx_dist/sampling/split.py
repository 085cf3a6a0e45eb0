"""DistDGL's two-level training-set split: every rank gets the same number of steps.

Training node ids (partitioned-graph ids, which METIS relabeling makes contiguous per part) are
sorted and cut into ``world_size`` contiguous chunks whose sizes differ by at most one, so a
rank's chunk lies mostly in its own server's part (locality) while every rank has the same
amount of work (balance). Each epoch a rank shuffles its chunk and cuts mini-batches; the number
of steps is the same on every rank (a shorter chunk wraps around to fill its last batch).
"""
from __future__ import annotations

import math

import torch

__all__ = ["even_chunk", "epoch_batches", "owner_balanced_chunks", "steps_per_epoch"]


def even_chunk(sorted_ids: torch.Tensor, world_size: int, rank: int) -> torch.Tensor:
    """Rank ``rank``'s contiguous chunk of ``sorted_ids`` (sizes differ by at most one)."""
    n = sorted_ids.numel()
    lo = rank * n // world_size
    hi = (rank + 1) * n // world_size
    return sorted_ids[lo:hi]


def owner_balanced_chunks(owned: list[torch.Tensor]) -> list[torch.Tensor]:
    """Per-rank chunks when ids are owned by ranks (a hash book): each rank keeps its own ids,
    up to an even share; the surplus of the ranks above their share fills the others, in rank
    order (deterministic: every rank computes the same chunks from the same input).

    Args:
        owned: each rank's owned ids (every rank passes the same list).
    """
    world = len(owned)
    total = sum(int(o.numel()) for o in owned)
    share = [total // world + (1 if r < total % world else 0) for r in range(world)]
    keep = [o[:share[r]] for r, o in enumerate(owned)]
    spare = [o[share[r]:] for r, o in enumerate(owned) if o.numel() > share[r]]
    pool = torch.cat(spare) if spare else torch.zeros(0, dtype=torch.int64)
    chunks, used = [], 0
    for r, k in enumerate(keep):
        need = share[r] - k.numel()
        chunks.append(torch.cat([k, pool[used:used + need]]))
        used += need
    return chunks


def steps_per_epoch(num_ids: int, world_size: int, batch_size: int) -> int:
    """Steps every rank takes per epoch: enough for the largest chunk."""
    return max(1, math.ceil(math.ceil(num_ids / world_size) / batch_size))


def epoch_batches(chunk: torch.Tensor, steps: int, batch_size: int,
                  generator: torch.Generator) -> list[torch.Tensor]:
    """``steps`` mini-batches from a shuffled ``chunk`` (wrapping around if it is short)."""
    if chunk.numel() == 0:
        return [chunk[:0] for _ in range(steps)]
    order = chunk[torch.randperm(chunk.numel(), generator=generator)]
    need = steps * batch_size
    if order.numel() < need:
        order = order.repeat(math.ceil(need / order.numel()))
    per_step = min(batch_size, math.ceil(chunk.numel() / steps))
    return [order[i * per_step:(i + 1) * per_step] for i in range(steps)]
