"""``granndis``: GraNNDis's shared preloading, expansion-aware sampling and cooperative
batching; ``fullgraph``: the plain full-graph baseline (the same class with ``scope="world"``:
halo exchange across every rank, nothing preloaded). Where each paper term lives:
:mod:`dglx_dist.strategies.granndis`; what it does (partitions, preloading, layer-wise
training with row swaps inside a server, co-batches, gradients of the mean loss) and the rule
for the model (every graph conv is wrapped in :class:`HaloConv`; ``x`` holds the rank's own
rows, so anything before the first conv must be per row): docs/strategies/granndis.md; typed
graphs (of which a graph without types is the one-type case): docs/heterographs.md; what lives
on a GPU: docs/launching.md.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Iterator

import torch
from torch import nn

from dglx_dist.convs import graph_convs
from dglx_dist.errors import InvalidValueError
from dglx_dist.partition.load import PartitionDir
from dglx_dist.runtime.autograd import GradientSync
from dglx_dist.runtime.session import Session
from dglx_dist.runtime.topology import Topology
from dglx_dist.sampling import PartitionSampler
from dglx_dist.graphcore.block import plan_of
from dglx_dist.graphcore.frames import NID
from dglx_dist.strategies.abilities import (Approximate, Capabilities, FullGraphForm, HoldsRows,
                                            Costed, OverlapsBackward, OwnSplit,
                                            ShapedByOptions)
from dglx_dist.graphcore.ids import TypeIds
from dglx_dist.strategies.base import (STRATEGIES, PartitionSpec, SetupRequest, Strategy,
                                       check_typed_store, pull_features_once, step_rows,
                                       with_depth)
from dglx_dist.strategies.granndis.batching import (TARGETS, Batching, HeldRows, ServerGraph,
                                                    cobatch_plans, cobatch_step,
                                                    out_degrees, output_type, step_layers,
                                                    store_rows, target_rows, target_types)
from dglx_dist.strategies.granndis.cobatch import GroupNodes
from dglx_dist.strategies.granndis.cost import COSTS
from dglx_dist.strategies.granndis.eas import expand_external
from dglx_dist.strategies.granndis.halo import HaloConv, complete_rows
from dglx_dist.strategies.granndis.pairs import PairGather, pair_epoch, pair_plan
from dglx_dist.strategies.cost.counts import closure_rows
from dglx_dist.strategies.holdings import (Holdings, JobSize, activation_bytes, feature_bytes,
                                           halo_rows, param_bytes)
from dglx_dist.strategies.steps import Blocks, LoaderPlan, LoaderSpec, Step, StepState

__all__ = ["GraNNDisStrategy"]

log = logging.getLogger(__name__)


@STRATEGIES.register("fullgraph", scope="world", external_max_hop=0)
@STRATEGIES.register("granndis")
class GraNNDisStrategy(Strategy, FullGraphForm, Costed, HoldsRows, Approximate,
                       OverlapsBackward, OwnSplit, ShapedByOptions):
    """Shared preloading + EAS + cooperative batching (or, as ``fullgraph``, none of them)."""

    capabilities = Capabilities(link_prediction=True, typed_graphs=True)
    held_rows = frozenset({"feat"})
    cost = COSTS["server"]  # scope 'world' (fullgraph): its own

    @dataclasses.dataclass(frozen=True)
    class Config:
        num_layers: int = dataclasses.field(
            default=2, metadata={"help": "Graph convs of the model (blocks per batch)."})
        external_max_hop: int = dataclasses.field(
            default=1, metadata={"help": "EAS m: external nodes are preloaded up to this many "
                                         "hops from the server's inner nodes; -1: num_layers "
                                         "(with external_fanout -1: exact shared preloading)."})
        external_fanout: int = dataclasses.field(
            default=15, metadata={"help": "EAS k: external in-neighbours admitted per node "
                                          "and hop; -1: all."})
        co_batches: int = dataclasses.field(
            default=-1, metadata={"help": "R: cooperative batches per epoch (each rank's inner "
                                          "nodes dealt into R) for every loader; 1: full-"
                                          "graph training; -1: each dglx_dist.DataLoader its "
                                          "own, as many as its batches per rank (1 for an "
                                          "edge loader and the full-graph form)."})
        cobatch_targets: str = dataclasses.field(default="random", metadata={
            "help": "Co-batches of each rank's nodes: 'random' (dealt evenly, as a shuffled "
                    "loader) or 'metis' (clusters: fewer rows, few classes per co-batch)."})
        scope: str = dataclasses.field(
            default="server", metadata={"help": "Who shares preloading and swaps rows: "
                                                "'server' (GraNNDis) or 'world' (the whole job, "
                                                "nothing preloaded: plain full-graph)."})
        balance: tuple[str, ...] = dataclasses.field(
            default=("train", "val", "test", "edges"),
            metadata={"help": "METIS constraints when dglx partitions for this strategy."})
        seed: int = dataclasses.field(default=0, metadata={"help": "EAS and batch-order seed."})

        def __post_init__(self):
            if self.num_layers < 1:
                raise InvalidValueError(f"num_layers {self.num_layers}: must be >= 1")
            if self.external_max_hop < -1 or self.external_fanout == 0 or \
                    self.external_fanout < -1:
                raise InvalidValueError(f"external_max_hop {self.external_max_hop} / "
                                        f"external_fanout {self.external_fanout}: need m >= 0 (or "
                                        "-1) and k >= 1 (or -1)")
            if self.co_batches < 1 and self.co_batches != -1:
                raise InvalidValueError(f"co_batches {self.co_batches}: must be >= 1 (or -1: auto)")
            for name, valid in (("scope", tuple(COSTS)), ("cobatch_targets", TARGETS)):
                if (value := getattr(self, name)) not in valid:
                    raise InvalidValueError(f"{name} {value!r}; expected one of {valid}")

    def __init__(self, config, name: str = ""):
        super().__init__(config, name)
        self.cost = COSTS[config.scope]  # 'world': no preload
        self._batchings: dict[int, Batching] = {}  # by co-batch count

    @classmethod
    def exact_options(cls, num_layers: int) -> dict:
        return {"num_layers": num_layers, "external_max_hop": -1, "external_fanout": -1}

    def holdings(self, job: JobSize) -> Holdings:
        """The feature rows of its share of its group's nodes (the inner ones and the
        external ones EAS preloads; ``scope='world'``: its part) and of the halo it reads from
        the group's other ranks, the activations of those rows at every layer (one co-batch
        of them all; the plan takes the saving of more co-batches off), the parameters."""
        c = self.config
        group = job.group if c.scope == "server" else job.world
        groups = max(1, job.world // group)
        inner = job.nodes / groups
        held = inner + closure_rows(job.flat, inner, job.graph.cut(groups), self._max_hop(),
                                    c.external_fanout)
        own = held / group
        rows = own + halo_rows(job, group, own, held)
        return Holdings(feature_bytes(job, rows), activation_bytes(job, [rows] * c.num_layers),
                        param_bytes(job, c.num_layers))

    def partition_spec(self, topology: Topology) -> PartitionSpec:
        groups = topology.num_servers if self.config.scope == "server" else 1
        return PartitionSpec("metis", topology.world_size,
                             {"balance": list(self.config.balance), "groups": groups},
                             feature_layout="rows")

    # -- setup ---------------------------------------------------------------------------------
    def setup(self, session: Session, pdir: PartitionDir, store, request: SetupRequest) -> None:
        """Preloads the server's dependency subgraph (EAS); co-batches follow per count asked
        for (:meth:`batching`), so setting up from ``parallelize`` first gives the same
        co-batches as from the ``DataLoader`` first."""
        check_typed_store(pdir, store, self.registered_name)
        self.types = TypeIds.of(pdir)  # a graph without types: one, DGL's _N / _E
        self._labeled = () if pdir.types is None else tuple(pdir.types.labeled)
        self.config = with_depth(self, request.num_layers)
        self.session, self._store, self.pdir = session, store, pdir
        self._set_up_by = request.by
        self.group = session.server if self.config.scope == "server" else session.world
        part = pdir.load_part(session.rank, features=store is None)  # else the store has them
        core = torch.from_numpy(part.core_gid)
        core_edges = (torch.from_numpy(part.local_gid)[torch.from_numpy(part.src)],
                      core[torch.from_numpy(part.dst)])
        core_etype = self.types.etype_of(torch.from_numpy(part.eid))
        # every node's out-degree in the whole graph, per edge type
        degree = out_degrees(session.world, core_edges[0], core_etype, self.types,
                             pdir.num_nodes)
        gen = torch.Generator().manual_seed(self.config.seed * 7919 + session.rank)
        own, nodes, edges = self._server_graph(pdir, part, (*core_edges, core_etype), gen)
        self._server = ServerGraph(part, core_edges, own, nodes, edges, self.types, degree)
        self._device = device = self.compute_device(session)  # blocks and rows live there
        self._rows = {name: HeldRows(rows.sort().values, device)  # by the store's names
                      for name, rows in store_rows(pdir, own).items()}
        self.held_rows = frozenset(self._rows)
        log.info("%s rank %d: %d inner + %d external nodes (group of %d holds %d)",
                 self.registered_name, session.rank, core.numel(), self.preloaded.numel(),
                 self.group.size, nodes.ids.numel())
        if self.config.co_batches != -1:
            self.batching(self.config.co_batches, f"co_batches={self.config.co_batches}")

    @property
    def batchings(self) -> dict[int, Batching]:
        """The sets of co-batches built so far, by count."""
        return dict(self._batchings)

    def batching(self, count: int, by: str) -> Batching:
        """The set of ``count`` co-batches (``co_batches`` of them where the options fix it),
        built the first time it is asked for (collective: every rank asks for the same
        count); ``by``: the call asking, for messages."""
        count = count if self.config.co_batches == -1 else self.config.co_batches
        if (known := self._batchings.get(count)) is not None:
            return known
        server, cfg = self._server, self.config
        own = server.own
        targetable = target_types(self.types, self._labeled, own)
        # EAS around each co-batch from a generator of this count's: a set does not depend
        # on which sets were built before it
        gen = torch.Generator().manual_seed((cfg.seed * 7919 + self.session.rank) * 1_000_003
                                            + count)
        plans = cobatch_plans(server, count, cfg.num_layers, self.group, self._cobatch_hops(),
                              cfg.external_fanout, gen, self.session.is_main, targetable,
                              cfg.seed, cfg.cobatch_targets)
        # the rows of the nodes these co-batches read that were not pulled before
        ids = plans[0].nodes if count == 1 else torch.cat([p.nodes for p in plans]).unique()
        for name, rows in store_rows(self.pdir, ids).items():
            self._rows[name].cover(rows, functools.partial(
                pull_features_once, self.session, self._store, self.pdir, self._server.part,
                name=name))
        self._batchings[count] = batching = Batching([p.to(self._device) for p in plans])
        log.info("%s rank %d: %d co-batches (%s); rows per co-batch %s", self.registered_name,
                 self.session.rank, count, by, [p.num_rows() for p in plans])
        return batching

    def _max_hop(self) -> int:
        return self.config.num_layers if (m := self.config.external_max_hop) < 0 else m

    def _cobatch_hops(self) -> int:
        """EAS hops around a co-batch's targets: m for METIS clusters (they hold most of their
        neighbourhoods), else L (random targets; fullgraph's typed labeled nodes)."""
        m, random = self._max_hop(), self.config.cobatch_targets == "random"
        return self.config.num_layers if random or (m == 0 and not self.types.untyped) else m

    def _server_graph(self, pdir: PartitionDir, part, core_edges, gen):
        """This rank's nodes (inner + its share of the preloaded external ones), the group's
        node set, and the in-edges of this rank's nodes inside that set (collective)."""
        sampler = PartitionSampler.of(pdir, part, self.session.world)
        in_group = torch.zeros(pdir.num_parts, dtype=torch.bool)
        in_group[self.group.members] = True  # part p is rank p's
        hops = 0 if self.config.scope == "world" else self._max_hop()
        self.preloaded = expand_external(core_edges[:2],
                                         lambda ids: ~in_group[pdir.book.owner(ids)], sampler,
                                         self.group, hops, self.config.external_fanout, gen)
        own = torch.cat([torch.from_numpy(part.core_gid), self.preloaded]).sort().values
        nodes = GroupNodes.gather(self.group, own)
        src, dst, _eid, etype = sampler.sample_layer(self.preloaded, -1)
        ext = (src, dst, etype)  # each edge's type: the core ones' from their ids
        del src, dst, _eid, etype  # the drawn edges' ids are not needed: no longer held
        edges = tuple(torch.cat([c, e]) for c, e in zip(core_edges, ext))
        keep = nodes.contains(edges[0])
        return own, nodes, tuple(t[keep] for t in edges)

    # -- training ------------------------------------------------------------------------------
    def wrap_model(self, model: nn.Module) -> nn.Module:
        convs = graph_convs(model)
        if len(convs) != self.config.num_layers:
            raise InvalidValueError(f"the model has {len(convs)} graph convs "
                                    f"({', '.join(n for _, n in convs)}); the strategy was set up "
                                    f"for num_layers={self.config.num_layers} by {self._set_up_by}"
                                    f": pass num_layers={len(convs)}, or call parallelize first")
        for conv, name in convs:  # each exchanges rows, per node type, before it runs
            halo = HaloConv.of(conv, plan_of, self.group, self.types.ntypes, self.types.etypes,
                               f"{self.registered_name}: the model's graph conv {name}")
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, child, halo)
        for t in list(model.parameters()) + list(model.buffers()):  # one model: rank 0's
            self.session.world.broadcast(t.data, 0)
        self._sync = GradientSync(p for p in model.parameters() if p.requires_grad)
        return model

    # -- the drop-in API -----------------------------------------------------------------------
    def loader_plan(self, ids: torch.Tensor, spec: LoaderSpec) -> LoaderPlan | None:
        """Per co-batch, the output rows of this rank's ``ids`` among the co-batch's targets
        (ids this rank does not own are refused: their outputs are computed elsewhere); an
        edge loader's ids are edges (see :mod:`~dglx_dist.strategies.granndis.pairs`). A
        loader of another depth (a layer-wise inference's) samples plain blocks (None)."""
        if self.config.num_layers != len(spec.fanouts):
            return None
        if spec.pairs is not None:
            return pair_plan(self, ids, spec)
        counts = self.session.world.all_gather(torch.tensor([ids.numel()]))
        batches = max(1, -(-int(max(int(c) for c in counts)) // spec.batch_size))
        batching = self.batching(batches, f"a DataLoader(batch_size={spec.batch_size})")
        ntype = output_type(self.types, ids, self._labeled, self.registered_name)
        rows = target_rows(batching.plans, ids, ntype, f"{self.registered_name} (rank "
                           f"{self.session.rank})")
        layers = step_layers(batching.plans, rows, self.types.ntypes.index(ntype))
        return LoaderPlan(len(batching.plans), (batching.plans, rows, ntype, layers))

    def loader_epoch(self, plan: LoaderPlan, spec: LoaderSpec, epoch: int) -> Iterator[Step]:
        if spec.pairs is not None:
            yield from pair_epoch(self, plan, spec, epoch)
            return
        plans, rows_of, ntype, layers = plan.data
        order = range(len(plans))
        if spec.shuffle:  # the same order on every rank: the co-batch's convs exchange rows
            gen = torch.Generator().manual_seed(spec.seed * 1_000_003 + epoch)
            order = torch.randperm(len(plans), generator=gen).tolist()
        weight = 1.0 / self.session.world_size  # DDP's mean of the ranks' mean losses
        for b in order:  # a model's outputs by type: the step's are ntype's
            state = StepState(weight=weight, epoch=epoch, plan=ntype)
            blocks = Blocks([lp.block for lp in layers[b]], state)
            yield cobatch_step(plans[b], self.types, ntype, rows_of[b], blocks)

    def step_forward(self, model: nn.Module, blocks, x) -> torch.Tensor:
        """An edge loader's step: its pair nodes' rows, fetched from the ranks that computed
        them (its backward is averaged over the ranks in :meth:`after_backward`). A node
        loader's step whose model outputs rows by node type (a dict): the step's rows of its
        output type (``StepState.plan``) alone, as a model's outputs on DGL's sampled blocks
        of seeds of one type are."""
        state = getattr(blocks, "state", None)
        plan = getattr(state, "plan", None)
        if isinstance(plan, PairGather):
            return plan.rows(self.session.world, model(blocks, x))
        out = model(blocks, x)
        if isinstance(out, dict) and isinstance(plan, str):
            return {plan: step_rows(out[plan], state)}
        return out if state is None else step_rows(out, state)

    def local_nodes(self) -> torch.Tensor:
        first = self.whole_graph("the full-graph form (g.local_nodes())").plans[0]
        return first.nodes[:first.num_targets]

    def full_graph_step(self, num_layers: int, index: int) -> tuple[Blocks, torch.Tensor]:
        batching = self.whole_graph("the full-graph form model(g, features)")
        state = StepState(weight=1.0 / self.session.world_size)
        first = batching.plans[0]  # a typed graph's rows are read by type (local_rows)
        feat = self.local_rows("feat", first.nodes)
        return Blocks([lp.block for lp in first.layers], state), \
            torch.zeros(0) if feat is None else feat

    def whole_graph(self, by: str) -> Batching:
        """The one co-batch over the whole graph (collective when it is built here)."""
        batching = self.batching(1, by)
        if not batching.single:
            raise InvalidValueError(f"{self.registered_name} with co_batches="
                                    f"{self.config.co_batches}: {by} needs one co-batch over "
                                    "the whole graph; pass co_batches=-1 (each loader its "
                                    "own) or iterate a dglx_dist.DataLoader (one step per "
                                    "co-batch)")
        return batching

    def local_rows(self, name: str, ids: torch.Tensor):
        """Preloaded feature rows ``ids`` of store name ``name`` (:func:`store_rows`); None
        where some are not held here."""
        held = self._rows.get(name)
        return None if held is None else held.get(ids)

    def source_rows(self, name: str, block) -> torch.Tensor | None:
        """A co-batch's first block's every source row: this rank's preloaded ones and its
        peers' (the group's exchange, within the server, as the first conv's); the one type's
        of a graph without types (``"feat"``; a typed graph's types are read from the store)."""
        plan = plan_of(block)
        if plan is None or name != "feat" or name not in self._rows:
            return None
        ids = block.srcdata[NID]
        ids = ids if plan.order is None else ids.index_select(0, torch.argsort(plan.order[0]))
        with torch.no_grad():
            own = self.local_rows(name, ids[:plan.own_rows()])
            return complete_rows(self.group, plan, {0: own})[0]

    def before_backward(self) -> None:
        self._sync.start()

    def after_backward(self, steps) -> None:
        """Sums the backward pass's gradients over the job (each rank's loss was weighted in
        forward: 1 / world size, the mean of the ranks' mean losses), or averages them after
        a pass that reached a pair step."""
        reduce = self.session.all_reduce_by_server
        if any(isinstance(step.plan, PairGather) for step in steps):
            self._sync.finish(lambda flat: reduce(flat) / self.session.world_size)
            return
        self._sync.finish(reduce)

