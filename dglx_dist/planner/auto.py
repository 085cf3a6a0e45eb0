"""``--strategy auto``: the strategy name :data:`~dglx_dist.config.AUTO` resolved by a plan,
in one place (:func:`resolve`), before a strategy is built: by ``dglx train`` (the dataset or
partitions, the launch's servers and ranks, its memory), by
:func:`~dglx_dist.api.distribute` and :class:`~dglx_dist.api.DistGraph` (the graph given,
the session's topology; the runner's scripts reach them) and by ``dglx bench --systems
auto`` (the benchmark's setup), each with its :class:`Launch`. Options a user passed are kept,
and only the strategies that take them all are planned; the rest of the options come from
the plan. Every other name passes through unchanged.

Every rank plans alike: the inputs are the same everywhere (the graph, the topology, the
cached unit costs, and the memory of a server as its total, not what is free at the moment).
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Callable, Mapping

from dglx_dist.config import AUTO, RunConfig, TaskConfig
from dglx_dist.planner.plan import Plan, make_plan
from dglx_dist.planner.units import (DEFAULT_GPU_SPEEDUP, DEFAULT_LINK_GBIT, Measured,
                                     load_measured)
from dglx_dist.strategies.cost.shapes import Cluster, GraphShape, Workload

__all__ = ["Launch", "planned_loader", "resolve", "server_cores", "server_memory", "shared_cores",
           "workload_for"]

log = logging.getLogger("dglx_dist.plan")

_DEFAULT_FANOUTS = (10, 25)


def workload_for(options: Mapping[str, Any], model: str = "sage", hidden: int = 64,
                 layers: int = 2, task: TaskConfig | None = None,
                 loaders: bool = False) -> Workload:
    """The workload ``options`` imply (their ``fanouts``, ``batch_size`` or ``num_layers``,
    as given on a command line or in Python), else ``layers`` layers of fanouts 10,...,25
    and 1000 seeds a rank, for ``model`` ``hidden`` wide; with ``task`` (a run config's), its
    task: link prediction's batch (``edge_batch_size``), ``negatives`` and ``train_edges``;
    ``loaders``: trained under the drop-in API's DataLoaders (:attr:`Workload.loaders`)."""
    from dglx_dist.registry import coerce_option

    if task is not None and task.name == "link":
        work = workload_for(options, model, hidden, layers, loaders=loaders)
        return dataclasses.replace(work, task="link", batch_size=task.edge_batch_size,
                                   negatives=task.negatives, train_edges=task.train_edges)

    depth = int(coerce_option(options.get("num_layers", layers), int, "option num_layers"))
    fanouts = (tuple(coerce_option(options["fanouts"], tuple[int, ...], "option fanouts"))
               if "fanouts" in options else (10,) * (depth - 2) + _DEFAULT_FANOUTS[-depth:])
    batch = int(coerce_option(options.get("batch_size", 1000), int, "option batch_size"))
    return Workload(model if model in ("gcn", "sage", "gat", "resgcn") else "sage", hidden,
                    fanouts, batch, loaders=loaders)


def shared_cores(ranks_on_host: int, world_size: int) -> int | None:
    """This machine's cores where every rank of the job runs on it (virtual servers, or an
    emulated cluster: they share its cores), else None (each machine's ranks have their own)."""
    return os.cpu_count() if ranks_on_host >= world_size else None


def server_cores(ranks_on_host: int, ranks_per_server: int) -> int | None:
    """This machine's cores where it runs one server's ranks, else None (not known here)."""
    return os.cpu_count() if ranks_on_host == ranks_per_server else None


def server_memory(memory_limit: int | None, ranks_per_server: int, ranks_on_host: int) -> float:
    """A server's memory: its ranks' share of ``--memory-limit`` (this machine's ranks) or of
    this machine's total, shared by the servers emulated on it."""
    import psutil

    return (memory_limit or psutil.virtual_memory().total) * ranks_per_server / ranks_on_host


@dataclasses.dataclass(frozen=True)
class Launch:
    """What ``auto`` is planned for beside the graph: the job's shape, a server's memory
    (None: not checked), the link (None: measured here, else
    :data:`~dglx_dist.planner.units.DEFAULT_LINK_GBIT`), the cores every rank shares
    (:func:`shared_cores`), the training (:func:`workload_for`) and ``defaults``, options
    the workload takes unless given (a benchmark's batching)."""

    servers: int
    ranks_per_server: int
    memory_bytes: float | None = None
    link_gbit: float | None = None
    shared_cores: int | None = None
    model: str = "sage"
    hidden: int = 64
    layers: int = 2
    task: TaskConfig | None = None
    loaders: bool = False
    defaults: tuple[tuple[str, Any], ...] = ()
    server_cores: int | None = None
    """A server's cores, where ``shared_cores`` is None (:func:`server_cores`; None: not
    known)."""
    gpu: bool = False
    """Whether the ranks train on GPUs: their model's math runs at the GPU speed-up
    ``dglx plan --measure`` measured on a machine with CUDA, else
    :data:`~dglx_dist.planner.units.DEFAULT_GPU_SPEEDUP` (the draws and gathers stay the
    host's)."""

    def cluster(self, measured: Measured) -> Cluster:
        return Cluster(self.servers, self.ranks_per_server, self.link_gbit or
                       measured.link_gbit or DEFAULT_LINK_GBIT, shared_cores=self.shared_cores,
                       memory_bytes=self.memory_bytes, server_cores=self.server_cores,
                       compute_speedup=self.compute_speedup(measured))

    def compute_speedup(self, measured: Measured) -> float:
        """The ranks' model's math over one core here: 1 on the CPU (:attr:`gpu`)."""
        if not self.gpu:
            return 1.0
        return measured.gpu_speedup or DEFAULT_GPU_SPEEDUP

    def workload(self, options: Mapping[str, Any]) -> Workload:
        return workload_for({**dict(self.defaults), **options}, self.model, self.hidden,
                            self.layers, self.task, self.loaders)


def resolve(name: Any, options: Mapping[str, Any], graph: Callable[[], GraphShape],
            launch: Launch, *, accept: Callable[[Any], bool] | None = None, tell: bool = True,
            measured: Measured | None = None) -> tuple[Any, dict[str, Any], Plan | None]:
    """``(name, options, None)`` for any name but :data:`~dglx_dist.config.AUTO`; for it,
    the plan's choice, its options (the given ones kept) and the plan, its two lines logged
    where ``tell`` (rank 0). ``dglx train``, :func:`~dglx_dist.api.distribute` and ``dglx
    bench`` resolve ``auto`` here alone.

    Args:
        graph: the plan's graph, made only for ``auto``.
        launch: the rest of the plan's inputs (the workload from the given options).
        accept: only the strategies (built) it accepts.
        measured: the unit costs (default: cached here, else the defaults).

    Raises:
        InsufficientMemoryError: nothing fits (one line naming the smallest requirement).
        InvalidValueError: no strategy takes the given options.
    """
    if name != AUTO:
        return name, dict(options), None
    measured = load_measured() if measured is None else measured
    plan = make_plan(graph(), launch.workload(options), launch.cluster(measured),
                     measured=measured, given=options, accept=accept)
    if tell:
        log.info("%s", plan.summary())
        log.info("%s", plan.why())
        if launch.gpu:
            log.info("planned for GPU ranks: their model's math %.3gx one core here (%s)",
                     launch.compute_speedup(measured), "measured by dglx plan --measure"
                     if measured.gpu_speedup else "not measured here: the default")
        if plan.choice.thread:
            log.info("its training loader: %s (unless the run says --prefetch-thread or "
                     "--num-workers): each rank has the cores for it beside its model's and "
                     "memory for the steps' rows", plan.choice.loader_text())
    return plan.choice.strategy, dict(plan.choice.options), plan


def planned_loader(config: RunConfig, plan: Plan | None) -> RunConfig:
    """``config`` with its training loader as ``plan``'s choice runs it, where the run left
    it to DGL's defaults: on a worker thread (``--prefetch-thread on``, where the choice
    draws on one, :attr:`~dglx_dist.planner.plan.PlanRow.depth` steps ahead unless the run
    said ``--prefetch-factor``) and with the choice's sampler processes (``--num-workers``,
    :attr:`~dglx_dist.planner.plan.PlanRow.workers`, unless the run said)."""
    if plan is None or not plan.choice.thread:
        return config
    job, choice = config.job, plan.choice
    out = {} if job.num_workers is not None or not choice.workers else \
        {"num_workers": choice.workers}
    if job.prefetch_thread == "auto":
        out |= {"prefetch_thread": "on", "prefetch_factor": job.prefetch_factor or choice.depth}
    return config.updated(job=out) if out else config
