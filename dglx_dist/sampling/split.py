"""DistDGL's two-level training-set split: every rank gets the same number of steps.

Training node ids (partitioned-graph ids, which METIS relabeling makes contiguous per part) are
sorted and cut into ``world_size`` contiguous chunks whose sizes differ by at most one, so a
rank's chunk lies mostly in its own server's part (locality) while every rank has the same
amount of work (balance). Loaders cut each rank's chunk into the same number of steps
(:func:`~dglx_dist.strategies.steps.equal_step_sizes`).
"""
from __future__ import annotations

import torch

__all__ = ["even_chunk", "owner_balanced_chunks"]


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
    pool = torch.cat([o[share[r]:] for r, o in enumerate(owned)])
    need = [share[r] - k.numel() for r, k in enumerate(keep)]
    return [torch.cat([k, fill]) for k, fill in zip(keep, torch.split(pool[:sum(need)], need))]
