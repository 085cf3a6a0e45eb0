"""Differentiable collectives: exchanges that autograd can run backwards.

:func:`reduce_to_owners` is P3's pull + reduce of partial activations: every rank computes a
partial result for every rank's batch, the partials travel to the batch's owner and are summed
there. Its backward pass is the push of the output's gradient to every rank: the sum's gradient
reaches each partial unchanged, so rank ``i`` receives owner ``j``'s output gradient as the
gradient of the partial it computed for ``j``.

Both directions are topology-aware, in two stages, so each partial crosses the slow
inter-server links once per server instead of once per rank:

* forward: within each server (``server`` group), the partials for the owners with local index
  ``l`` are summed on the server's rank with local index ``l``; those sums go to their owners
  across servers (``cross`` group: the ranks with one local index) and are summed there;
* backward: the owner sends its gradient once to each server's rank with its local index,
  which hands it to every rank of its server.

Every size is known on both sides (each rank holds every batch's structure), so no exchange
needs a round of counts.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch

from dglx_dist.runtime.comm import Comm

__all__ = ["reduce_to_owners"]


def _sum(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    total = parts[0].clone()
    for part in parts[1:]:  # member order: the same sum on every run
        total += part
    return total


class _ReduceToOwners(torch.autograd.Function):
    """``flats[j]`` (rank order) -> the sum of every rank's ``flats[me]``."""

    @staticmethod
    def forward(ctx, server: Comm, cross: Comm, *flats: torch.Tensor) -> torch.Tensor:
        per, me_local, me_server = server.size, server.index, cross.index
        sizes = [f.numel() for f in flats]
        owner = lambda s, l: s * per + l  # noqa: E731  (rank of server s, local index l)
        # stage 1, within the server: to local rank l, my partials for owners (every s, l)
        send = [torch.cat([flats[owner(s, l)].detach() for s in range(cross.size)])
                for l in range(per)]
        mine = [sizes[owner(s, me_local)] for s in range(cross.size)]
        got = server.all_to_all_v(send, recv_rows=[sum(mine)] * per)
        sums = torch.split(_sum(got), mine)  # this server's sum for owner (s, me_local)
        # stage 2, across servers: each sum to its owner
        total = _sum(cross.all_to_all_v(list(sums), recv_rows=[sizes[server.rank]] * cross.size))
        ctx.server, ctx.cross, ctx.sizes = server, cross, sizes
        return total

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        server, cross, sizes = ctx.server, ctx.cross, ctx.sizes
        per, me_local = server.size, server.index
        owner = lambda s, l: s * per + l  # noqa: E731
        grad = grad.contiguous()
        # stage 1, across servers: my gradient to each server's rank with my local index
        from_owners = cross.all_to_all_v([grad] * cross.size,
                                         recv_rows=[sizes[owner(s, me_local)]
                                                    for s in range(cross.size)])
        # stage 2, within the server: hand them to every local rank
        mine = torch.cat(from_owners)
        got = server.all_to_all_v([mine] * per, recv_rows=[
            sum(sizes[owner(s, l)] for s in range(cross.size)) for l in range(per)])
        grads: list[torch.Tensor | None] = [None] * len(sizes)
        for l, buf in enumerate(got):
            for s, piece in enumerate(torch.split(buf, [sizes[owner(s, l)]
                                                        for s in range(cross.size)])):
                grads[owner(s, l)] = piece
        return (None, None, *grads)


def reduce_to_owners(server: Comm, cross: Comm,
                     partials: Sequence[Sequence[torch.Tensor]]) -> list[torch.Tensor]:
    """Sums, on each rank, the partials every rank computed for it (collective).

    Args:
        server: this rank's server group (members in local-rank order).
        cross: the ranks with this rank's local index, one per server (in server order).
        partials: ``partials[j]``: this rank's tensors for rank ``j`` (world order); every
            rank sends rank ``j`` tensors of the same shapes (those of ``j``'s own).

    Returns:
        The element-wise sums of what every rank computed for this one, shaped like
        ``partials[rank]``. Differentiable: gradients flow back to every rank's partials.
    """
    world = server.size * cross.size
    if len(partials) != world:
        raise ValueError(f"reduce_to_owners needs one list of partials per rank ({world}), "
                         f"got {len(partials)}")
    flats = [torch.cat([t.reshape(-1) for t in ts]) if ts else torch.zeros(0)
             for ts in partials]
    total = _ReduceToOwners.apply(server, cross, *flats)
    shapes = [t.shape for t in partials[server.rank]]
    return [piece.view(shape) for piece, shape in
            zip(torch.split(total, [math.prod(s) for s in shapes]), shapes)]
