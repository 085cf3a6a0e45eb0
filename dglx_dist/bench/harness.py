"""The systems ``dglx bench`` compares (single-process DGL, :mod:`~dglx_dist.bench.single`;
DGL's DistDGL, :func:`~dglx_dist.bench.dgl_distdgl.run_dgl`; every registered strategy, as
``dglx train`` under torchrun or, on a typed dataset, in DGL's loop through our drop-in API:
:func:`dropin_target`), and how one run of each becomes a result row. Which systems run a
kind of dataset, and how a strategy starts, is the kind's data
(:data:`dglx_dist.bench.kinds.KINDS`, handed to :func:`systems`); a strategy's options are
:func:`strategy_config`'s. docs/benchmarks.md, "Every system in one command", says more.
One concept at some 410 lines: from a system's name to its row, for every system.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from dglx_dist.bench.dgl_distdgl import MACHINES, dgl_layout, mean_phases, run_dgl, startup
from dglx_dist.bench.procs import run_group
from dglx_dist.bench.shared import Setup, process_env as _env
from dglx_dist.cli_flags import parse_key_values, to_argv
from dglx_dist.config import AUTO, TRAINING, StrategyConfig
from dglx_dist.errors import RunFailedError
from dglx_dist.runtime.env import free_local_port, torchrun

__all__ = ["BASELINES", "NAMED_ONLY", "PLANNED_TASKS", "REDUCERS", "STRATEGY_OPTIONS", "Setup",
           "TASK_NEEDS", "Target", "add_time_to_accuracy", "attempt", "dropin_target",
           "first_reached", "given_options", "launch", "parse_records", "reduce_records", "run_env",
           "run_planned", "run_strategy", "run_system", "skipped_baselines",
           "strategy_config", "summarize", "systems", "train_command", "train_target"]

log = logging.getLogger("dglx_dist.bench")
Options = Mapping[str, Mapping[str, Any] | Sequence[str]]
"""Strategy options by strategy name: keywords, or (the sweeps' older form) ``KEY=VALUE``s."""
STRATEGY_OPTIONS: dict[str, dict[str, Any]] = {}
"""Per-strategy option overrides; empty: every strategy runs on the common setup with its own
defaults (dorylus: async, staleness 0, local executor)."""


def parse_records(stdout: str) -> list[dict[str, Any]]:
    """The JSON lines of a rank's stdout (its metrics records)."""
    return [json.loads(ln) for ln in stdout.splitlines() if ln.startswith("{")]


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Row fields from per-epoch records (epoch time, bytes and the step's phases where the
    records time them: mean without the first epoch; also the epoch times' median and their
    range, without the first; the bytes read from copies of earlier steps' rows instead of
    sent, where some were) and the link task's closing record of test metrics (``test_*``),
    if any."""
    final = {k: v for r in records if "epoch_time" not in r for k, v in r.items()}
    records = [r for r in records if "epoch_time" in r]
    mean = lambda k: REDUCERS["mean"](records, k)  # noqa: E731
    timed = [r["epoch_time"] for r in records[1:] or records]
    return {"epoch_time": round(mean("epoch_time"), 4),
            "epoch_time_median": round(statistics.median(timed), 4),
            "epoch_time_spread": [min(timed), max(timed)],
            "epoch_time_first": records[0]["epoch_time"],
            "epoch_times": [r["epoch_time"] for r in records],
            "bytes_inter": int(mean("bytes_sent_inter")),
            "bytes_inter_busiest": int(mean("bytes_sent_inter_busiest")),
            "bytes_intra": int(mean("bytes_sent_intra")),
            "peak_mem_mb": REDUCERS["max"](records, "peak_mem_mb"),
            "val_acc_per_epoch": [r.get("val_acc") for r in records],
            "val_acc": records[-1].get("val_acc"), "test_acc": records[-1].get("test_acc"),
            "steps": records[-1].get("steps"), "epochs": len(records)} | _ranking(records, final) \
        | ({"phases": mean_phases([r["phases_max"] for r in records[1:] or records])}
           if "phases_max" in records[-1] else {}) \
        | ({"reused_bytes": int(mean("reused_bytes"))}  # read from copies: not sent
           if any("reused_bytes" in r for r in records) else {})


def _ranking(records: list[dict[str, Any]], final: dict[str, Any]) -> dict[str, Any]:
    """The link task's metrics: validation MRR per epoch and last, AUC last, and the tests'."""
    if "val_mrr" not in records[-1] and not final:
        return {}
    return {"val_mrr_per_epoch": [r.get("val_mrr") for r in records],
            "val_mrr": records[-1].get("val_mrr"), "val_auc": records[-1].get("val_auc"),
            **final}


def run_single(setup: Setup) -> dict[str, Any]:
    """Plain DGL in one process; its batch is the distributed runs' global batch."""
    cmd = [sys.executable, "-m", "dglx_dist.bench.single", "--data", str(setup.data),
           *to_argv(setup.training(), sections=TRAINING),
           "--fanouts", ",".join(map(str, setup.fanouts)),
           "--batch-size", str(setup.batch_size * setup.world)]
    t0 = time.perf_counter()
    return summarize(parse_records(_stdout(cmd, _env(setup), setup, "single-process DGL"))) | {
        "network": "none (1 process)", "run_wall_s": round(time.perf_counter() - t0, 1),
        "note": f"batch {setup.batch_size * setup.world} (= the global batch)"}


def run_dgl_distdgl(setup: Setup) -> dict[str, Any]:
    """DGL's DistDGL's row (:func:`~dglx_dist.bench.dgl_distdgl.run_dgl`): on the setup's
    emulated network, or on loopback beside virtual servers (not shaped, bytes not counted)."""
    t0 = time.perf_counter()
    res = run_dgl(setup, _env(setup))
    emulated = setup.network.startswith("emulated-")
    trainers, batch = dgl_layout(setup)
    note = (f"{MACHINES} machines x {trainers} trainer(s), batch {batch}; trainer peak "
            f"(+{res.get('server_peak_mb')} MB per server process); " + (
                "bytes: the machines' interface counters (payload and TCP/IP headers)"
                if emulated else "bytes not counted"))
    if res.get("shutdown_killed"):
        note += (f"; machine(s) {res['shutdown_killed']} killed in DGL's shutdown after "
                 f"finishing")
    if res.get("hung_runs"):
        note += "; run again after a DGL trainer hung in its RPC"
    link = setup.run.task.name == "link"
    if link:
        note += ("; the batch's edges left out of its blocks after DGL draws them (DGL 2.1's "
                 "DistGraph ignores exclude_edges), negatives drawn per trainer")
    common = {"network": setup.network if emulated else "loopback (not shaped)",
              "bytes_intra": None, "peak_mem_mb": res["peak_mem_mb"],
              "run_wall_s": round(time.perf_counter() - t0, 1), "note": note}
    if link:
        row = summarize(res["records"] + [res["test"]])
        return row | common | {"bytes_inter": row["bytes_inter"] if emulated else None}
    records = [{"epoch_time": t, "val_acc": v} for t, v in
               zip(res["epoch_times"], res.get("val_accs") or [None] * res["epochs"])]
    return summarize(records) | common | {
        "startup_s": res.get("startup_s"), "test_acc": res["test_acc"], "steps": res["steps"],
        "bytes_inter": res.get("bytes_sent_inter_per_epoch"), "phases": res.get("phases"),
        "bytes_inter_busiest": res.get("bytes_sent_inter_busiest_per_epoch")}


def strategy_config(name: str, setup: Setup, extra: Options) -> StrategyConfig:
    """Strategy ``name``'s typed options: the common ones it declares, the table, ``extra``'s
    (keywords, or ``KEY=VALUE`` strings as the sweeps give them), each over the ones
    before."""
    from dglx_dist.strategies import STRATEGIES

    fields = {f.name for f in dataclasses.fields(STRATEGIES.get(name).Config)}
    common = {"fanouts": setup.fanouts, "batch_size": setup.batch_size,
              "num_layers": setup.layers} | (
        {"eval_fanouts": setup.eval_fanouts} if setup.eval_fanouts else {})
    return StrategyConfig.of(name, **{k: v for k, v in common.items() if k in fields}
                             | STRATEGY_OPTIONS.get(name, {}) | given_options(extra, name))


def given_options(extra: Options, name: str) -> dict[str, Any]:
    """``--strategy-opt NAME:KEY=VALUE``'s options of ``name`` (keywords, or the sweeps'
    ``KEY=VALUE``s)."""
    given = extra.get(name, {})
    return dict(given) if isinstance(given, Mapping) else \
        parse_key_values(given, f"--strategy-opt {name}:")


def model_mismatch(name: str, setup: Setup) -> str | None:
    """Why strategy ``name`` cannot run the common model (its ``conv_types``), or None."""
    from dglx_dist.models import MODELS
    from dglx_dist.strategies import STRATEGIES
    from dglx_dist.strategies.abilities import ConvTypes

    cls = STRATEGIES.get(name)
    allowed = cls.conv_types if issubclass(cls, ConvTypes) else None
    model = MODELS[setup.run.model.name](4, 4, 2, setup.layers, convs=setup.run.model.convs)
    convs = {type(m).__name__ for m in model.modules()
             if type(m).__module__.startswith(("dgl.nn", "dglx_dist.nn"))}
    if allowed is None or convs <= set(allowed):
        return None
    return (f"not run: {name} runs {', '.join(allowed)}; the common model "
            f"{setup.run.model.name!r} uses {', '.join(sorted(convs))} (choose --model gcn to "
            f"include it)")


def describe(strategy: StrategyConfig, task: str = "node") -> str:
    """How the strategy batches under these options: sampled when it has fanouts, else the
    Trainer's full-graph loaders (one step, unless it cuts them into co-batches)."""
    config = strategy.options if strategy.options is not None else \
        StrategyConfig.of(strategy.name).options
    if hasattr(config, "fanouts"):
        return "sampled mini-batches"
    if getattr(config, "co_batches", 1) in (1, -1):
        return ("full-graph: full neighbourhoods, one step per epoch" if task == "node" else
                "full-graph: every node's embedding each step, the batch's pairs scored")
    return "its own batching"


Target = Callable[[Setup, StrategyConfig], tuple[list[str], str]]
"""How a strategy's run starts: ``python TARGET`` under torchrun and the row's note, from
the setup and the strategy (partitions made first where the run needs them)."""


def train_target(setup: Setup, strategy: StrategyConfig) -> tuple[list[str], str]:
    """``dglx train`` (the Trainer), on partitions made first (node task, none given)."""
    if (setup.run.task.name == "node" and setup.run.data.partitions is None
            and "--partitions" not in setup.train_flags):
        partition_first(strategy, setup)
    return ["-m", "dglx_dist", *train_command(setup, strategy)], describe(
        strategy, setup.run.task.name)


def dropin_target(setup: Setup, strategy: StrategyConfig) -> tuple[list[str], str]:
    """DGL's loop through our drop-in API (``python -m dglx_dist.bench.dgl_distdgl_nodes``),
    on the partitions the strategy asks for, made first (as DGL's are)."""
    parts = partition_first(strategy, setup)
    run = setup.training(strategy).updated(data={"partitions": Path(parts)})
    return ["-m", "dglx_dist.bench.dgl_distdgl_nodes", *to_argv(run), "--fanouts",
            ",".join(map(str, setup.fanouts)), "--batch-size", str(setup.batch_size),
            "--num-classes", str(setup.num_classes)], (
        f"drop-in API (distribute, DataLoader, parallelize), batch {setup.batch_size} per "
        f"rank")


def run_strategy(name: str, setup: Setup, extra: Options,
                 summary: Callable[[list[dict[str, Any]]], dict[str, Any]] = summarize,
                 target: Target = train_target) -> dict[str, Any]:
    """Strategy ``name`` on the emulated cluster or on virtual servers, started by
    ``target`` (``dglx train``, unless told); its records made a row by ``summary``."""
    strategy = strategy_config(name, setup, extra)
    command, note = target(setup, strategy)
    t0, launched = time.perf_counter(), time.time()
    records = parse_records(launch(setup, command))
    return summary(records) | startup(records, launched) | {
        "network": setup.network, "run_wall_s": round(time.perf_counter() - t0, 1),
        "note": note, "options": strategy.flag_pairs()}


def run_planned(setup: Setup, extra: Options, needs: Sequence[str] = (),
                target: Target = train_target, loaders: bool = False) -> dict[str, Any]:
    """``auto``: the strategy a plan picks for the setup
    (:func:`~dglx_dist.bench.planned.plan_setup`; ``--strategy-opt auto:KEY=VALUE`` kept),
    among those that run the common model and have the capabilities ``needs``, run as its
    own row is (:func:`run_strategy`) with the plan's options; the row is named
    ``auto (STRATEGY)`` and keeps the plan's lines."""
    from dglx_dist.bench.planned import plan_fields, plan_setup

    def runs_here(built) -> bool:
        return (all(getattr(built.capabilities, c) for c in needs)
                and model_mismatch(built.registered_name, setup) is None)

    from dglx_dist.planner.auto import planned_loader

    name, options, plan = plan_setup(setup, given_options(extra, AUTO), runs_here, loaders)
    setup = dataclasses.replace(setup, run=planned_loader(setup.run, plan))
    row = run_strategy(name, setup, {name: options}, target=target)
    predicted = f"planned: {plan.choice.epoch_s:.3g} s an epoch predicted"
    return row | {"system": f"{AUTO} ({name})", "strategy": name,
                  "note": f"{predicted}; {row['note']}"} | plan_fields(plan)


def partition_first(strategy: StrategyConfig, setup: Setup) -> str:
    """Makes the partitions ``dglx train`` will find in the setup's cache, so that a run's
    start-up is the job's own, as DGL's partitioning comes before its run (node task; a link
    run partitions the training graph it splits off itself); returns their directory."""
    from dglx_dist.prepare import partition_ahead
    from dglx_dist.runtime.allocator import release_free_memory
    from dglx_dist.runtime.topology import Topology

    parts = partition_ahead(str(setup.data), strategy.build(),
                            Topology(setup.servers, setup.ranks_per_server),
                            str(setup.workdir.resolve() / "parts"))
    release_free_memory()  # what partitioning freed would stay in this process's heap (GBs)
    return parts


def train_command(setup: Setup, strategy: StrategyConfig) -> list[str]:
    """``dglx train``'s arguments for ``strategy``: the setup's :meth:`~Setup.training`
    config as its flags."""
    return ["train", *to_argv(setup.training(strategy)), *setup.train_flags]


def launch(setup: Setup, target: list[str]) -> str:
    """Rank 0's stdout of ``python TARGET`` (e.g. ``-m module args``) under torchrun, on the
    setup's network, with its environment.

    Raises:
        RunFailedError: a process exited with an error.
    """
    return (_emulated if setup.network.startswith("emulated-") else _virtual)(setup, target)


def run_env(setup: Setup) -> dict[str, str]:
    """The environment of the setup's processes on virtual servers."""
    return {**_env(setup), "DGLX_VIRTUAL_SERVERS": str(setup.servers)}


def _virtual(setup: Setup, target: list[str]) -> str:
    cmd = torchrun("--nproc-per-node", str(setup.world), "--master-port", str(free_local_port()),
                   *target)
    return _stdout(cmd, run_env(setup), setup, "dglx train")


def _stdout(cmd: list[str], env: dict[str, str], setup: Setup, what: str) -> str:
    """The stdout of ``cmd`` run within the setup's timeout; ``what`` names it if it fails."""
    (proc,), _ = run_group([cmd], env, setup.timeout, [None])
    if proc.returncode:
        raise RunFailedError(f"{what} failed with exit code {proc.returncode}")
    return proc.stdout


def _emulated(setup: Setup, target: list[str]) -> str:
    from dglx_dist.cluster.emulate import PRESETS, run_job

    env = {k: v for k, v in _env(setup).items() if k != "DGLX_VIRTUAL_SERVERS"}
    link = PRESETS[setup.network.removeprefix("emulated-")]
    nodes = run_job(setup.servers, setup.ranks_per_server, link, target, env=env,
                    timeout=setup.timeout)
    failed = [n for n in nodes if n.returncode]
    if failed:
        tail = "\n".join(failed[0].stderr.splitlines()[-15:])
        raise RunFailedError(f"node {failed[0].node} exited with {failed[0].returncode}:\n{tail}")
    return nodes[0].stdout


BASELINES: dict[str, Callable[[Setup], dict[str, Any]]] = {
    "dgl": run_single, "dgl-distdgl": run_dgl_distdgl}
"""The DGL systems by name."""
TASK_NEEDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "node": (("dgl", "dgl-distdgl"), ()), "link": (("dgl-distdgl",), ("link_prediction",))}
"""By task: the baselines that run it, and the capabilities a strategy needs to."""
PLANNED_TASKS = ("node", "link")
"""The tasks ``auto`` (:func:`run_planned`) runs: those a plan models."""
NAMED_ONLY = (AUTO,)
"""Systems that run only where ``--systems`` names them (``auto`` runs one of the
strategies again)."""


def skipped_baselines(baselines: Sequence[str] = tuple(BASELINES),
                      task: str = "node") -> tuple[str, ...]:
    """The ``baselines`` that run ``task`` but cannot run here: every one (they are DGL's
    own) where DGL is not installed; none where it is."""
    from dglx_dist.data.convert import dgl_installed

    return () if dgl_installed() else tuple(b for b in baselines if b in TASK_NEEDS[task][0])


def systems(extra: Options, task: str = "node", baselines: Sequence[str] = tuple(BASELINES),
            needs: Sequence[str] = (), target: Target = train_target, loaders: bool = False
            ) -> dict[str, Callable[[Setup], dict[str, Any]]]:
    """Every system by name that runs ``task``: the ``baselines`` that run it (where DGL is
    installed: :func:`skipped_baselines`), then each registered strategy whose capabilities
    say ``needs`` and the task's (``link``: ``link_prediction``), started by ``target``, and
    ``auto`` (:func:`run_planned`) for the tasks a plan models (:data:`NAMED_ONLY`: not run
    unless named)."""
    from dglx_dist.strategies import STRATEGIES

    runs, task_needs = TASK_NEEDS[task]
    skipped = skipped_baselines(baselines, task)
    table = {name: BASELINES[name] for name in baselines if name in runs and name not in skipped}
    for name in STRATEGIES.names():
        capabilities = STRATEGIES.get(name).capabilities
        if all(getattr(capabilities, c) for c in (*needs, *task_needs)):
            table[name] = lambda setup, name=name: run_strategy(name, setup, extra,
                                                                target=target)
    if task in PLANNED_TASKS:
        table[AUTO] = lambda setup: run_planned(setup, extra, (*needs, *task_needs), target,
                                                loaders)
    return table


def run_system(name: str, runner: Callable[[Setup], dict[str, Any]],
               setup: Setup) -> dict[str, Any]:
    """One row: the runner's result, or why it did not run (never raises)."""
    from dglx_dist.strategies import STRATEGIES

    base = {"system": name, "strategy": name if name in STRATEGIES else None,
            "network": setup.network if name in STRATEGIES else None,
            "config": setup.public()}
    why = model_mismatch(name, setup) if name in STRATEGIES else None
    if why:
        return base | {"error": why}
    log.info("running %s", name)
    return base | attempt(name, lambda: runner(setup))


def attempt(name: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``run()``'s row, or ``{"error": ...}`` saying why it failed (logged; never raises)."""
    try:
        return run()
    except Exception as exc:  # noqa: BLE001  (a failed run is a row, and the exit code)
        log.error("%s failed: %s", name, exc)
        return {"error": f"{type(exc).__name__}: {exc}"[:2000]}


REDUCERS: dict[str, Callable[[list[dict[str, Any]], str], Any]] = {
    "mean": lambda recs, k: sum(r.get(k) or 0 for r in recs[1:] or recs) / len(recs[1:] or recs),
    "max": lambda recs, k: max(r.get(k) or 0 for r in recs),
}
"""How :func:`reduce_records` makes one value of a record key: ``mean`` without the first
epoch (as :func:`summarize` averages bytes), ``max`` over every epoch (as it takes peaks)."""


def reduce_records(records: list[dict[str, Any]], how: dict[str, str]) -> dict[str, Any]:
    """Record keys beyond :func:`summarize`'s, each reduced by its :data:`REDUCERS` name."""
    return {key: REDUCERS[reducer](records, key) for key, reducer in how.items()}


def add_time_to_accuracy(rows: list[dict[str, Any]], fraction: float,
                         reference: str = "dgl", best_epoch: bool = False) -> float | None:
    """Sets ``target_acc`` and ``time_to_accuracy`` on every row; returns the target.

    The target is ``fraction`` x the final validation accuracy of the ``reference`` row
    (single-process DGL), or of the best row where that did not run; with ``best_epoch``,
    ``fraction`` x the best validation accuracy any row reached in any epoch.
    ``time_to_accuracy`` is the training time (summed epoch times, evaluation excluded) until
    ``val_acc`` first reaches it; None when it never does.
    """
    ok = [r for r in rows if "error" not in r and r.get("val_acc") is not None]
    ref = [r for r in ok if r["system"] == reference] or sorted(ok, key=lambda r: -r["val_acc"])
    if not ref:
        return None
    best = max((a for r in ok for a in r["val_acc_per_epoch"] if a is not None), default=0.0)
    target = round(fraction * (best if best_epoch else ref[0]["val_acc"]), 4)
    for r in ok:
        reached = first_reached(r["epoch_times"], r["val_acc_per_epoch"], target)
        r["time_to_accuracy"] = reached and round(reached[0], 3)
        r["target_acc"] = target
    return target


def first_reached(epoch_times: list[float], accs: list[float | None],
                  target: float) -> tuple[float, int] | None:
    """(training seconds, epochs) until an accuracy first reaches ``target`` (an epoch not
    evaluated still costs its time); None when none does."""
    spent = itertools.accumulate(epoch_times)
    return next(((s, epoch) for epoch, (s, acc) in enumerate(zip(spent, accs), 1)
                 if acc is not None and acc >= target), None)
