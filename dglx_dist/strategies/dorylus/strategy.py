"""``dorylus``: full-graph GCN, GraphSAGE and GAT training with computation separation
(Dorylus, OSDI'21): graph servers, serverless tensor tasks, parameter servers and a bounded
asynchronous pipeline (where each lives: :mod:`dglx_dist.strategies.dorylus`). What it does,
the models it runs (a stack of one conv type) and how ``Trainer.fit`` and a loop of one's own
drive it: docs/strategies/dorylus.md.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from dglx_dist.convs import graph_convs
from dglx_dist.data.normalize import row_normalized
from dglx_dist.errors import InvalidValueError
from dglx_dist.offload import EXECUTORS, TaskController
from dglx_dist.partition.load import PartitionDir
from dglx_dist.registry import Bounds
from dglx_dist.runtime.autograd import GradientSync
from dglx_dist.runtime.session import Session
from dglx_dist.runtime.topology import Topology
from dglx_dist.strategies.abilities import (Approximate, Capabilities, ConvTypes, FullGraphForm,
                                            Costed, OverlapsBackward, OwnEpochs, OwnSplit,
                                            ShapedByOptions)
from dglx_dist.strategies.base import (STRATEGIES, PartitionSpec, SetupRequest, Strategy,
                                       pull_features_once,
                                       with_depth)
from dglx_dist.strategies.dorylus.cost import COST
from dglx_dist.strategies.dorylus.graph import GraphServer
from dglx_dist.convs.dorylus_base import summed_grads
from dglx_dist.strategies.dorylus.layers import ConvTypesOfAdapters, layer_kind
from dglx_dist.strategies.dorylus.params import ParamServers, WeightUpdates
from dglx_dist.strategies.dorylus.pipeline import Pipeline, TensorSpec
from dglx_dist.strategies.epochs import EpochResult, TrainHooks
from dglx_dist.strategies.holdings import (Holdings, JobSize, activation_bytes,
                                           feature_bytes, halo_rows, param_bytes)
from dglx_dist.strategies.steps import (Blocks, LoaderPlan, LoaderSpec, Step, StepState,
                                        epoch_batches, node_blocks, sampled_plan)

__all__ = ["DorylusStrategy", "ParamServers"]  # ParamServers: params

log = logging.getLogger(__name__)
_MODES = ("async", "sync")


class _Logits(torch.autograd.Function):
    """The forward program's logits; backward runs the backward program."""

    @staticmethod
    def forward(ctx, strategy, epoch, rows, *params):
        ctx.strategy, ctx.epoch, ctx.rows = strategy, epoch, rows
        ctx.pipe = strategy._pipeline()  # keeps the gathers the backward needs
        return strategy._forward_logits(epoch, train=True, pipe=ctx.pipe)[rows]

    @staticmethod
    def backward(ctx, grad):
        s = ctx.strategy
        full = torch.zeros(s.gs.n, grad.shape[1])
        full[ctx.rows] = grad
        grads = s._backward(ctx.pipe, ctx.epoch, full)
        ctx.pipe = None
        return (None, None, None, *grads)


@STRATEGIES.register("dorylus")
class DorylusStrategy(Strategy, OwnEpochs, FullGraphForm, Costed, ConvTypes,
                      Approximate, OverlapsBackward, OwnSplit, ShapedByOptions):
    """Graph servers + serverless tensor tasks + bounded asynchrony (see module docstring):
    float32 alone (tensor tasks travel to the executors as float32 arrays), on the host."""

    capabilities = Capabilities(float32_only=True)

    conv_types = ConvTypesOfAdapters()  # the convs whose adapter (dglx_dist.convs) has dorylus support
    cost = COST

    @dataclasses.dataclass(frozen=True)
    class Config:
        num_layers: int = dataclasses.field(
            default=2, metadata={"help": "Graph conv layers (GraphConv, SAGEConv or "
                                         "GATConv) of the model."})
        intervals: int = dataclasses.field(
            default=8, metadata={"help": "Vertex intervals per graph server (the pipeline's "
                                         "minibatches; one invocation each per task)."})
        mode: str = dataclasses.field(
            default="async", metadata={"help": "'async' (bounded asynchrony) or 'sync' (a "
                                               "barrier per layer: exact)."})
        staleness: int = dataclasses.field(
            default=0, metadata={"help": "S: epochs the fastest interval may run ahead of the "
                                         "slowest (async; 0 or 1)."})
        executor: str = dataclasses.field(
            default="local", metadata={"help": "Tensor-task executor: 'local' worker "
                                               "processes, 'aws' Lambda, 'inline' (CPU-only)."})
        executor_options: tuple[str, ...] = dataclasses.field(
            default=(), metadata={"help": "key=value options of the executor (e.g. "
                                          "workers=4, endpoint_url=...)."})
        lambdas: int = dataclasses.field(
            default=0, metadata={"help": "Concurrent invocations to start with; 0: "
                                         "min(intervals, 100), then autotuned.",
                                 "bounds": Bounds(0)})
        invocation_timeout: float = dataclasses.field(
            default=60.0, metadata={"help": "Seconds before an invocation is relaunched.",
                                    "bounds": Bounds(0, low_open=True)})
        param_servers: int = dataclasses.field(
            default=1, metadata={"help": "Parameter-server replicas per graph server."})
        dropout: float = dataclasses.field(
            default=-1.0, metadata={"help": "GCN, SAGE: dropout between layers; GAT: every "
                                            "conv's "
                                            "feature dropout; -1: the model's (its `dropout` "
                                            "module's, or its convs' `feat_drop`)."})
        seed: int = dataclasses.field(default=0, metadata={"help": "Dropout seed."})
        server_usd_per_hour: float = dataclasses.field(
            default=0.34, metadata={"help": "Price of one graph server (cost estimate).",
                                    "bounds": Bounds(0)})
        lambda_usd_per_gb_s: float = dataclasses.field(
            default=0.0000166667, metadata={"help": "Lambda compute price per GB-second.",
                                            "bounds": Bounds(0)})
        lambda_usd_per_request: float = dataclasses.field(
            default=0.0000002, metadata={"help": "Lambda price per invocation.",
                                         "bounds": Bounds(0)})

        def __post_init__(self):
            if self.num_layers < 1 or self.intervals < 1 or self.param_servers < 1:
                raise InvalidValueError(f"num_layers {self.num_layers}, intervals "
                                        f"{self.intervals}, param_servers {self.param_servers}: "
                                        "each must be >= 1")
            if self.mode not in _MODES:
                raise InvalidValueError(f"mode {self.mode!r}; expected one of {_MODES}")
            if self.staleness not in (0, 1):
                raise InvalidValueError(f"staleness {self.staleness}: expected 0 or 1")
            if self.dropout != -1.0 and not 0.0 <= self.dropout < 1.0:
                raise InvalidValueError(f"dropout {self.dropout}: expected -1 or a value in [0, 1)")
            for kv in self.executor_options:
                if "=" not in kv:
                    raise InvalidValueError(f"executor option {kv!r}: expected key=value")
            if self.executor not in EXECUTORS:
                raise InvalidValueError(f"executor {self.executor!r}; expected one of "
                                        f"{EXECUTORS.names()}")
            EXECUTORS.make_config(self.executor, **self.executor_kwargs())  # checks them

        def executor_kwargs(self) -> dict[str, str]:
            return dict(kv.split("=", 1) for kv in self.executor_options)

    def compute_device(self, session: Session) -> torch.device:
        """The host, even in a GPU job: the tensor work goes to serverless workers."""
        return torch.device("cpu")

    @classmethod
    def exact_options(cls, num_layers: int) -> dict:
        return {"num_layers": num_layers, "mode": "sync"}

    def holdings(self, job: JobSize) -> Holdings:
        """The feature rows of its part and of its ghosts (pulled once at setup), every
        layer's activations of its part (held for the epoch), the hidden layers' ghost
        buffers (rows and their gradients), the parameters."""
        c = self.config
        own = job.nodes / job.world
        ghosts = halo_rows(job, job.world, own)
        buffers = 2 * 4 * ghosts * job.model.hidden * (c.num_layers - 1)
        return Holdings(feature_bytes(job, own + ghosts),
                        activation_bytes(job, [own] * c.num_layers) + buffers,
                        param_bytes(job, c.num_layers))

    def partition_spec(self, topology: Topology) -> PartitionSpec:
        return PartitionSpec("metis", topology.world_size, {"balance": ["train", "edges"]},
                             feature_layout="rows")

    # -- setup ---------------------------------------------------------------------------------
    def setup(self, session: Session, pdir: PartitionDir, store, request: SetupRequest) -> None:
        self.config = with_depth(self, request.num_layers)
        self.session, cfg, self._store = session, self.config, store
        part = pdir.load_part(session.rank, features=store is None)  # else the store has them
        core = torch.from_numpy(part.core_gid)
        src = torch.from_numpy(part.local_gid)[torch.from_numpy(part.src)]
        dst = core[torch.from_numpy(part.dst)]
        intervals = max(1, min(cfg.intervals, core.numel()))
        counts = session.world.all_gather(torch.tensor([intervals]))
        if len({int(c) for c in counts}) != 1:  # message tags assume one interval count
            intervals = int(min(int(c) for c in counts))
        self.gs = GraphServer(session.world, core, src, dst, pdir.book.owner, pdir.num_nodes,
                              intervals)
        self.wu_comm = session.new_world_comm("dorylus-wu")
        self.feat = pull_features_once(self.session, self._store, pdir, part,
                                       torch.cat([core, self.gs.ghost_ids]))
        self.labels = torch.from_numpy(part.label.astype("int64"))
        self.train_mask = torch.from_numpy(part.train.copy())
        total = session.world.all_reduce(self.train_mask.sum().double().reshape(1))
        self._loss_weight = self.train_mask.float() / float(total.clamp(min=1))
        self.executor = EXECUTORS.build(cfg.executor, **cfg.executor_kwargs())
        self.executor.start()
        log.info("dorylus rank %d: %d nodes, %d ghosts, %d reverse ghosts, %d intervals",
                 session.rank, self.gs.n, self.gs.num_ghosts, self.gs.num_rghosts, intervals)

    def _controller(self) -> TaskController:
        cfg = self.config
        start = cfg.lambdas or min(self.gs.num_intervals, 100)
        return TaskController(self.executor, timeout_s=cfg.invocation_timeout,
                                concurrency=min(start, self.executor.capacity))

    def _pipeline(self) -> Pipeline:
        layers = self.kind(self._plan, self.gs, self.feat,
                           TensorSpec(self._dropout, self.config.seed, self._tasks))
        return Pipeline(self.gs, self._controller(), self.session.world, layers,
                        self.config.num_layers, self.ps, self.session.env.timeout)

    # -- model ---------------------------------------------------------------------------------
    def wrap_model(self, model: nn.Module) -> nn.Module:
        convs = graph_convs(model)
        if len(convs) != self.config.num_layers:
            raise InvalidValueError(f"the model has {len(convs)} graph convs; the strategy was "
                                    f"built for num_layers={self.config.num_layers}")
        types = sorted({type(conv).__name__ for conv, _ in convs})
        if len(types) != 1 or types[0] not in self.conv_types:
            raise InvalidValueError("dorylus runs a stack of one conv type, one of "
                                    f"{self.conv_types}; the model's convs are {types} "
                                    f"({', '.join(f'{n}: {type(c).__name__}' for c, n in convs)})")
        self.kind, support = layer_kind(types[0])
        self._tasks = frozenset(support.tasks)
        self.kind.check(convs)
        for t in list(model.parameters()) + list(model.buffers()):  # one model: rank 0's
            self.session.world.broadcast(t.data, 0)
        self._dropout = self.kind.dropouts(model, convs, self.config.dropout)
        if getattr(model, "row_normalize", False):
            self.feat = row_normalized(self.feat)
        self._slots = [s for l, (conv, _) in enumerate(convs)
                       for s in self.kind.param_slots(conv, l)]
        self.params = [p for p, _, _ in self._slots]
        self._sync = GradientSync(self.params)
        self._plan = self.kind.plan(self.gs, convs)
        self.ps = ParamServers([self.kind.tensors(conv) for conv, _ in convs],
                               self.config.param_servers)
        self._model = model
        return model

    # -- training: the pipeline ----------------------------------------------------------------
    def train_epochs(self, epochs: range, hooks: TrainHooks) -> Iterator[EpochResult]:
        """Trains ``epochs`` through the pipeline (epochs overlap under ``mode="async"``),
        yielding each on every rank once its weight update is applied: one step over the
        rank's training nodes, with the executor's counters of the epoch as extra fields."""
        if hooks.loss_fn is not F.cross_entropy:
            raise InvalidValueError(f"strategy {self.registered_name!r} trains through its own "
                                    "pipeline, which computes the cross-entropy loss itself; "
                                    f"loss_fn={getattr(hooks.loss_fn, '__name__', hooks.loss_fn)} "
                                    "cannot be honoured (iterate trainer.batches() for a loss of "
                                    "your own)")
        if not epochs:
            return
        cfg = self.config
        self.ps.refresh()
        pipe = self._pipeline()
        labels = lambda rows: {"labels": self.labels[rows].numpy(),  # noqa: E731
                               "weight": self._loss_weight[rows].numpy()}
        updates = WeightUpdates(self, hooks.optimizer_step, epochs.start)
        samples = int(self.train_mask.sum())
        seen = None  # the controller's counters at the previous update
        for applied in pipe.train(self.kind.train_program(cfg.num_layers), epochs, updates,
                                  sync=cfg.mode == "sync", staleness=cfg.staleness,
                                  extra={"labels": labels}):
            now = pipe.ctl.stats()
            extra = self._executor_stats(now, seen or {k: 0 for k in now}, applied.wall)
            extra["concurrency"] = pipe.ctl.concurrency
            seen = now
            yield EpochResult(applied.epoch, applied.wall, 1, samples, applied.loss,
                              extra=extra)
            updates.restart_clock()

    def _executor_stats(self, now: dict, before: dict, wall: float) -> dict:
        """Invocations, bytes and cost between two snapshots of the controller's counters
        (summed over graph servers)."""
        cfg = self.config
        keys = ("invocations", "relaunches", "timeouts", "worker_lost", "bytes_to_executor",
                "bytes_from_executor", "busy_s")
        delta = torch.tensor([float(now.get(k, 0) - before.get(k, 0)) for k in keys],
                             dtype=torch.float64)
        self.session.world.all_reduce(delta)
        out = {k: (round(float(v), 3) if k == "busy_s" else int(v)) for k, v in zip(keys, delta)}
        memory_mb = self.executor.stats().get("memory_mb", 0)  # 0: nothing billed (inline)
        gb_s = out["busy_s"] * memory_mb / 1024
        requests = out["invocations"] if memory_mb else 0
        cost = (self.session.world_size * cfg.server_usd_per_hour * wall / 3600 +
                gb_s * cfg.lambda_usd_per_gb_s + requests * cfg.lambda_usd_per_request)
        out.update(cost_usd=round(cost, 8), value=round(1.0 / (wall * cost), 3) if cost else 0.0)
        return out

    def step_forward(self, model: nn.Module, blocks, x) -> torch.Tensor:
        """Layer-synchronous logits of the step's rows (``x`` is unused: the graph servers
        hold the features)."""
        state = getattr(blocks, "state", None) or StepState()
        rows = state.rows if state.rows is not None else torch.arange(self.gs.n)
        self.ps.refresh()  # the optimizer may have stepped since the last forward
        if torch.is_grad_enabled():
            return _Logits.apply(self, state.epoch, rows, *self.params)
        return self._forward_logits(state.epoch, train=model.training)[rows]

    # -- the drop-in API -----------------------------------------------------------------------
    def loader_plan(self, ids: torch.Tensor, spec: LoaderSpec) -> LoaderPlan | None:
        """The output rows of this rank's ``ids``, trained ``batch_size`` at a time: every
        step is a full-graph forward whose loss takes the step's rows (as many steps as the
        loader has batches, the most of any rank). A loader of another depth (a layer-wise
        inference's) samples plain blocks (None)."""
        if self.config.num_layers != len(spec.fanouts):
            return None
        rows = torch.searchsorted(self.gs.core, ids).clamp(max=max(self.gs.n - 1, 0))
        if ids.numel() and (self.gs.n == 0 or not bool((self.gs.core[rows] == ids).all())):
            raise InvalidValueError("dorylus: the loader's ids include nodes of other graph "
                                    f"servers (rank {self.session.rank} computes its own nodes' "
                                    "logits only); pass dglx_dist.node_split(ids, g) to the "
                                    "DataLoader")
        return sampled_plan(self.session.world, rows, spec)

    def loader_epoch(self, plan: LoaderPlan, spec: LoaderSpec, epoch: int) -> Iterator[Step]:
        """Layer-synchronous full-graph steps (the bounded-asynchronous pipeline runs under
        ``Trainer.fit``)."""
        for i, chunk in enumerate(epoch_batches(self.session.rank, plan, spec, epoch)):
            state = StepState(rows=chunk, epoch=epoch * plan.steps + i)  # seeds dropout
            outputs = self.gs.core.index_select(0, chunk)
            blocks = node_blocks(self.gs.core, outputs, self.config.num_layers)
            yield Step(self.gs.core, outputs, Blocks(blocks, state))

    def local_nodes(self) -> torch.Tensor:
        return self.gs.core

    def full_graph_step(self, num_layers: int, index: int) -> tuple[Blocks, None]:
        return Blocks([], StepState(epoch=index)), None

    def _forward_logits(self, epoch: int, train: bool, pipe: Pipeline | None = None
                        ) -> torch.Tensor:
        pipe = pipe or self._pipeline()
        return pipe.run(self.kind.forward_program(self.config.num_layers),
                        range(epoch, epoch + 1), train=train, sync=True)["logits"]

    def _backward(self, pipe: Pipeline, epoch: int, dlogits: torch.Tensor
                  ) -> list[torch.Tensor]:
        """The backward program on the pipeline that ran the forward (its gathers are kept)."""
        acc = pipe.run(self.kind.backward_program(self.config.num_layers), range(epoch, epoch + 1),
                       train=True, sync=True, extra={"dlogits": dlogits})
        return self.param_grads(acc["grads"].get(epoch))

    def param_grads(self, grads: dict | None) -> list[torch.Tensor]:
        """The parameters' gradients from the tasks' gradients by (layer, name) (zeros where
        no task contributed, e.g. a rank without intervals)."""
        grads = summed_grads(grads)
        return [to(grads[key]) if key in grads else torch.zeros_like(p)
                for p, key, to in self._slots]

    def before_backward(self) -> None:
        self._sync.start()

    def after_backward(self, steps) -> None:
        """Averages the backward pass's parameter gradients over the ranks (each rank's loss
        is its own mean, as under DDP)."""
        world = self.session.world
        self._sync.finish(lambda flat: world.all_reduce(flat) / world.size)

    def close(self) -> None:
        executor = getattr(self, "executor", None)
        if executor is not None:
            executor.close()
            self.executor = None
