"""Differentiable collectives: exchanges that autograd can run backwards.

:func:`halo_exchange`: the boundary rows of row-partitioned full-graph training (GraNNDis,
fullgraph); backward returns the rows' gradients to their holders. :func:`reduce_to_owners`:
P3's partial activations summed at each batch's owner, in two stages (within the server, then
once across servers; docs/strategies/p3.md); backward pushes the output gradient to every rank.
Every size is known on both sides, so no exchange needs a round of counts.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import torch

from dglx_dist.errors import InvalidValueError
from dglx_dist.runtime.comm import Comm, Pending

__all__ = ["GradientSync", "OwnerReduce", "flatten_partials", "halo_exchange",
           "halo_exchange_many", "reduce_to_owners", "set_grads", "tie", "unflatten"]


def _sum(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    total = parts[0].clone()
    for part in parts[1:]:  # member order: the same sum on every run
        total += part
    return total


class OwnerReduce:
    """The two-stage exchanges of one :func:`reduce_to_owners`, startable and finishable
    separately (P3's pipeline overlaps the inter-server stages with other mini-batches).

    Args:
        server / cross: this rank's server group and the ranks with its local index; cross
            None: the ranks of this server alone share the work (the other servers do the
            same among themselves).
        sizes: ``sizes[j]``: elements of the partial for rank ``j``'s batch (``j`` in world
            order, or in local order when ``cross`` is None; every rank knows every size).
    """

    def __init__(self, server: Comm, cross: Comm | None, sizes: Sequence[int]):
        self.server, self.cross, self.sizes = server, cross, list(sizes)
        self.num_servers = cross.size if cross is not None else 1
        self.me = server.global_rank if cross is not None else server.group_rank  # into sizes

    def _owner(self, s: int, l: int) -> int:
        return s * self.server.size + l

    def _across(self, l: int) -> list[int]:
        """Sizes of the partials for the owners with local index ``l``, by server."""
        return [self.sizes[self._owner(s, l)] for s in range(self.num_servers)]

    def start_forward(self, flats: Sequence[torch.Tensor]) -> Pending:
        """Stage 1 (within the server: this server's partials for the owners with local index
        ``l`` summed on local rank ``l``) done; stage 2 (the sums to their owners, across
        servers) started."""
        server, cross = self.server, self.cross
        send = [torch.cat([flats[self._owner(s, l)].detach() for s in range(self.num_servers)])
                for l in range(server.size)]
        mine = self._across(server.group_rank)
        got = server.all_to_all_v(send, recv_rows=[sum(mine)] * server.size)
        sums = list(torch.split(_sum(got), mine))
        if cross is None:  # no transfer: done already
            return Pending(server, "reduce_to_owners", None, lambda: sums)
        return cross.start_all_to_all_v(sums, recv_rows=[self.sizes[self.me]] * cross.size)

    @staticmethod
    def finish_forward(pending: Pending) -> torch.Tensor:
        """The sum of every rank's partial for this rank's batch."""
        return _sum(pending.wait())

    def start_backward(self, grad: torch.Tensor) -> Pending:
        """Stage 1 started: this batch's output gradient to each server's rank with this
        rank's local index."""
        if self.cross is None:
            return Pending(self.server, "reduce_to_owners", None, lambda: [grad.contiguous()])
        return self.cross.start_all_to_all_v([grad.contiguous()] * self.cross.size,
                                             recv_rows=self._across(self.server.group_rank))

    def finish_backward(self, pending: Pending) -> list[torch.Tensor]:
        """Stage 2 (hand the gradients to every rank of the server) done; returns, per rank
        ``j``, the gradient of the partial this rank computed for ``j``'s batch."""
        server = self.server
        mine = torch.cat(pending.wait())
        got = server.all_to_all_v([mine] * server.size,
                                  recv_rows=[sum(self._across(l)) for l in range(server.size)])
        grads: list[torch.Tensor] = [mine.new_zeros(0)] * len(self.sizes)
        for l, buf in enumerate(got):
            for s, piece in enumerate(torch.split(buf, self._across(l))):
                grads[self._owner(s, l)] = piece
        return grads


class _ReduceToOwners(torch.autograd.Function):
    """``flats[j]`` (rank order) -> the sum of every rank's ``flats[me]``."""

    @staticmethod
    def forward(ctx, server: Comm, cross: Comm | None, *flats: torch.Tensor) -> torch.Tensor:
        ctx.plan = OwnerReduce(server, cross, [f.numel() for f in flats])
        return ctx.plan.finish_forward(ctx.plan.start_forward(flats))

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return (None, None, *ctx.plan.finish_backward(ctx.plan.start_backward(grad)))


def flatten_partials(partials: Sequence[Sequence[torch.Tensor]]) -> list[torch.Tensor]:
    """One flat tensor per rank from its list of partials (differentiable; a rank without
    partials gets an empty one of the others' dtype and device)."""
    like = next((t for ts in partials for t in ts), torch.zeros(0))
    return [torch.cat([t.reshape(-1) for t in ts]) if ts else like.new_zeros(0)
            for ts in partials]


def unflatten(total: torch.Tensor, shapes: Sequence[torch.Size]) -> list[torch.Tensor]:
    """``total`` cut into tensors of ``shapes``."""
    return [piece.view(shape) for piece, shape in
            zip(torch.split(total, [math.prod(s) for s in shapes]), shapes)]


def set_grads(params: Sequence[torch.Tensor], flat: torch.Tensor) -> None:
    """Sets every parameter's ``.grad`` from ``flat``, their gradients concatenated (e.g. one
    all-reduced vector), in the parameters' dtype."""
    for p, g in zip(params, unflatten(flat, [p.shape for p in params])):
        p.grad = g.to(p.dtype).clone()


class GradientSync:
    """Reduces over the ranks what ONE backward pass added to the parameters' ``.grad``, so
    that several backward passes before one optimizer step (gradient accumulation) add up as
    they do under DDP, however the user zeroes gradients.

    :meth:`start` notes the gradients held before the pass, once per pass: a hook on every
    parameter calls it before the pass's first gradient accumulates (parameters after the
    model's output, a scorer's, get theirs before the output's gradient is known), and the
    strategy may call it too; :meth:`finish` (when the pass has ended) replaces the pass's
    local contribution by its reduction.

    Args:
        params: the parameters whose gradients are reduced.
    """

    def __init__(self, params: Sequence[torch.Tensor]):
        self.params = list(params)
        self._before: list[torch.Tensor | None] | None = None
        self._in_pass = False
        for p in self.params:
            p.register_hook(self._on_grad)

    def _on_grad(self, grad: torch.Tensor) -> torch.Tensor:
        self.start()
        return grad

    def start(self) -> None:
        """Notes the gradients held so far, unless this backward pass already did (called
        during a backward pass)."""
        if self._in_pass:
            return
        self._in_pass = True
        self._before = [None if p.grad is None else p.grad.detach().clone() for p in self.params]
        torch.autograd.Variable._execution_engine.queue_callback(self._pass_ended)

    def _pass_ended(self) -> None:
        self._in_pass = False

    def finish(self, reduce: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """``reduce(flat)``: the flat local contribution reduced over the ranks (collective)."""
        before, self._before = self._before or [None] * len(self.params), None
        local = [(p.grad if p.grad is not None else torch.zeros_like(p)) -
                 (b if b is not None else 0.0) for p, b in zip(self.params, before)]
        reduced = unflatten(reduce(torch.cat([g.reshape(-1) for g in local])),
                            [p.shape for p in self.params])
        for p, b, r in zip(self.params, before, reduced):
            if p.grad is None and b is None and not bool(r.any()):
                continue  # no gradient anywhere: stays None (an optimizer then skips it)
            p.grad = (r if b is None else b + r).to(p.dtype).clone()


def reduce_to_owners(server: Comm, cross: Comm | None,
                     partials: Sequence[Sequence[torch.Tensor]]) -> list[torch.Tensor]:
    """Sums, on each rank, the partials every rank computed for it (collective).

    Args:
        server: this rank's server group (members in local-rank order).
        cross: the ranks with this rank's local index, one per server (in server order); None
            when the ranks of each server work among themselves.
        partials: ``partials[j]``: this rank's tensors for rank ``j`` (world order, or local
            order when ``cross`` is None); every rank sends rank ``j`` tensors of the same
            shapes (those of ``j``'s own).

    Returns:
        The element-wise sums of what every rank computed for this one, shaped like its own
        partials. Differentiable: gradients flow back to every rank's partials.
    """
    plan_ranks = server.size * (cross.size if cross is not None else 1)
    if len(partials) != plan_ranks:
        raise InvalidValueError(f"reduce_to_owners needs one list of partials per rank "
                                f"({plan_ranks}), got {len(partials)}")
    me = server.global_rank if cross is not None else server.group_rank
    total = _ReduceToOwners.apply(server, cross, *flatten_partials(partials))
    return unflatten(total, [t.shape for t in partials[me]])


def halo_exchange(comm: Comm, h: torch.Tensor, send_idx: Sequence[torch.Tensor],
                  recv_rows: Sequence[int]) -> torch.Tensor:
    """``h`` followed by the rows this rank needs from each member of ``comm`` (collective).

    Args:
        comm: the members that exchange rows.
        h: this rank's rows.
        send_idx: ``send_idx[j]``: the rows of ``h`` member ``j`` needs, in the order it wants.
        recv_rows: ``recv_rows[j]``: how many rows member ``j`` sends here.

    Returns:
        ``h`` with the received rows appended in member order. Differentiable: the gradient of
        a received row goes back to its holder and is added to the row it came from.
    """
    return halo_exchange_many(comm, [h], [send_idx], [recv_rows])[0]


def _rows_of(t: torch.Tensor) -> int:
    """Elements of one row of ``t``."""
    return math.prod(t.shape[1:])


class _HaloExchangeMany(torch.autograd.Function):
    """Several ``h`` -> ``[h; rows asked for]`` in one exchange: per member, the rows of every
    tensor flattened into one buffer (one backward node, so every rank runs the exchanges of
    a layer at the same point of its backward pass)."""

    @staticmethod
    def forward(ctx, comm: Comm, send_idx, recv_rows, *hs: torch.Tensor):
        send_idx = [[idx.to(h.device) for idx in per] for per, h in zip(send_idx, hs)]
        widths = [_rows_of(h) for h in hs]
        ctx.comm, ctx.send_idx, ctx.recv_rows = comm, send_idx, recv_rows
        ctx.shapes = [h.shape for h in hs]
        got = _exchange_flat(comm, [[h.index_select(0, idx) for idx in per]
                                    for h, per in zip(hs, send_idx)],
                             [[n * w for n in per] for per, w in zip(recv_rows, widths)])
        return tuple(torch.cat([h, *(g.view(int(n), *h.shape[1:]) for g, n in zip(parts, per))])
                     for h, parts, per in zip(hs, got, recv_rows))

    @staticmethod
    def backward(ctx, *grads: torch.Tensor):
        outs, remote = [], []
        for grad, shape, per in zip(grads, ctx.shapes, ctx.recv_rows):
            outs.append(grad[:shape[0]].clone())
            remote.append(list(torch.split(grad[shape[0]:], list(per))))
        back = _exchange_flat(ctx.comm, remote, [[idx.numel() * _rows_of(g) for idx in per]
                                                 for g, per in zip(outs, ctx.send_idx)])
        for g, per, parts in zip(outs, ctx.send_idx, back):
            for idx, part in zip(per, parts):
                g.index_add_(0, idx, part.view(idx.numel(), *g.shape[1:]))
        return (None, None, None, *outs)


def _exchange_flat(comm: Comm, send: Sequence[Sequence[torch.Tensor]],
                   recv: Sequence[Sequence[int]]) -> list[list[torch.Tensor]]:
    """``send[t][j]``: rows of tensor ``t`` for member ``j``; ``recv[t][j]``: elements of
    tensor ``t`` member ``j`` sends here. Returns ``[t][j]`` what member ``j`` sent, flat."""
    flat = [[rows[j].reshape(-1) for rows in send] for j in range(comm.size)]
    payload = [f[0] if len(f) == 1 else torch.cat(f) for f in flat]  # one tensor: no copy
    got = comm.all_to_all_v(payload, recv_rows=[sum(r[j] for r in recv)
                                                for j in range(comm.size)])
    return [[got[j].narrow(0, sum(r[j] for r in recv[:t]), recv[t][j])
             for j in range(comm.size)] for t in range(len(send))]


def halo_exchange_many(comm: Comm, hs: Sequence[torch.Tensor],
                       send_idx: Sequence[Sequence[torch.Tensor]],
                       recv_rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, ...]:
    """:func:`halo_exchange` of several tensors at once (one transfer per member), e.g. the
    rows of each node type of a typed graph (collective).

    Args:
        hs: this rank's rows of each tensor (one dtype; any widths, the same on every rank).
        send_idx / recv_rows: per tensor, as for :func:`halo_exchange`.
    """
    dtypes = {h.dtype for h in hs}
    if len(dtypes) > 1:
        raise InvalidValueError(f"halo_exchange_many: tensors of dtypes {sorted(map(str, dtypes))}"
                                "; expected one dtype for all")
    return _HaloExchangeMany.apply(comm, send_idx, recv_rows, *hs)


class _ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t: torch.Tensor, factor: float) -> torch.Tensor:
        ctx.factor = factor
        return t.view_as(t)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        # a factor of 0 gives zeros even where the gradient is not finite (the mean loss of
        # an empty batch is NaN)
        return (grad * ctx.factor if ctx.factor else torch.zeros_like(grad)), None


class _Tie(torch.autograd.Function):
    @staticmethod
    def forward(ctx, out: torch.Tensor, *others: torch.Tensor) -> torch.Tensor:
        ctx.shapes = [(o.shape, o.dtype, o.device) for o in others]
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad: torch.Tensor, *_):
        return (grad, *(torch.zeros(s, dtype=d, device=dev) for s, d, dev in ctx.shapes))


def tie(out: torch.Tensor, *others: torch.Tensor) -> torch.Tensor:
    """``out`` unchanged; whenever a gradient reaches it, ``others`` get zero gradients, so
    the autograd functions behind them run their backward (collective ones on every rank,
    also where their rows reach no loss here)."""
    return _Tie.apply(out, *others) if torch.is_grad_enabled() else out


def scale_grad(t: torch.Tensor, factor: float) -> torch.Tensor:
    """``t`` unchanged, with the gradient that reaches it multiplied by ``factor`` (the weight
    of this rank's loss in a mean over every rank's samples)."""
    return _ScaleGrad.apply(t, factor)
