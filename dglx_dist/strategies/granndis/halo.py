"""The graph conv of ``granndis`` and ``fullgraph``: its input completed with the boundary rows
other ranks hold, before the user's conv runs (see :mod:`dglx_dist.strategies.granndis`)."""
from __future__ import annotations

import torch
from torch import nn

from dglx_dist.convs import ConvWrapper, adapter_for
from dglx_dist.runtime.autograd import halo_exchange
from dglx_dist.runtime.comm import Comm
from dglx_dist.strategies.granndis.cobatch import LayerPlan

__all__ = ["HaloConv", "complete_rows"]


class HaloConv(ConvWrapper):
    """A graph conv that first completes its input with the rows other ranks hold.

    Args:
        conv: the user's graph conv (kept as ``self.conv``).
        plan_of: the :class:`~dglx_dist.strategies.granndis.cobatch.LayerPlan` of a block.
        comm: the ranks exchanging rows.
    """

    def __init__(self, conv: nn.Module, plan_of, comm: Comm):
        super().__init__()
        self.conv, self._plan_of, self._comm = conv, plan_of, comm
        try:
            self._adapter = adapter_for(conv)
        except ValueError:  # no adapter: a conv that does not normalise by source degrees
            self._adapter = None
        self._scales: dict[LayerPlan, torch.Tensor | None] = {}  # plans hash by identity

    def forward(self, block, h, *args, **kwargs):
        plan: LayerPlan | None = self._plan_of(block)
        if plan is None:  # a block of the caller's own (e.g. layer-wise inference): its
            return self.conv(block, h, *args, **kwargs)  # input rows are all given
        scale = self._degree_scale(plan)

        def complete(t: torch.Tensor) -> torch.Tensor:
            full = complete_rows(self._comm, t, plan)
            return full if scale is None else full * scale

        h = (complete(h[0]), h[1]) if isinstance(h, tuple) else complete(h)
        return self.conv(block, h, *args, **kwargs)

    def _degree_scale(self, plan: LayerPlan) -> torch.Tensor | None:
        if self._adapter is None:
            return None
        if plan not in self._scales:
            self._scales[plan] = self._adapter.degree_source_scale(
                self.conv, plan.block, plan.out_degree)
        return self._scales[plan]


def complete_rows(comm: Comm, t: torch.Tensor, plan: LayerPlan) -> torch.Tensor:
    """Every source row of ``plan``'s block, in its order: ``t`` (this rank's own rows, or
    every source's row already, as the loader's ``blocks[0].srcdata`` prefetch gives them)
    completed with the rows its peers hold. Every rank exchanges either way (the group's
    exchange is collective); rows given whole are sent without a gradient and the received
    ones dropped."""
    own, n_src = plan.own_rows(), plan.block.num_src_nodes()
    given = t.shape[0] == n_src and own != n_src
    if given:
        mine = t if plan.order is None else t.index_select(0, torch.argsort(plan.order))
        halo_exchange(comm, mine[:own].detach(), plan.send_idx, plan.recv_rows)
        return t
    full = halo_exchange(comm, t, plan.send_idx, plan.recv_rows)
    return full if plan.order is None else full.index_select(0, plan.order)
