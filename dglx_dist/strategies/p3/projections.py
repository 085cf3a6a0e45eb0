"""P3 on a graph with node and edge types: the featured types' input projections
(``self.proj[ntype](x)``, an ``nn.Linear``) split by feature columns; what a script sees and
the partitioning: docs/heterographs.md, "p3 on a typed graph". ``g.nodes[ntype].data["feat"]``
gives a :class:`~dglx_dist.strategies.p3.layer.ColumnSlice` handle whose ``F.linear`` runs
:meth:`SplitProjections.linear` (collective): the batch ids shared, each rank's partial from its
columns summed at the batch's owner (:class:`~dglx_dist.runtime.autograd.OwnerReduce`).

Backward pushes the owner's output gradient to every rank, so rank ``r``'s ``W.grad`` is
nonzero only in its columns and holds every rank's loss's gradient there: DDP's mean over the
ranks is exactly the gradient of the mean loss. Every rank projects the same types in the same
order (checked), and the backward exchanges run in the reverse order on every rank: each
projection passes a *token* (an empty tensor) to the next, and the last one is tied to the
model's output (forward hooks on the user's model), so autograd runs them last-to-first and
never skips one.
"""
from __future__ import annotations

import functools
from typing import Any

import torch

from dglx_dist.errors import InvalidValueError, StateError
from dglx_dist.kvstore import typed_key
from dglx_dist.kvstore.policy import rows_at
from dglx_dist.partition.load import PartitionDir
from dglx_dist.runtime.autograd import OwnerReduce, flatten_partials
from dglx_dist.runtime.autograd import tie as tie_grads
from dglx_dist.runtime.session import Session
from dglx_dist.strategies.p3.layer import ColumnSlice, whole_rows

__all__ = ["SplitProjections"]


class _OwnerSum(torch.autograd.Function):
    """``flats[j]`` (world order) -> the sum of every rank's ``flats[me]``, and a token for the
    next projection; backward runs only after the next projection's (its token's gradient)."""

    @staticmethod
    def forward(ctx, server, cross, token: torch.Tensor, *flats: torch.Tensor):
        ctx.plan, ctx.token_shape = OwnerReduce(server, cross, [f.numel() for f in flats]), \
            token.shape
        total = ctx.plan.finish_forward(ctx.plan.start_forward(flats))
        return total, token.new_zeros(0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor, _token: torch.Tensor):
        grads = ctx.plan.finish_backward(ctx.plan.start_backward(grad.contiguous()))
        return (None, None, grad.new_zeros(ctx.token_shape), *grads)


class SplitProjections:
    """This rank's column slice of every featured node type (rows in the graph's row order
    of the type) and P3's split input projection over them (see the module docstring). Not
    the typed twin of :class:`~dglx_dist.strategies.p3.layer.P3FirstLayer`: that splits a
    graph conv (every rank's block shared, partial aggregations, the pipeline, slices kept
    out of DDP), this a row-wise linear map before any conv (only ids shared, DDP's mean), so
    a graph without types is not its one-type case.

    Args:
        session: the job's session (one part per rank).
        pdir: the typed partitioning by columns.
        store: the graph's KVStore (whole rows are pulled through it when a handle is
            used other than by a linear map).
    """

    def __init__(self, session: Session, pdir: PartitionDir, store):
        self.session, self.store = session, store
        types, rank = pdir.types, session.rank
        self.index = {t: i for i, t in enumerate(types.ntypes)}
        self.feat: dict[str, torch.Tensor] = {}
        self.cols: dict[str, tuple[int, int]] = {}
        self.widths = {t: w for t, w in types.feat_dims.items() if w}
        for ntype, slices in pdir.type_slices.items():
            sl = slices.slice(rank)
            rows = pdir.load_type_feat(rank, ntype)[pdir.type_rows(ntype)]
            self.feat[ntype], self.cols[ntype] = torch.from_numpy(rows), (sl.start, sl.stop)
        self.held = {typed_key(t, "feat"): t for t in self.feat}
        self._token: torch.Tensor | None = None

    def rows(self, name: str, ids: torch.Tensor) -> ColumnSlice | None:
        """The handle on rows ``ids`` (row ids of the type) of store name ``name``, or None
        when this is not a featured type's ``feat``."""
        if name not in self.held:
            return None
        ntype = self.held[name]
        # gathered on the loader's side: the split linear map reads them in the forward
        return ColumnSlice(ids, self.feat[ntype], self.widths[ntype], whole_rows(self.store, name),
                           linear=functools.partial(self.linear, ntype)).gathered()

    def linear(self, ntype: str, handle: ColumnSlice, weight: torch.Tensor,
               bias: torch.Tensor | None) -> torch.Tensor:
        """``F.linear(x, weight, bias)`` for the rows ``handle`` stands for (collective)."""
        width = self.widths[ntype]
        if weight.dim() != 2 or weight.shape[1] != width:
            raise InvalidValueError(f"p3: a linear map of weight {tuple(weight.shape)} applied "
                                    f"to g.nodes[{ntype!r}].data['feat'] rows of width "
                                    f"{width}; expected a weight of shape (out, {width})")
        batches = self._share(ntype, handle.ids)
        lo, hi = self.cols[ntype]
        w = weight[:, lo:hi]
        me = self.session.rank
        partials = [[(handle.columns if j == me else rows_at(self.feat[ntype], ids))
                     .to(w.device, w.dtype, non_blocking=True) @ w.T]
                    for j, ids in enumerate(batches)]
        token = self._token if self._token is not None else weight.new_zeros(0)
        total, self._token = _OwnerSum.apply(self.session.server, self.session.cross, token,
                                             *flatten_partials(partials))
        out = total.view(handle.ids.numel(), weight.shape[0])
        return out if bias is None else out + bias

    def _share(self, ntype: str, ids: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's batch ids of ``ntype``, in rank order (collective); refuses ranks
        that project different types at this point."""
        mine = self.index[ntype]
        got = self.session.world.all_gather_v(torch.cat([torch.tensor([mine]), ids.long()]))
        if any(int(m[0]) != mine for m in got):
            names = [list(self.index)[int(m[0])] for m in got]
            raise StateError(f"p3: the ranks apply input projections of node types {names} "
                             "(by rank) at the same point; every rank must project the same "
                             "node types in the same order (a batch without nodes of a type "
                             "still projects its empty rows)")
        return [m[1:] for m in got]

    def begin(self, *_: Any) -> None:
        """A forward of the model starts: its projections start a new chain."""
        self._token = None

    def tie(self, _module, _args, output):
        """The model's output, tied to its last projection's token (a forward hook)."""
        token, self._token = self._token, None
        if token is None or not token.requires_grad:
            return None
        if isinstance(output, torch.Tensor) and output.requires_grad:
            return tie_grads(output, token)
        if isinstance(output, dict):
            for key, value in output.items():
                if isinstance(value, torch.Tensor) and value.requires_grad:
                    return {**output, key: tie_grads(value, token)}
        return None
