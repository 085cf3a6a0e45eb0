"""``p3``: P3's push-pull parallelism over hash-partitioned structure and feature columns
sliced over the ranks (one part per rank; no feature row crosses the network): layer 1 model
parallel in :class:`P3FirstLayer`, layers 2..k data parallel under DDP, the pipeline and
caching (:func:`plan_cache`); on a typed graph the featured types' input projections split by
columns (:mod:`dglx_dist.strategies.p3.projections`). Where each paper term lives:
:mod:`dglx_dist.strategies.p3`; what it does, the first layers that split and the rules for
the model (nothing may transform the input features before the first conv; ``row_normalize``
is honoured on the stored slices): docs/strategies/p3.md; typed graphs:
docs/heterographs.md; what lives on a GPU: docs/launching.md.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
from typing import Iterator

import numpy as np
import torch

from dglx_dist.convs import adapter_for, first_conv
from dglx_dist.errors import InvalidValueError, NotSupportedError, StateError
from dglx_dist.partition.load import PartitionDir
from dglx_dist.registry import Bounds
from dglx_dist.runtime.failure import same_on_every_rank
from dglx_dist.runtime.autograd import GradientSync
from dglx_dist.runtime.session import Session
from dglx_dist.runtime.topology import Topology
from dglx_dist.sampling import (LocalSampler, PartitionSampler, owner_balanced_chunks,
                                whole_edge_weights, whole_graph)
from dglx_dist.strategies.abilities import (Costed, HoldsRows, OverlapsBackward, OwnSplit,
                                            ShardedParams)
from dglx_dist.strategies.base import STRATEGIES, PartitionSpec, SetupRequest
from dglx_dist.strategies.holdings import Holdings, JobSize, param_bytes, sampled_blocks
from dglx_dist.strategies.minibatch import MiniBatchConfig, MiniBatchStrategy
from dglx_dist.strategies.p3.cost import COST
from dglx_dist.strategies.p3.layer import ColumnSlice, P3FirstLayer, whole_rows
from dglx_dist.strategies.p3.projections import SplitProjections
from dglx_dist.strategies.steps import Blocks, Step, place_step

__all__ = ["P3Strategy", "CachePlan", "plan_cache"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class CachePlan:
    """What P3's caching replicates on every server (see :func:`plan_cache`)."""

    structure: bool = False
    features: bool = False
    structure_bytes: int = 0
    feature_bytes: int = 0


def plan_cache(budget: float, pdir: PartitionDir, topology: Topology) -> CachePlan:
    """P3's greedy caching with a per-server ``budget`` (bytes) for replicas: the inputs are
    packed onto the fewest machines, here one (a full copy per server), the cheaper first.

    Costs per server: the whole structure in every rank's process (int64 edge lists and
    DGL's CSC index: 24 bytes per edge, 16 per node); the feature columns the server does
    not hold yet (float32). Replicas change where data is read, never the results.
    """
    struct = topology.ranks_per_server * (24 * pdir.num_edges + 16 * pdir.num_nodes)
    missing = (topology.num_servers - 1) / topology.num_servers
    feat = int(4 * pdir.num_nodes * pdir.feat_dim * missing)
    take: dict[str, bool] = {}
    for name, cost in sorted((("structure", struct), ("features", feat)), key=lambda kv: kv[1]):
        take[name] = cost <= budget
        budget -= cost if take[name] else 0
    return CachePlan(take["structure"], take["features"] and topology.num_servers > 1,
                     struct, feat)


@STRATEGIES.register("p3")
class P3Strategy(MiniBatchStrategy, Costed, HoldsRows, ShardedParams,
                 OverlapsBackward, OwnSplit):
    """Hash structure + feature-dimension slices; layer 1 model parallel, the rest DDP (its
    pipeline runs layer 1 ahead itself and needs steps in turn). Its state between epochs
    (:meth:`state_dict`) is the pipeline's deferred slice gradients. On a typed graph, the
    featured types' input projections run model parallel (:attr:`projections`)."""

    capabilities = dataclasses.replace(MiniBatchStrategy.capabilities, typed_graphs=True,
                                       steps_in_turn=True)
    held_rows = frozenset({"feat"})
    projections: SplitProjections | None = None  # a typed graph's column slices, set up
    cost = COST

    @dataclasses.dataclass(frozen=True)
    class Config(MiniBatchConfig):
        cache_mb: float = dataclasses.field(
            default=0.0, metadata={"help": "Per-server memory (MiB) for replicas (P3's "
                                           "caching): the smaller of structure and features "
                                           "is copied onto every server if it fits, then the "
                                           "other; 0: no caching.", "bounds": Bounds(0)})
        pipeline: bool = dataclasses.field(
            default=False, metadata={"help": "P3's pipeline: layer 1 of the next two batches "
                                             "runs and travels while one trains (3 in flight); "
                                             "layer-1 weight slices see gradients 3 steps "
                                             "stale, stashed per batch."})

    def __init__(self, config, name: str = ""):
        super().__init__(config, name)
        # only P3's pipeline (layer 1 launched two steps ahead) needs the steps in turn;
        # without it a loader may draw the next steps while the model computes
        self.capabilities = dataclasses.replace(type(self).capabilities,
                                                steps_in_turn=bool(config.pipeline))

    def holdings(self, job: JobSize) -> Holdings:
        """Its feature-column slice of every node; its slice of every rank's step input rows
        (W steps at 1/W of the columns: one step's rows), the partial layer-1 rows of its own
        step from every rank and the activations; its slice of the first layer's weights and
        the other layers'; its share of the server's replicas (``cache_mb``)."""
        c, w, held = self.config, job.world, super().holdings(job)
        first = sampled_blocks(job, c.fanouts, c.batch_size)[0][1]
        partials = w * first * job.model.hidden * 4
        return dataclasses.replace(held, activations=held.activations + partials,
                                   params=param_bytes(job, len(c.fanouts), first_share=1 / w))

    def partition_spec(self, topology: Topology) -> PartitionSpec:
        return PartitionSpec("feature_dim", topology.world_size, {"structure": "hash"},
                             feature_layout="columns")

    def check_typed(self, graph: str) -> None:
        """Refuses the options that do not apply on a typed graph."""
        for option, on in (("pipeline", self.config.pipeline), ("cache_mb", self.config.cache_mb)):
            if on:
                raise NotSupportedError(
                    f"p3 on a graph with node types ({graph}): option {option}="
                    f"{on} does not apply there (only the input projections run model "
                    f"parallel); expected {option}={type(on)()}")

    def setup(self, session: Session, pdir: PartitionDir, store, request: SetupRequest) -> None:
        self.session, rank, topo = session, session.rank, session.topology
        self.pdir, self.num_nodes, self.store = pdir, pdir.num_nodes, store
        part = pdir.load_part(rank, features=pdir.types is None)
        if pdir.types is not None:  # DGL's heterogeneous blocks; projections split by columns
            self.cache = CachePlan()  # (cache_mb refused: check_typed)
            self.sampler = PartitionSampler.of(pdir, part, session.world, store)
            self.projections = SplitProjections(session, pdir, store)
            self.held_rows = frozenset(self.projections.held)
            return
        self.cache = plan_cache(self.config.cache_mb * 2**20, pdir, topo)
        log.info("p3 caching: %s", self.cache)
        if self.cache.structure:  # every rank samples from the whole graph, no exchange
            parts = [part if p == rank else pdir.load_part(p) for p in range(pdir.num_parts)]
            self.sampler = LocalSampler(whole_graph(parts, pdir.num_nodes),
                                        whole_edge_weights(pdir))
        else:
            self.sampler = PartitionSampler.of(pdir, part, session.world, store)
        # without feature caching a rank holds its slice; with it, each server holds every
        # column: local rank l the slices of the ranks with local index l on every server
        held = topo.cross_ranks(session.local_rank) if self.cache.features else [rank]
        feats = [(part.feat, part.feat_cols) if p == rank else pdir.load_feat(p) for p in held]
        self.cols = torch.cat([torch.arange(*cols) for _, cols in feats])
        self.feat = torch.from_numpy(np.concatenate([f for f, _ in feats], axis=1))

    def wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        if self.projections is not None:  # their chain starts and ends with the forward
            model.register_forward_pre_hook(self.projections.begin)
            model.register_forward_hook(self.projections.tie)
            self._slices = []
            return self._ddp(model)
        conv, name = first_conv(model)
        adapter = adapter_for(conv)
        adapter.check_column_split(conv)
        self._check_features_reach(model, conv, name, adapter)
        for lin in adapter.input_linears(conv):  # slices must come from one model: rank 0's
            self.session.world.broadcast(conv.get_parameter(lin.path).data)
        if getattr(model, "row_normalize", False):
            self._row_normalize()
        # layer-1 exchanges use the server and cross groups, never DDP's (the world group)
        layer = P3FirstLayer(conv, adapter, self.cols, self.feat, self.session.server,
                             None if self.cache.features else self.session.cross,
                             lambda: self.out_degree)
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, layer)
        self._layer, self._slices = layer, list(layer.weights)
        self._sync = GradientSync(self._slices)
        return self._ddp(model, [f"{name}.weights.{i}" for i in range(len(self._slices))])

    def _check_features_reach(self, model, conv, name: str, adapter) -> None:
        """Refuses (alike on every rank) a model whose features pass another layer before its
        first graph conv (ResGCN+'s input Linear): p3 splits the features' columns inside
        that conv, so its input must be the features themselves."""
        for lin in adapter.input_linears(conv):
            width = conv.get_parameter(lin.path).shape[lin.in_axis]
            if width != self.pdir.feat_dim:
                raise same_on_every_rank(InvalidValueError(
                    f"p3: {type(model).__name__}'s first graph conv ({name}) takes {width} "
                    f"input columns, but the features have {self.pdir.feat_dim}: p3 splits "
                    f"the features' columns inside that conv, so they must reach it directly, "
                    f"not through another layer first; train this model with distdgl, "
                    f"granndis or fullgraph"))

    def _row_normalize(self) -> None:
        """Divides every row by its sum over all columns (rows summing to <= 0 stay)."""
        total = self.feat.sum(1, dtype=torch.float64)
        # each column once: over the world, or over a server when every server holds all
        (self.session.server if self.cache.features else self.session.world).all_reduce(total)
        scale = torch.where(total > 0, 1.0 / total.clamp(min=1e-12), torch.ones_like(total))
        self.feat = (self.feat * scale.to(self.feat.dtype).unsqueeze(1)).contiguous()

    def sharded_params(self):
        """The first layer's weight slices: every rank's columns (each server's, when every
        server holds all columns); none on a typed graph (DDP averages whole weights)."""
        return self._slices, (self.session.server if self.cache.features else self.session.world)

    def before_backward(self) -> None:
        if self.projections is None:
            self._sync.start()

    def after_backward(self, steps) -> None:
        if self.projections is None:  # (typed: DDP averages every gradient, p3/projections.py)
            self._layer.after_backward()  # pipelined slice gradients that arrived
            # DDP averages the other gradients over the ranks; the slices' are this pass's own
            self._sync.finish(self._reduce_slices)
        super().after_backward(steps)

    def _reduce_slices(self, flat: torch.Tensor) -> torch.Tensor:
        if self.cache.features:  # the same columns on every server: sum their gradients
            self.session.cross.all_reduce(flat)
        return flat / self.session.world_size

    def state_dict(self) -> dict:
        """The pipeline's slice gradients that arrived after the epoch's last step (applied at
        the next epoch's first step)."""
        deferred = self._layer.deferred if self.projections is None else None
        return {"deferred": [g.clone() for g in deferred] if deferred is not None else []}

    def load_state_dict(self, state: dict) -> None:
        deferred = state["deferred"]
        if deferred and len(deferred) != len(self._slices):
            raise InvalidValueError(f"the checkpoint holds {len(deferred)} deferred slice "
                                    f"gradients; this model's first layer has {len(self._slices)} "
                                    "slices")
        if self.projections is not None:
            return
        # checkpoints load on the CPU; the slices may be on a GPU
        self._layer.deferred = [g.to(w.device) for g, w in zip(deferred, self._slices)] or None

    def split_ids(self, ids: torch.Tensor, pdir: PartitionDir, session: Session) -> torch.Tensor:
        """Each rank's own ids first, balanced so every rank has the same number (P3's seeds
        are the owner's)."""
        owner = torch.as_tensor(pdir.book.owner(ids))
        owned = [ids[owner == r] for r in range(session.world_size)]
        return owner_balanced_chunks(owned)[session.rank].sort().values

    def local_rows(self, name: str, ids: torch.Tensor):
        if self.projections is not None:
            return self.projections.rows(name, ids)
        if name != "feat":
            return None
        return self._input_rows(ids)

    def _input_rows(self, ids: torch.Tensor) -> ColumnSlice:
        return ColumnSlice(ids, self.feat, self.pdir.feat_dim, whole_rows(self.store, "feat"))

    def loader_epoch(self, plan, spec, epoch: int, sampler=None) -> Iterator[Step]:
        if not self.config.pipeline:
            yield from super().loader_epoch(plan, spec, epoch, sampler)
            return
        window: collections.deque[Step] = collections.deque()
        last = None
        device = self.compute_device(self.session)
        for step in super().loader_epoch(plan, spec, epoch, sampler):  # 2 steps ahead
            host = step.blocks[0].cpu()  # the forward gets the block on the device (where
            # a device sampler drew it, the exchanges and the rows' gather take a host copy)
            launch = self._layer.launch(place_step(step, device).blocks[0], host)
            state = dataclasses.replace(step.blocks.state, plan=launch)  # rides with the step
            window.append(step._replace(blocks=Blocks(step.blocks, state)))
            if len(window) == 3:
                last = self._yield_checked(last)
                yield (last := window.popleft())
        while window:
            last = self._yield_checked(last)
            yield (last := window.popleft())
        self._layer.drain()  # the last gradients arrive before anything else runs

    def _yield_checked(self, last: Step | None) -> Step | None:
        """Refuses to run ahead of the model: the pipeline launches layer 1 of a batch with
        the weights of two steps before it trains, so batches must be trained as they come."""
        if last is not None and self._layer.waiting(last.blocks.state.plan):
            raise StateError("p3 with pipeline=true launches layer 1 of each batch two steps "
                             "before it trains: train each batch before asking the loader "
                             "for the next (no list(loader) or prefetching), or build the "
                             "strategy with pipeline=false")
        return last
