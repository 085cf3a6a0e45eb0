"""The plan: every registered strategy that declares a cost
(:class:`~dglx_dist.strategies.cost.Cost`, read off the built strategy), its options chosen
by its cost's chooser, its epoch predicted (:mod:`~dglx_dist.planner.predict`) and its
memory per rank estimated (the strategy's own measured fit and what it holds at the plan's
widths, :mod:`dglx_dist.strategies.footprint`, plus its margin); the others are listed as
not planned, with why. The fastest that fits is the choice, ranked by epoch time x the
epochs its kind of training needs (:attr:`PlanRow.epochs`: accuracy comes with optimizer
steps, so full-graph training, one step an epoch, takes epochs in proportion to a sampled
epoch's steps). Pure arithmetic: the same inputs give the same plan.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Mapping

from dglx_dist.errors import (DglxError, InsufficientMemoryError, InvalidValueError,
                              NotSupportedError)
from dglx_dist.planner.predict import Calibration, cost_of, phases
from dglx_dist.planner.units import Measured, full_step
from dglx_dist.report import markdown_table
from dglx_dist.strategies import STRATEGIES
from dglx_dist.strategies.cost import Choice, Cost, Situation, workload_options
from dglx_dist.strategies.cost.counts import sampled_steps
from dglx_dist.strategies.cost.shapes import WEIGHTS, Cluster, GraphShape, Workload
from dglx_dist.strategies.footprint import MARGIN, JobSize, ModelSize, peak_per_rank
from dglx_dist.strategies.holdings import sampled_step_bytes
from dglx_dist.strategies.steps import PREFETCH_FACTOR

__all__ = ["MAX_WORKERS", "TASK_NEEDS", "WORKERS_GAIN", "Plan", "PlanRow", "candidates",
           "for_task", "make_plan"]

_MB = 1 << 20
MAX_WORKERS = 4
"""The most sampler processes per rank a plan chooses."""
WORKERS_GAIN = 0.9
"""Sampler processes are chosen only where their epoch is predicted at most this share of the
worker thread's: they take about 2 s to start, and the model's work slows beside them
(docs/benchmarks.md, "Sampler processes where a rank has a core to spare")."""
HANDOVER_S_PER_STEP = 1e-3
"""A step's blocks from its sampler process to its rank, on the rank's core: 0.8 ms for a step
of 16 tensors in one buffer on the development machine (docs/benchmarks.md, "Sampler
processes: DGL's ``num_workers``")."""
PARTS = ("sample", "pull", "compute", "exchange", "overhead")
"""The parts of an epoch a row shows: sampling and local row gathers; fetching input rows
from other servers; the model's math; the other exchanges (activations, halos, gradients,
intra-server traffic, latency, the rounds' own cost); the per-step overhead."""


@dataclasses.dataclass(frozen=True)
class PlanRow:
    """One strategy in a plan (times in seconds, bytes per epoch, memory per rank)."""

    strategy: str
    epoch_s: float
    parts: dict[str, float]
    steps: int
    inter_bytes: float
    peak_bytes: float | None
    fits: bool | None
    options: dict[str, Any]
    full_graph: bool
    """One optimizer step an epoch (full-graph training of the node task)."""
    rounds: float = 0.0
    """Rounds of messages an epoch that cross servers, one after another (each pays the link's
    latency and a round's own cost: :attr:`~dglx_dist.strategies.cost.shapes.Units.round_s`)."""
    epochs: float = 1.0
    """Its epochs to the accuracy a sampled strategy reaches in one: accuracy comes with
    optimizer steps, and a full-graph step is worth 1 / :func:`~dglx_dist.planner.units.full_step`
    steps of sampled mini-batches, so a full-graph row (``steps`` a step or a few: co-batches)
    takes ``full_step`` x a sampled epoch's steps over its own (docs/choosing.md, "Is the plan
    right?")."""
    depth: int = 0
    """Steps its training loader's worker thread draws ahead (DGL's ``prefetch_factor``; 0: no
    worker thread): its loader pipelines, each rank's worker has a core of its own
    (:func:`_pipelined`) and the memory its peak leaves holds the steps' rows
    (:func:`_depth`)."""
    workers: int = 0
    """Sampler processes per rank that draw its training loader's steps beside the worker
    thread (DGL's ``num_workers``; 0: the thread draws them): :func:`_loader_stages`."""

    @property
    def thread(self) -> bool:
        """Its training loader draws on a worker thread (DGL's ``use_prefetch_thread=True``)."""
        return self.depth > 0

    def loader_text(self) -> str:
        """Where its training loader draws: in turn, or on a worker thread so many steps
        ahead, in so many sampler processes."""
        if not self.thread:
            return "in turn"
        procs = f", {_count(self.workers, 'process')}" if self.workers else ""
        return f"thread {self.depth} ahead{procs}"

    @property
    def rank_s(self) -> float:
        """What the plan ranks by: the epoch time x the epochs to accuracy."""
        return self.epoch_s * self.epochs

    @property
    def dominant(self) -> str:
        return max(self.parts, key=lambda k: self.parts[k])

    def option_text(self) -> str:
        return " ".join(f"{k}={_text(v)}" for k, v in sorted(self.options.items())) or "-"

    def public(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "epoch_s": _round(self.epoch_s),
                **{f"{k}_s": _round(v) for k, v in self.parts.items()}, "steps": self.steps,
                "inter_mb": _round(self.inter_bytes / 1e6), "rounds": _round(self.rounds),
                "peak_mb": None if self.peak_bytes is None else round(self.peak_bytes / _MB),
                "fits": {True: "yes", False: "no", None: "?"}[self.fits],
                "options": self.option_text(), "loader": self.loader_text(),
                "rank_s": _round(self.rank_s)}


def _text(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value).lower() if isinstance(value, bool) else f"{value:g}" if isinstance(
        value, float) else str(value)


def _round(x: float) -> float:
    return float(f"{x:.3g}")


@dataclasses.dataclass(frozen=True)
class Plan:
    """Rows fastest first (those that fit before those that do not), the choice and why;
    the registered strategies not planned, with why (``(name, reason)``)."""

    graph: GraphShape
    work: Workload
    cluster: Cluster
    rows: tuple[PlanRow, ...]
    source: str
    not_planned: tuple[tuple[str, str], ...] = ()

    @property
    def choice(self) -> PlanRow:
        return self.rows[0]

    def summary(self) -> str:
        """The first of the two lines: the choice, its options and its epoch."""
        c, k = self.choice, self.cluster
        options = "its default options" if not c.options else f"options {c.option_text()}"
        task = " of link prediction" if self.work.link else ""
        return (f"plan: strategy {c.strategy!r} with {options} (predicted "
                f"{c.epoch_s:.3g} s an epoch{task} on {_count(k.servers, 'server')} x "
                f"{_count(k.ranks_per_server, 'rank')} at {k.link_gbit:g} Gbit/s)")

    def why(self) -> str:
        """The second line: two or three sentences on why."""
        c = self.choice
        ratio = full_step(self.graph, self.work)
        text = [f"{c.strategy} is predicted fastest to accuracy: {_parts(c)}"
                f"{_kind(c, ratio)}."]
        others = [r for r in self.rows[1:] if r.fits is not False]
        if others:
            r = others[0]
            text.append(f"The runner-up, {r.strategy}, would take {r.epoch_s:.3g} s an epoch, "
                        f"{_parts(r, short=True)}{_kind(r, ratio)}: "
                        f"{r.rank_s / c.rank_s:.2g}x the time to accuracy.")
        out = [r.strategy for r in self.rows if r.fits is False]
        if out:
            text.append(f"{', '.join(out)} would not fit in "
                        f"{self.cluster.memory_bytes / _MB:,.0f} MiB a server.")
        return " ".join(text)

    def table(self) -> str:
        """Every planned row, then each strategy not planned with why."""
        rows = [r.public() for r in self.rows]
        return markdown_table(rows + [{"strategy": name, "epoch_s": "not planned",
                                       "options": why} for name, why in self.not_planned])

    def public(self) -> dict[str, Any]:
        return {"graph": self.graph.public(), "workload": dataclasses.asdict(self.work),
                "cluster": dataclasses.asdict(self.cluster), "units": self.source,
                "rows": [r.public() for r in self.rows], "choice": self.choice.strategy,
                "options": {k: list(v) if isinstance(v, tuple) else v
                            for k, v in self.choice.options.items()},
                "summary": self.summary(), "why": self.why(),
                "not_planned": dict(self.not_planned)}


def _count(n: int, what: str) -> str:
    return f"{n} {what}{('es' if what.endswith('s') else 's') if n != 1 else ''}"


def _kind(row: PlanRow, ratio: float) -> str:
    """How a full-graph row's epochs were counted (``ratio``: :func:`full_step`)."""
    steps = round(row.epochs * row.steps / ratio)
    return (f", counted {row.epochs:.3g} times: {_count(row.steps, 'optimizer step')} an "
            f"epoch against {_count(steps, 'step')} of sampled mini-batches" if row.full_graph
            else "")


def _parts(row: PlanRow, short: bool = False) -> str:
    dom = row.dominant
    what = f"mostly {dom}" if short else (f"{row.epoch_s:.3g} s an epoch, mostly {dom} "
                                          f"({row.parts[dom]:.3g} s)")
    if dom in ("pull", "exchange") and row.inter_bytes:
        what += f" with {row.inter_bytes / 1e6:,.0f} MB between servers"
    return what


def _row(cost: Cost, s: Situation) -> PlanRow:
    chosen: Choice = cost.choose(s, cost.epoch(s.graph, s.work, s.cluster))
    w, cluster = chosen.work, s.cluster
    ph = phases(w, s.units, cluster, Calibration(cost.overhead_s_per_step))
    pull = ph["inter"] * (w.pull_inter_bytes / w.inter_bytes) if w.inter_bytes else 0.0
    exchange = ph["inter"] - pull + ph["intra"] + ph["latency"]
    if chosen.overlap:  # hidden behind the compute as far as it lasts
        exchange = max(0.0, exchange - ph["compute"])
    exchange += ph["rounds"]  # the rounds' own CPU time: nothing hides it
    parts = {"sample": ph["sample"] + ph["gather"], "pull": pull, "compute": ph["compute"],
             "exchange": exchange, "overhead": ph["overhead"]}
    peak = chosen.peak_per_rank
    depth = _depth(s, peak) if chosen.pipelined and _free_cores(cluster) else 0
    workers = 0
    if chosen.pipelined:
        parts, workers = _loader_stages(parts, ph["sample"], w.steps, cluster, depth > 0)
    fits = None if peak is None or cluster.memory_bytes is None else \
        cluster.ranks_per_server * peak <= cluster.memory_bytes
    once = cost.steps_once(s.work)
    epochs = full_step(s.graph, s.work) * sampled_steps(s.graph, s.work, cluster) / w.steps \
        if once else 1.0
    return PlanRow(s.strategy, sum(parts.values()), parts, w.steps, w.inter_bytes, peak, fits,
                   chosen.options, once, w.rounds, epochs, depth, workers)


def _pipelined(parts: dict[str, float], cluster: Cluster) -> dict[str, float]:
    """``parts`` of an epoch whose loader runs on a worker thread: the loader's stage (its
    draws, ``sample``, and the wire time of its pulls, ``pull``) hides behind the model's
    (compute, exchange, overhead) as far as that lasts, the pull first; the draws hide only
    where each rank's worker has a core of its own (ranks sharing cores run them in turn
    with the model). What is left of each is what the step waits for: the epoch is the
    larger stage where the cores are free."""
    model = parts["compute"] + parts["exchange"] + parts["overhead"]
    hidden = min(model, parts["pull"] + (parts["sample"] if _free_cores(cluster) else 0.0))
    pull = min(hidden, parts["pull"])
    return parts | {"pull": parts["pull"] - pull, "sample": parts["sample"] - (hidden - pull)}


def _loader_stages(parts: dict[str, float], draws: float, steps: int, cluster: Cluster,
                   processes: bool) -> tuple[dict[str, float], int]:
    """``parts`` of a pipelined loader's epoch and its sampler processes per rank: the worker
    thread's (:func:`_pipelined`), or, where ``processes`` may run (the thread does) and each
    rank has at least 2 cores, the processes' (:func:`_with_processes`, up to
    :data:`MAX_WORKERS` and one fewer than the rank's cores, at least one) where their
    shortest epoch, with the fewest processes, is at most :data:`WORKERS_GAIN` of the
    thread's."""
    thread = _pipelined(parts, cluster)
    cores = cluster.cores_per_rank()
    if not processes or cores is None or cores < 2:
        return thread, 0
    tried = [_with_processes(parts, draws, steps, cores, n)
             for n in range(1, min(MAX_WORKERS, max(1, int(cores) - 1)) + 1)]
    best = min(range(len(tried)), key=lambda i: sum(tried[i].values()))
    if sum(tried[best].values()) > WORKERS_GAIN * sum(thread.values()):
        return thread, 0
    return tried[best], best + 1


def _with_processes(parts: dict[str, float], draws: float, steps: int, cores: float,
                    n: int) -> dict[str, float]:
    """``parts`` of an epoch whose loader's steps are drawn by ``n`` sampler processes per
    rank (``draws``: the draws' share of ``parts["sample"]``, the rest the rows' gathers)
    while its worker thread gathers and pulls their rows. The stages run side by side and the
    epoch is the longest of them: the model's (compute, exchange, overhead and each step's
    hand-over from its process, :data:`HANDOVER_S_PER_STEP`), the thread's (the gathers, then
    the pulls' wire time), the processes' (the draws, ``n`` at a time) and the rank's CPU
    work over its ``cores``. What the model's stage does not cover is what the step waits
    for: the pulls first, then the sampling."""
    handover = steps * HANDOVER_S_PER_STEP
    model = parts["compute"] + parts["exchange"] + parts["overhead"] + handover
    epoch = max(model, parts["sample"] - draws + parts["pull"], draws / n,
                (model + parts["sample"]) / cores)
    pull = min(epoch - model, parts["pull"])
    return parts | {"overhead": parts["overhead"] + handover, "pull": pull,
                    "sample": epoch - model - pull}


def _free_cores(cluster: Cluster) -> bool:
    """Whether each rank's loader worker has a core of its own beside its model's."""
    cores = cluster.cores_per_rank()
    return cores is None or cores >= 2


def _depth(s: Situation, peak: float | None) -> int:
    """Steps a rank's loader worker draws ahead: DGL's default
    (:data:`~dglx_dist.strategies.steps.PREFETCH_FACTOR`), fewer where the memory a server
    leaves each rank beside its estimated ``peak`` holds fewer steps' input rows (a step drawn
    ahead holds its rows until the model takes it), 0 where not one (no worker thread)."""
    memory = s.cluster.memory_bytes
    if memory is None or peak is None:
        return PREFETCH_FACTOR
    step, _ = sampled_step_bytes(_job(s.graph, s.work, s.cluster), s.work.fanouts,
                                 s.work.batch_size, copies=1)
    room = memory / s.cluster.ranks_per_server - peak
    return max(0, min(PREFETCH_FACTOR, int(room // max(step, 1.0))))


def _job(graph: GraphShape, work: Workload, cluster: Cluster) -> JobSize:
    """A rank's share of the plan's job, for the memory model."""
    model = ModelSize(work.hidden, work.dims(graph)[-1], WEIGHTS[work.model])
    return JobSize(graph, cluster.world, cluster.ranks_per_server, model,
                   cluster.ranks_per_server)


def _peak(name: str, options: Mapping[str, Any], graph: GraphShape, work: Workload,
          cluster: Cluster) -> float | None:
    """A rank's memory under strategy ``name`` built with ``options`` and the workload's
    depth and batching: its fit at the graph's share, what it holds at the plan's widths
    (features, a step's rows, activations, parameters), plus the check's margin (None: no
    memory model)."""
    job = _job(graph, work, cluster)
    built = STRATEGIES.build(name, **{**workload_options(STRATEGIES.get(name).Config, work),
                                      **options})
    peak = peak_per_rank(built, job)
    return None if peak is None else peak * (1 + MARGIN)


TASK_NEEDS: dict[str, tuple[str, ...]] = {"node": (), "link": ("link_prediction",)}
"""By task, the capabilities a strategy needs to be planned for it."""


def for_task(work: Workload) -> Callable[[Any], bool]:
    """Whether a strategy (built) has the capabilities ``work``'s task needs."""
    return lambda built: all(getattr(built.capabilities, c) for c in TASK_NEEDS[work.task])


def candidates(given: Mapping[str, Any], graph: GraphShape,
               accept: Callable[[Any], bool] | None = None,
               refused: dict[str, str] | None = None) -> list[tuple[str, Any]]:
    """The registered strategies with a cost that take every option in ``given``, train the
    graph (one with types: those that train typed graphs), and that ``accept`` takes (built
    with ``given``; e.g. :func:`for_task`; it may raise a :class:`~dglx_dist.errors.DglxError`
    that says why not): ``(name, built)`` in registry order. ``refused``, where given, gets
    why each of the others was left out, by name."""
    out, refused = [], {} if refused is None else refused
    for name in STRATEGIES.names():
        fields = {f.name for f in dataclasses.fields(STRATEGIES.get(name).Config)}
        if set(given) - fields:
            refused[name] = f"no option {', '.join(sorted(set(given) - fields))}"
            continue
        try:
            built = STRATEGIES.build(name, **given)
            cost_of(built)  # raises: it declares none
            if graph.node_types and not built.capabilities.typed_graphs:
                raise NotSupportedError("graphs with node types are not trained")
            if graph.node_types:
                built.check_typed("the planned graph")
            if accept is None or accept(built):
                out.append((name, built))
            else:
                refused[name] = "left out by the caller (e.g. it does not fit the partitions)"
        except DglxError as exc:
            refused[name] = str(exc)
    return out


def make_plan(graph: GraphShape, work: Workload, cluster: Cluster, *,
              measured: Measured = Measured(), given: Mapping[str, Any] | None = None,
              accept: Callable[[Any], bool] | None = None) -> Plan:
    """The plan for training ``work`` on ``graph`` with ``cluster``.

    Args:
        measured: the unit costs (:func:`~dglx_dist.planner.units.load_measured`).
        given: options the user set (kept; only strategies that take them all are planned).
        accept: only the strategies (built) it accepts (e.g. those that fit a partition
            directory; it may raise a :class:`~dglx_dist.errors.DglxError` saying why not,
            which the refusal names); only those with the capabilities ``work``'s task needs
            are planned (:data:`TASK_NEEDS`).

    Raises:
        InvalidValueError: no registered strategy can be planned (one line: why each was
            left out).
        InsufficientMemoryError: no strategy fits the cluster's memory (one line naming the
            smallest requirement).
    """
    given, task, refused = dict(given or {}), for_task(work), {}

    def planned(built) -> bool:
        if not task(built):
            raise NotSupportedError(f"the {work.task!r} task is not trained")
        if not cost_of(built).trains(work.model):
            raise NotSupportedError(f"model {work.model!r} is not trained")
        return accept is None or accept(built)

    found = candidates(given, graph, planned, refused)
    if not found:
        raise _none_planned(refused, given)
    rows = [_row(cost_of(built), Situation(
        name, type(built.config), graph, work, cluster, measured.units,
        {k: getattr(built.config, k) for k in given}, _peak(name, given, graph, work, cluster)))
            for name, built in found]
    rows.sort(key=lambda r: (r.fits is False, r.rank_s, r.strategy))
    if rows[0].fits is False:
        raise _nothing_fits(rows, cluster)
    return Plan(graph, work, cluster, tuple(rows), measured.source, tuple(refused.items()))


def _none_planned(refused: Mapping[str, str], given: Mapping[str, Any]) -> InvalidValueError:
    """No strategy can be planned: why each was left out (the same reasons together)."""
    by_reason: dict[str, list[str]] = {}
    for name, reason in refused.items():
        by_reason.setdefault(reason, []).append(name)
    why = "; ".join(f"{', '.join(names)}: {reason}" for reason, names in by_reason.items())
    options = f" with the options {sorted(given)}" if given else ""
    return InvalidValueError(f"plan: no strategy with a cost model can be planned here"
                             f"{options} ({why or 'none is registered'})")


def _nothing_fits(rows: Iterable[PlanRow], cluster: Cluster) -> InsufficientMemoryError:
    least = min(rows, key=lambda r: r.peak_bytes)
    g = cluster.ranks_per_server
    return InsufficientMemoryError(
        f"plan: no strategy fits in {cluster.memory_bytes / _MB:,.0f} MiB a server "
        f"({_count(g, 'rank')} a server); the smallest requirement is "
        f"{least.strategy!r}: about {least.peak_bytes * g / _MB:,.0f} MiB a server "
        f"({least.peak_bytes / _MB:,.0f} MiB a rank, by its memory estimate at the plan's "
        f"widths plus margin): give each server more memory, use more servers, or fewer ranks "
        f"a server")
