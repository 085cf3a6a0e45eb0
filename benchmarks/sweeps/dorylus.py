"""Dorylus's sweep, async (staleness 0 or 1) against sync and the CPU-only variant
(``benchmarks/bench_dorylus.py``, whose docstring says what is measured; ``python -m
benchmarks.sweeps`` runs async, async-s1 and sync). Every run is
:func:`~dglx_dist.bench.harness.run_strategy` of ``dorylus`` with 2 graph servers (2 virtual
servers x 1 rank)."""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from benchmarks.sweeps.common import (add_common, emit_json, emit_text, parse_with_preset,
                                      sweep_dataset, sweep_presets, sweep_setup)
from dglx_dist.bench.harness import (add_time_to_accuracy, attempt, first_reached,
                                     reduce_records, run_strategy, summarize)
from dglx_dist.bench.report import Panel, Series, draw
from dglx_dist.report import markdown_table

__all__ = ["DEFAULT_SYSTEMS", "PRESETS", "SYSTEMS", "add_derived", "checks", "main", "parse_args",
           "plot", "run", "use_faulty_local"]

log = logging.getLogger("dglx_dist.bench")
# (num_nodes, num_edges, epochs)
PRESETS = sweep_presets(64, tiny=(20_000, 300_000, 20), small=(200_000, 2_000_000, 10))
SYSTEMS = {"async": ["mode=async", "staleness=0"], "sync": ["mode=sync"],
           "cpu": ["mode=sync", "executor=inline"],
           "async-s1": ["mode=async", "staleness=1"]}  # benchmarks.sweeps's staleness sweep
DEFAULT_SYSTEMS = ["async", "sync", "cpu"]
_PER_EPOCH = ("invocations", "relaunches", "bytes_to_executor", "bytes_from_executor",
              "cost_usd", "value")


def _summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    return summarize(records) | reduce_records(records, dict.fromkeys(_PER_EPOCH, "mean"))


def use_faulty_local() -> tuple[tuple[str, str], ...]:
    """Makes the test plug-ins' ``faulty-local`` executor (tests/plugins: the ``local`` one
    with a delay added to every invocation, emulating Lambda's latency; one implementation
    serves the fault tests and this sweep) known here, where the harness builds the strategy
    to partition ahead, and returns the runs' environment that makes it known to their ranks."""
    from dglx_dist.offload import EXECUTORS

    plugins = str(Path(__file__).resolve().parents[2] / "tests" / "plugins")
    if plugins not in sys.path:
        sys.path.insert(0, plugins)
    if "faulty-local" not in EXECUTORS:  # its entry points were read before the path was there
        from dglx_test_plugins.faulty import FaultyLocalExecutor

        EXECUTORS.add("faulty-local", FaultyLocalExecutor)
    return (("PYTHONPATH", os.pathsep.join(
        p for p in (plugins, os.environ.get("PYTHONPATH")) if p)),)


def run(args, system: str, data: Path) -> dict[str, Any]:
    """One ``dglx train --strategy dorylus`` run; its metrics summarised, or the error."""
    opts = SYSTEMS[system] + [f"intervals={args.intervals}"]
    env: tuple[tuple[str, str], ...] = ()
    if system != "cpu" and args.latency_ms > 0:  # local worker processes + Lambda's latency
        opts += ["executor=faulty-local", f"executor_options=workers={args.workers},"
                 f"latency_s={args.latency_ms / 1000:g}"]
        env = use_faulty_local()
    elif system != "cpu":  # the bare local executor
        opts.append(f"executor_options=workers={args.workers}")
    setup = sweep_setup(args, data, {"model": {"name": args.model, "hidden": args.hidden,
                                               "dropout": args.dropout},
                                     "optimizer": {"lr": args.lr},
                                     "loop": {"epochs": args.epochs}},
                        servers=2, ranks_per_server=1, env=env)  # a graph server per server
    log.info("%s: %s", system, " ".join(opts))
    row = attempt(system, lambda: run_strategy("dorylus", setup, {"dorylus": opts}, _summary))
    if "error" in row:
        return {"system": system, "error": row["error"].splitlines()[0][:120]}
    return {"system": system, "epoch_time": round(row["epoch_time"], 3),
            "invocations": int(row["invocations"]), "relaunches": int(row["relaunches"]),
            "mb_to_executor": round(row["bytes_to_executor"] / 1e6, 2),
            "mb_from_executor": round(row["bytes_from_executor"] / 1e6, 2),
            "mb_between_servers": round(row["bytes_inter"] / 1e6, 2),
            "cost_usd": row["cost_usd"], "value": round(row["value"], 1),
            "test_acc": row["test_acc"], "val_acc": row["val_acc_per_epoch"],
            "epoch_times": row["epoch_times"], "run_wall_s": row["run_wall_s"]}


def add_derived(rows: list[dict], target: float) -> None:
    """Epochs to accuracy (the target: ``target`` x the best any run reached); the cost as
    text."""
    ok = [r for r in rows if "error" not in r]
    curves = [{"system": r["system"], "epoch_times": r["epoch_times"],
               "val_acc_per_epoch": r["val_acc"], "val_acc": r["val_acc"][-1]} for r in ok]
    goal = add_time_to_accuracy(curves, target, best_epoch=True)
    for r in ok:
        r["target_acc"] = goal
        reached = first_reached(r["epoch_times"], r["val_acc"], goal)
        r["epochs_to_acc"] = reached and reached[1]
        r["cost_usd"] = f"{r['cost_usd']:.3g}"


def checks(rows: list[dict]) -> list[dict]:
    """The paper's targets: async >= 15% faster per epoch than sync, within +10% epochs."""
    by = {r["system"]: r for r in rows if "error" not in r}
    if "async" not in by or "sync" not in by:
        return []
    a, s = by["async"], by["sync"]
    speed = 1 - a["epoch_time"] / s["epoch_time"]
    out = [{"check": "async epoch time >= 15% below sync", "value": f"{speed:.1%}",
            "ok": speed >= 0.15}]
    if a["epochs_to_acc"] and s["epochs_to_acc"]:
        ratio = a["epochs_to_acc"] / s["epochs_to_acc"]
        out.append({"check": "async epochs to accuracy <= 1.1 x sync", "value": f"{ratio:.2f}",
                    "ok": ratio <= 1.1})
    return out


def plot(rows: list[dict], path: Path) -> None:
    """Epoch time per system and validation accuracy per epoch."""
    ok = [r for r in rows if "error" not in r]
    draw([Panel("dorylus: epoch time", (Series("", tuple(r["system"] for r in ok),
                                              tuple(r["epoch_time"] for r in ok)),),
                ylabel="epoch time (s)"),
          Panel("dorylus: validation accuracy", tuple(
              Series(r["system"], tuple(range(1, len(r["val_acc"]) + 1)), tuple(r["val_acc"]))
              for r in ok), kind="lines", xlabel="epoch", ylabel="validation accuracy")],
         path, columns=2)


def parse_args(argv: list[str] | None = None, description: str = "") -> argparse.Namespace:
    """``benchmarks/bench_dorylus.py``'s options; the preset fills the graph, epochs, Lambda."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    p.add_argument("--systems", type=lambda s: s.split(","), default=DEFAULT_SYSTEMS,
                   help=f"of {', '.join(SYSTEMS)} (async-s1: staleness 1)")
    p.add_argument("--epochs", type=int, help="epochs per run (default: the preset's)")
    p.add_argument("--model", choices=("gcn", "gat"), default="gcn",
                   help="gcn, or gat (4 heads of --hidden, attention tasks per edge)")
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--lr", type=float, default=0.01)
    # the executor emulates Lambda (every preset alike): every invocation pays a round trip
    # (50 ms: invoke overhead plus moving a ~1.4 MB request), 8 concurrent invocations per
    # graph server, 16 intervals each
    p.add_argument("--intervals", type=int, default=16,
                   help="vertex intervals per server (default 16)")
    p.add_argument("--workers", type=int, default=8,
                   help="local executor processes per server (default 8)")
    p.add_argument("--latency-ms", type=float, default=50.0,
                   help="latency injected into every invocation, a Lambda round trip "
                        "(default 50; 0 for bare worker processes)")
    p.add_argument("--target", type=float, default=0.95,
                   help="epochs to accuracy: val_acc >= target x the best of any run")
    add_common(p, "bench_out/dorylus")
    return parse_with_preset(p, argv, PRESETS)


def main(argv: list[str] | None = None, description: str = "") -> int:
    """Runs the systems; writes the JSON result and the markdown tables to stdout."""
    args = parse_args(argv, description)
    data = sweep_dataset(PRESETS, args, args.feat_dim)
    rows = [run(args, system, data) for system in args.systems]
    add_derived(rows, args.target)
    result = {"preset": args.preset, "model": args.model, "graph_servers": 2,
              "cpus": os.cpu_count(),
              "graph": {k: getattr(args, k) for k in ("num_nodes", "num_edges", "feat_dim")},
              "runs": rows, "checks": checks(rows)}
    emit_json(result, args.out)
    cols = ["system", "epoch_time", "epochs_to_acc", "test_acc", "invocations", "relaunches",
            "mb_to_executor", "mb_from_executor", "mb_between_servers", "cost_usd", "value"]
    text = ["\n" + markdown_table([{c: r.get(c, r.get("error")) for c in cols} for r in rows])]
    text += ["\n" + markdown_table(result["checks"])] if result["checks"] else []
    emit_text("\n".join(text))
    if args.plot:
        plot(rows, args.plot)
    return 0
