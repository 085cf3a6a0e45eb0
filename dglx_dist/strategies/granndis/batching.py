"""A rank's co-batches: how the server's preloaded subgraph is cut into cooperative batches
(the rank's inner nodes dealt at random or cut into METIS clusters, each co-batch with its own
EAS neighbourhood), and the feature rows held for them.

:class:`~dglx_dist.strategies.granndis.strategy.GraNNDisStrategy` builds one set of co-batches
per count a loader asks for (its batches per rank; one for full-graph use, or the
``co_batches`` option for all), over the one preloaded subgraph; every set reads its rows from
one :class:`HeldRows` per store name; a step is the co-batch's rows and blocks as DGL presents
them (:func:`cobatch_step`). A graph without types is the one-type case throughout.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from dglx_dist.errors import InvalidValueError, NotSupportedError
from dglx_dist.graphcore.ids import TypeIds
from dglx_dist.kvstore import typed_key
from dglx_dist.partition.metis_lib import part_graph, symmetric_csr
from dglx_dist.runtime.comm import Comm
from dglx_dist.strategies.granndis.cobatch import (CoBatchPlan, GroupNodes, LayerPlan,
                                                   batch_edges, build_cobatch, levels,
                                                   outputs_only)
from dglx_dist.strategies.steps import Step

__all__ = ["ServerGraph", "Batching", "HeldRows", "TARGETS", "marked", "clusters",
           "cobatch_plans", "target_rows", "step_layers", "store_rows", "out_degrees",
           "target_types", "output_type", "cobatch_step"]


@dataclasses.dataclass(frozen=True)
class ServerGraph:
    """What setup leaves for the co-batches.

    Attributes:
        part: this rank's partition; ``core_edges`` its inner nodes' in-edges (global ids).
        own: this rank's nodes (inner and its share of the preloaded external ones), sorted.
        nodes: the group's node set; ``edges`` the in-edges of ``own`` inside it (``(src,
            dst, type index)``).
        ids: the graph's node types; ``degree``: every node's out-degree in the whole graph,
            per edge type (:func:`out_degrees`).
    """

    part: Any
    core_edges: tuple[torch.Tensor, torch.Tensor]
    own: torch.Tensor
    nodes: GroupNodes
    edges: tuple[torch.Tensor, ...]
    ids: TypeIds
    degree: torch.Tensor


def out_degrees(world: Comm, src: torch.Tensor, etype: torch.Tensor, ids: TypeIds,
                num_nodes: int) -> torch.Tensor:
    """Every node's out-degree in the whole graph, per edge type (a row each), from each
    rank's in-edges of its nodes ``src`` of types ``etype`` (collective)."""
    rows = len(ids.etypes)
    deg = torch.bincount(etype * num_nodes + src, minlength=rows * num_nodes).to(torch.int32)
    return world.all_reduce(deg).view(rows, num_nodes).double()


def store_rows(pdir, gids: torch.Tensor) -> dict[str, torch.Tensor]:
    """The feature rows of partitioned ids ``gids`` by the KVStore's name of each featured
    node type's (order kept within a type): on a graph without types its one type's,
    ``"feat"``, numbered by partitioned id."""
    types = pdir.types
    if types is None:
        return {"feat": gids}
    tix, rows = (torch.from_numpy(a) for a in pdir.type_row_of(gids.numpy()))
    return {typed_key(t, "feat"): rows[tix == i] for i, t in enumerate(types.ntypes)
            if types.feat_dims.get(t, 0)}


def marked(lp):
    """``lp`` (a co-batch's layer) with its block carrying it
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
    """The preloaded feature rows of one store name (:func:`store_rows`) of a rank's nodes,
    pulled once each and shared by every set of co-batches: a row is pulled the first time a
    set needs it (the first set's rows in its order, so that the one co-batch of the
    full-graph form reads them without a copy).

    Args:
        own: this rank's rows of that name (inner and preloaded external nodes), sorted.
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


def target_types(ids: TypeIds, labeled, own: torch.Tensor) -> torch.Tensor:
    """Which of the partitioned ids ``own`` may be co-batch targets: the nodes of the labeled
    types (every node when no type is), so that the last layer computes what a loss reads,
    and the layers before it what that needs, as DGL's blocks from labeled seeds do."""
    if not labeled:
        return torch.ones(own.numel(), dtype=torch.bool)
    ntype, _ = ids.of_gids(own)
    return torch.isin(ntype, torch.tensor([ids.ntypes.index(t) for t in labeled]))


def cobatch_plans(server: ServerGraph, R: int, num_layers: int, group: Comm, max_hop: int,
                  fanout: int, gen: torch.Generator, progress: bool = False,
                  targetable: torch.Tensor | None = None, seed: int = 0,
                  how: str = "random") -> list[CoBatchPlan]:
    """Every one of the ``R`` co-batches' plans on this rank (collective over ``group``);
    with ``R > 1`` each has its own EAS neighbourhood (``max_hop``, ``fanout``, sampled with
    ``gen``) inside the group's set. ``targetable``: a mask over ``server.own`` of the nodes
    that may be targets (None: every inner node; :func:`target_types`); ``how``: see
    :func:`clusters`."""
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
                                   server.ids, server.degree))
    return plans


def output_type(ids: TypeIds, gids: torch.Tensor, labeled, name: str) -> str:
    """The one node type of a loader's partitioned ids ``gids`` (its outputs are that type's
    rows), one of the types the co-batches target (:func:`target_types`)."""
    ntype, _ = ids.of_gids(gids)
    present = [ids.ntypes[i] for i in torch.unique(ntype).tolist()]
    if len(present) > 1:
        raise NotSupportedError(f"{name}: a DataLoader over node types {present}; the model "
                                "outputs the rows of one node type: build one loader per type")
    if labeled and present and present[0] not in labeled:
        raise NotSupportedError(f"{name}: a DataLoader over node type {present[0]!r}; the "
                                f"co-batches' outputs are the labeled types' {list(labeled)}")
    return present[0] if present else (list(labeled) or ids.ntypes)[-1]


def target_rows(plans: list[CoBatchPlan], ids: torch.Tensor, ntype: str,
                who: str) -> list[torch.Tensor]:
    """Per co-batch, the output rows of ``ids`` (partitioned) among its targets of node type
    ``ntype`` (the rows of the model's output of that type), sorted.

    Raises:
        InvalidValueError: some ids are no co-batch's targets here (``who``: the strategy and
            rank, for the message).
    """
    rows, found = [], 0
    for plan in plans:
        targets = plan.targets[ntype]
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


def step_layers(plans: list[CoBatchPlan], rows_of: list[torch.Tensor],
                ntype: int = 0) -> list[list[LayerPlan]]:
    """Per co-batch, the layers a loader's step runs when its outputs are the targets' rows
    ``rows_of[b]`` of node type ``ntype`` (an index): the co-batch's own, the last one
    computing only those rows (unless they are all its targets), so that the model's output
    and the last block's destinations are the step's output nodes, as on DGL's sampled
    blocks."""
    out = []
    for plan, rows in zip(plans, rows_of):
        layers = list(plan.layers)
        if rows.numel() != plan.num_targets:
            layers[-1] = marked(outputs_only(layers[-1], rows.to(layers[-1].block.device),
                                             ntype))
        out.append(layers)
    return out


def cobatch_step(cob: CoBatchPlan, ids: TypeIds, ntype: str, rows: torch.Tensor,
                 blocks) -> Step:
    """A co-batch's step: its input nodes this rank's own rows of each type, its output nodes
    its targets' rows ``rows`` of node type ``ntype``, as DGL presents them: per-type ids in
    dicts by type on a graph with types, the ids themselves without."""
    outputs = {t: g[:0] for t, g in cob.targets.items()}
    outputs[ntype] = cob.targets[ntype].index_select(0, rows)
    if ids.untyped:  # DGL's graph without types: tensors
        return Step(cob.nodes, outputs[ntype], blocks)
    return Step({t: ids.of_gids(g)[1] for t, g in cob.inputs.items()},
                {t: ids.of_gids(g)[1] for t, g in outputs.items()}, blocks)
