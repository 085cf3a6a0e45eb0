"""A rank's co-batches: how the server's preloaded subgraph is cut into cooperative batches
(the rank's inner nodes dealt at random or cut into METIS clusters, each co-batch with its own
EAS neighbourhood), and the feature rows held for them.

:class:`~dglx_dist.strategies.granndis.strategy.GraNNDisStrategy` builds one set of co-batches
per count a loader asks for (its batches per rank; one for full-graph use, or the
``co_batches`` option for all), over the one preloaded subgraph; every set reads its rows from
one :class:`HeldRows`.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from dglx_dist.errors import InvalidValueError
from dglx_dist.partition.metis_lib import part_graph, symmetric_csr
from dglx_dist.runtime.comm import Comm
from dglx_dist.strategies.granndis.cobatch import (CoBatchPlan, GroupNodes, LayerPlan,
                                                   batch_edges, build_cobatch, levels,
                                                   outputs_only)

__all__ = ["ServerGraph", "Batching", "HeldRows", "TARGETS", "marked", "clusters",
           "cobatch_plans", "target_rows", "step_layers"]


@dataclasses.dataclass(frozen=True)
class ServerGraph:
    """What setup leaves for the co-batches.

    Attributes:
        part: this rank's partition; ``core_edges`` its inner nodes' in-edges (global ids).
        own: this rank's nodes (inner and its share of the preloaded external ones), sorted.
        nodes: the group's node set; ``edges`` the in-edges of ``own`` inside it (``(src,
            dst)``, and on a typed graph each edge's type index).
        out_degree: every node's out-degree in the whole graph.
    """

    part: Any
    core_edges: tuple[torch.Tensor, torch.Tensor]
    own: torch.Tensor
    nodes: GroupNodes
    edges: tuple[torch.Tensor, ...]
    out_degree: torch.Tensor


def marked(lp):
    """``lp`` (a co-batch's layer, typed or not) with its block carrying it
    (:func:`~dglx_dist.graphcore.block.plan_of` finds it on the block and on its copies:
    moved, cast, made DGL's); a conv given any other graph finds none."""
    lp.block = dataclasses.replace(lp.block, plan=lp)
    return lp


@dataclasses.dataclass(frozen=True)
class Batching:
    """One set of co-batches of a rank.

    Attributes:
        plans: every co-batch's plan (one: the whole graph).
    """

    plans: list[CoBatchPlan]

    def __post_init__(self) -> None:
        for plan in self.plans:  # a step's copies of the blocks, moved or cast, carry it too
            for lp in dict.fromkeys(plan.layers):
                marked(lp)

    @property
    def single(self) -> bool:
        return len(self.plans) == 1


class HeldRows:
    """The preloaded feature rows of a rank's nodes, pulled once each and shared by every set
    of co-batches: a row is pulled the first time a set needs it (the first set's rows in its
    order, so that the one co-batch of the full-graph form reads them without a copy).

    Args:
        own: this rank's nodes (inner and preloaded external), sorted.
        device: where the rows live.
    """

    def __init__(self, own: torch.Tensor, device: torch.device):
        self.own, self.device = own, device
        self.ids = own[:0]  # the held rows' node ids, in the rows' order
        self.feat: torch.Tensor | None = None
        self.row_of_own = torch.full_like(own, -1)

    def cover(self, ids: torch.Tensor, pull) -> None:
        """Holds the rows of ``ids`` (a subset of ``own``), pulling the missing ones with
        ``pull(ids) -> rows`` (collective: every rank calls it, maybe with none)."""
        at = torch.searchsorted(self.own, ids)
        missing = ids[self.row_of_own[at] < 0]
        rows = pull(missing).to(self.device)
        self.row_of_own[torch.searchsorted(self.own, missing)] = \
            self.ids.numel() + torch.arange(missing.numel())
        self.ids = torch.cat([self.ids, missing])
        self.feat = rows if self.feat is None else torch.cat([self.feat, rows])

    def get(self, ids: torch.Tensor) -> torch.Tensor | None:
        """The rows of ``ids``; None where some are not held here (nor anything held yet)."""
        if self.feat is None:
            return None
        n = ids.numel()
        if n <= self.ids.numel() and torch.equal(self.ids[:n], ids):
            return self.feat[:n]
        if self.own.numel() == 0:  # (no ids: the slice above)
            return None
        where = torch.searchsorted(self.own, ids).clamp(max=self.own.numel() - 1)
        if not bool((self.own[where] == ids).all()):
            return None
        where = self.row_of_own[where]
        if bool((where < 0).any()):
            return None
        return self.feat.index_select(0, where.to(self.feat.device))


TARGETS = ("random", "metis")
"""How a rank's nodes are dealt into co-batches (the ``cobatch_targets`` option)."""


def clusters(server: ServerGraph, R: int, seed: int = 0, how: str = "random") -> torch.Tensor:
    """Co-batch of every core node, the same in every run of one ``seed``: ``"random"`` deals
    the training nodes and the others at random, evenly, as a shuffled loader's batches
    would; ``"metis"`` takes METIS clusters of the rank's part (training and other nodes
    balanced; our METIS binding): smaller neighbourhoods, but on a graph whose labels follow
    its communities a co-batch then holds few classes and training converges slowly."""
    core = torch.from_numpy(server.part.core_gid)
    train = server.part.train.astype(bool)
    if R == 1 or core.numel() <= R:
        return torch.arange(core.numel()) % R
    if how == "random":
        gen, out = torch.Generator().manual_seed(seed), torch.empty(core.numel(), dtype=torch.int64)
        for mask in (train, ~train):
            idx = torch.from_numpy(np.flatnonzero(mask))
            out[idx[torch.randperm(idx.numel(), generator=gen)]] = torch.arange(idx.numel()) % R
        return out
    src, dst = server.core_edges
    inner = torch.isin(src, core)
    indptr, indices = symmetric_csr(torch.searchsorted(core, src[inner]).numpy(),
                                    torch.searchsorted(core, dst[inner]).numpy(), core.numel())
    vwgt = np.stack([train, ~train], axis=1).astype(np.int64)
    vwgt = vwgt[:, vwgt.sum(axis=0) > 0]  # a constraint no node has is none
    return torch.from_numpy(part_graph(indptr, indices, R, vwgt=vwgt, seed=seed))


def cobatch_plans(server: ServerGraph, R: int, num_layers: int, group: Comm, max_hop: int,
                  fanout: int, gen: torch.Generator, progress: bool = False,
                  targetable: torch.Tensor | None = None, seed: int = 0,
                  how: str = "random") -> list[CoBatchPlan]:
    """Every one of the ``R`` co-batches' plans on this rank (collective over ``group``);
    with ``R > 1`` each has its own EAS neighbourhood (``max_hop``, ``fanout``, sampled with
    ``gen``) inside the group's set. ``targetable``: a mask over ``server.own`` of the nodes that may be targets
    (None: every inner node; a typed graph's labeled types); ``how``: see :func:`clusters`."""
    own, core = server.own, torch.from_numpy(server.part.core_gid)
    cluster = clusters(server, R, seed, how)
    is_core = torch.isin(own, core)
    cluster_of_own = torch.full((own.numel(),), -1, dtype=torch.int64)
    cluster_of_own[is_core] = cluster[torch.searchsorted(core, own[is_core])]
    plans = []
    for b in tqdm(range(R), desc="co-batches", disable=None if progress else True, leave=False):
        targets, mine = cluster_of_own == b, server.edges
        if targetable is not None:
            targets &= targetable
        if R > 1:
            mine = batch_edges(own, server.edges, targets, server.nodes, group, max_hop, fanout,
                               gen)
        level = levels(own, mine, targets, num_layers, server.nodes, group)
        plans.append(build_cobatch(own, level, mine, num_layers, server.nodes, group,
                                   server.out_degree))
    return plans


def target_rows(plans: list, ids: torch.Tensor, ntype: str | None,
                who: str) -> list[torch.Tensor]:
    """Per co-batch, the output rows of ``ids`` (partitioned) among its targets (of node type
    ``ntype`` on a typed graph: the rows of the model's output of that type), sorted.

    Raises:
        InvalidValueError: some ids are no co-batch's targets here (``who``: the strategy and
            rank, for the message).
    """
    rows, found = [], 0
    for plan in plans:
        targets = plan.nodes[:plan.num_targets] if ntype is None else plan.targets[ntype]
        order = torch.argsort(targets)
        at = torch.searchsorted(targets[order], ids).clamp(max=max(targets.numel() - 1, 0))
        hit = targets[order][at] == ids if targets.numel() else torch.zeros_like(ids, bool)
        rows.append(order[at[hit]].sort().values)
        found += int(hit.sum())
    if found != ids.numel():
        raise InvalidValueError(f"{who}: {ids.numel() - found} of the loader's ids are not this "
                                "rank's nodes; pass dglx_dist.node_split(ids, g) to the "
                                "DataLoader")
    return rows


def step_layers(plans: list[CoBatchPlan], rows_of: list[torch.Tensor]) -> list[list[LayerPlan]]:
    """Per co-batch, the layers a loader's step runs when its outputs are the targets' rows
    ``rows_of[b]``: the co-batch's own, the last one computing only those rows (unless they
    are all its targets), so that the model's output and the last block's destinations are
    the step's output nodes, as on DGL's sampled blocks."""
    out = []
    for plan, rows in zip(plans, rows_of):
        layers = list(plan.layers)
        if rows.numel() != plan.num_targets:
            layers[-1] = marked(outputs_only(layers[-1], rows.to(layers[-1].block.device)))
        out.append(layers)
    return out
