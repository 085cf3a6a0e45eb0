"""Differentiable collectives: exchanges that autograd can run backwards.

:func:`reduce_to_owners` is P3's pull + reduce of partial activations: every member computes a
partial result for every member's batch, the partials travel to the batch's owner and are
summed there. Its backward pass is the push of the output's gradient to every member: the sum's
gradient reaches each partial unchanged, so member ``i`` receives owner ``j``'s output gradient
as the gradient of the partial it computed for ``j``. Both directions are one ``all_to_all_v``
whose sizes every member knows (no round of counts).
"""
from __future__ import annotations

import math
from typing import Sequence

import torch

from dglx_dist.runtime.comm import Comm

__all__ = ["reduce_to_owners"]


class _ReduceToOwners(torch.autograd.Function):
    @staticmethod
    def forward(ctx, comm: Comm, *flats: torch.Tensor) -> torch.Tensor:
        own = flats[comm.index].numel()
        received = comm.all_to_all_v([f.detach().contiguous() for f in flats],
                                     recv_rows=[own] * comm.size)
        total = received[0].clone()
        for part in received[1:]:  # member order: the same sum on every run
            total += part
        ctx.comm, ctx.sizes = comm, [f.numel() for f in flats]
        return total

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        comm = ctx.comm
        grads = comm.all_to_all_v([grad.contiguous()] * comm.size, recv_rows=ctx.sizes)
        return (None, *grads)


def reduce_to_owners(comm: Comm, partials: Sequence[Sequence[torch.Tensor]]) -> list[torch.Tensor]:
    """Sums, on each member, the partials every member computed for it (collective).

    Args:
        comm: the members.
        partials: ``partials[j]``: this member's tensors for member ``j``; every member sends
            member ``j`` tensors of the same shapes (those of ``j``'s own ``partials[j]``).

    Returns:
        The element-wise sums of what every member sent here, shaped like ``partials[me]``.
        Differentiable: gradients flow back to every member's partials.
    """
    if len(partials) != comm.size:
        raise ValueError(f"reduce_to_owners needs one list of partials per member "
                         f"({comm.size}), got {len(partials)}")
    flats = [torch.cat([t.reshape(-1) for t in ts]) if ts else torch.zeros(0)
             for ts in partials]
    total = _ReduceToOwners.apply(comm, *flats)
    shapes = [t.shape for t in partials[comm.index]]
    return [piece.view(shape) for piece, shape in
            zip(torch.split(total, [math.prod(s) for s in shapes]), shapes)]
