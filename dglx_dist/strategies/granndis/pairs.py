"""Link prediction under ``granndis`` and ``fullgraph``: every node's embedding, then the pairs.

A step of an edge loader is a full-graph forward (``co_batches=1``): each rank computes the
rows of its own nodes, as for node classification. The batch's positive and negative pairs
touch nodes of any rank, so their rows are fetched once per step from the ranks that computed
them (:class:`PairGather`: one request round for the ids, then one differentiable exchange of
the rows, whose gradients go back to their owners in backward). The step's gather plan
travels with the batch (``StepState.plan``). The loss may reach parameters that are not
upstream of the rows (a scorer with weights), so the pass's gradients are averaged over the
ranks after backward, as DDP does, rather than weighted on the rows.

The message-passing graph is the whole graph at every step, so DGL's ``exclude`` (leaving a
batch's edges out of its blocks) cannot be honoured and is refused: remove held-out edges
from the graph before ``distribute`` instead.
"""
from __future__ import annotations

import dataclasses
from typing import Iterator

import torch

from dglx_dist.errors import NotSupportedError
from dglx_dist.runtime.autograd import halo_exchange
from dglx_dist.runtime.comm import Comm
from dglx_dist.strategies.steps import (Blocks, EdgeStep, LoaderPlan, LoaderSpec, StepState,
                                        sampled_plan, seeded_batches)

__all__ = ["PairGather", "pair_plan", "pair_epoch"]


@dataclasses.dataclass(frozen=True, eq=False)
class PairGather:
    """Where the rows of a step's pair nodes are: this rank's output rows ``send_idx[j]`` go
    to rank ``j``; ``recv_rows[j]`` rows come from it; ``index`` picks the pair nodes' rows,
    in their order, from the output followed by the received rows."""

    send_idx: list[torch.Tensor]
    recv_rows: list[int]
    index: torch.Tensor

    def rows(self, world: Comm, out: torch.Tensor) -> torch.Tensor:
        """The pair nodes' rows of this rank's output ``out`` (collective, differentiable)."""
        full = halo_exchange(world, out, self.send_idx, self.recv_rows)
        return full.index_select(0, self.index.to(full.device))


def gather_plan(world: Comm, nodes: torch.Tensor, owner: torch.Tensor,
                targets: torch.Tensor) -> PairGather:
    """The :class:`PairGather` of ``nodes`` (partitioned ids, owned by ranks ``owner``) when
    this rank's output rows are those of ``targets`` (collective on ``world``)."""
    order = torch.argsort(targets)
    sorted_targets = targets[order]

    def rows_of(ids: torch.Tensor) -> torch.Tensor:
        return order[torch.searchsorted(sorted_targets, ids)]

    picks = [torch.nonzero(owner == j).squeeze(1) for j in range(world.size)]
    asked = [nodes[p] if j != world.group_rank else nodes[:0] for j, p in enumerate(picks)]
    wanted = world.all_to_all_v(asked)
    index = torch.empty(nodes.numel(), dtype=torch.int64)
    start = targets.numel()
    for j, pick in enumerate(picks):
        if j == world.group_rank:
            index[pick] = rows_of(nodes[pick])
        else:
            index[pick] = start + torch.arange(pick.numel())
            start += pick.numel()
    return PairGather([rows_of(w) for w in wanted], [a.numel() for a in asked], index)


def pair_plan(strategy, ids: torch.Tensor, spec: LoaderSpec) -> LoaderPlan:
    """An edge loader's plan under ``strategy`` (the GraNNDis strategy, which imports this
    module): this rank's edge ids (collective); refuses what a full-graph step cannot do."""
    name = strategy.registered_name
    if not strategy.types.untyped:
        raise NotSupportedError(f"{name}: edge loaders (link prediction) on a graph with edge "
                                "types are not supported yet; train them under distdgl")
    strategy.whole_graph("link prediction (every node's embedding at each step)")
    if spec.pairs.excludes:
        raise NotSupportedError(f"{name}: exclude= cannot be honoured (every step passes "
                                "messages over the whole graph); pass exclude=None and remove "
                                "held-out edges from the graph before distribute")
    return sampled_plan(strategy.session.world, ids, spec)


def pair_epoch(strategy, plan: LoaderPlan, spec: LoaderSpec,
               epoch: int) -> Iterator[EdgeStep]:
    """An epoch of an edge loader: per batch, the full-graph blocks and the pairs' gather
    plan (collective: every rank takes ``plan.steps`` steps)."""
    session, first = strategy.session, strategy.whole_graph("an edge loader").plans[0]
    targets = first.nodes[:first.num_targets]
    for _, _, batch in seeded_batches(session.rank, plan, spec, epoch):
        owner = torch.as_tensor(strategy.pdir.book.owner(batch.nodes))
        gather = gather_plan(session.world, batch.nodes, owner, targets)
        state = StepState(epoch=epoch, plan=gather)
        yield EdgeStep(first.nodes, batch.pair_graph, batch.neg_pair_graph,
                       Blocks([lp.block for lp in first.layers], state))
