"""Is the plan right? ``dglx bench`` of every strategy and ``auto`` in thirteen configurations on
the emulated cluster, each varying one thing the strategies are sensitive to; for each, the
measured ranking beside the plan's, and whether the plan's pick (the ``auto (STRATEGY)`` row,
run with the plan's options) was the measured fastest or within 10% of it.

    python -m benchmarks.plan_check --workdir plan-check          # root (emulated links)
    python -m benchmarks.plan_check --only base,f16 --list        # what would run

"Fastest" is the time to accuracy as the plan ranks it: the epochs until val_acc first
reached the bench's target (0.95 x the best row's final) times the median epoch after the
first (the first epoch's warm-up is a start-up cost the plan does not model, and on these
small graphs it would be most of the bench's own ``time_to_accuracy``); for link prediction
(no accuracy target) the median epoch. A row that did not reach the target, failed or did
not fit ranks last. Every
configuration's ``dglx bench`` output stays in ``WORKDIR/runs/NAME`` and is reused when
complete, so an interrupted check goes on where it stopped. Prints JSON, then the markdown
table; ``--plot`` draws predicted against measured epoch time, one point per strategy and
configuration (docs/choosing.md). ``--replan`` runs nothing new: the plan as it is now
against the measured rows, and the plan's constants fitted to them (:func:`fit_constants`).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.sweeps.common import emit_json, emit_text
from dglx_dist.report import markdown_table

log = logging.getLogger("dglx_dist.bench")

STRATEGY_SYSTEMS = ("distdgl", "p3", "granndis", "dorylus", "fullgraph")
WITHIN = 1.10
"""The pick counts as right when its measured time is at most this times the fastest's."""


@dataclasses.dataclass(frozen=True)
class Graph:
    """A dataset made by ``dglx datagen`` with these flags (cached in WORKDIR/data/NAME)."""

    name: str
    flags: tuple[str, ...]


TINY = ("--num-nodes", "20000", "--num-edges", "300000", "--num-classes", "16")
GRAPHS = {g.name: g for g in (
    Graph("tiny-f128", (*TINY, "--feat-dim", "128")),
    Graph("tiny-f16", (*TINY, "--feat-dim", "16")),
    Graph("tiny-f1024", (*TINY, "--feat-dim", "1024")),
    Graph("small", ("--num-nodes", "200000", "--num-edges", "2000000", "--num-classes", "16",
                    "--feat-dim", "128")),
    Graph("g1m", ("--num-nodes", "1000000", "--num-edges", "20000000", "--num-classes", "16",
                  "--feat-dim", "128")),
    Graph("mag-small", ("--preset", "mag-small")))}

BASE = ("--epochs", "6", "--hidden", "64", "--batch-size", "250", "--fanouts", "10,25",
        "--servers", "2", "--ranks-per-server", "1", "--network", "1g")
"""Every configuration's flags but the model (a typed graph's is always the R-GCN)."""


@dataclasses.dataclass(frozen=True)
class Config:
    """One configuration: a graph, ``dglx bench``'s flags (later ones win over BASE's), and
    what it varies."""

    name: str
    graph: str
    flags: tuple[str, ...]
    varies: str
    model: tuple[str, ...] = ("--model", "gcn")
    systems: tuple[str, ...] = STRATEGY_SYSTEMS
    """The strategies that run it (dorylus runs no link prediction, no ResGCN+ and no typed
    graph; p3 no ResGCN+, whose features pass a Linear before its first conv)."""

    def argv(self) -> list[str]:
        return [*BASE, *self.model, *self.flags]

    def world(self) -> int:
        """Its ranks: servers x ranks a server (the last of each flag wins)."""
        argv = self.argv()
        last = lambda flag: int(argv[len(argv) - 1 - argv[::-1].index(flag) + 1])  # noqa: E731
        return last("--servers") * last("--ranks-per-server")


CONFIGS = {c.name: c for c in (
    Config("base", "tiny-f128", (), "the base: 20k nodes, F 128, GCN 2x64, fanouts 10,25, "
                                   "2 servers x 1 rank, 1 Gbit/s"),
    Config("f16", "tiny-f16", (), "feature width 16"),
    Config("f1024", "tiny-f1024", (), "feature width 1024"),
    Config("deep", "tiny-f128", ("--fanouts", "3,3,3,3,3,3,3,3", "--hidden", "32"),
           "8 layers (fanout 3 each) of ResGCN+, hidden 32 (an 8-layer GCN did not learn "
           "here: 0.07 after 6 epochs)", model=("--model", "resgcn"),
           systems=("distdgl", "granndis", "fullgraph")),
    Config("wide", "tiny-f128", ("--fanouts", "100,100"),
           "fanouts 100,100: full neighbourhoods in the sampled strategies too"),
    Config("10g", "tiny-f128", ("--network", "10g"), "10 Gbit/s links"),
    Config("4x1", "tiny-f128", ("--servers", "4"), "4 servers x 1 rank"),
    Config("2x2", "tiny-f128", ("--ranks-per-server", "2"), "2 ranks a server"),
    Config("small", "small", ("--epochs", "5", "--batch-size", "1000"),
           "200k nodes, 2M edges"),
    Config("1m", "g1m", ("--epochs", "3", "--model", "sage", "--hidden", "32",
                         "--batch-size", "1000"), "1M nodes, 20M edges; GraphSAGE 2x32"),
    Config("memory", "tiny-f128", ("--memory-limit", str(3200 << 20)),
           "3200 MiB for the two servers: granndis's preload does not fit"),
    Config("typed", "mag-small", ("--epochs", "6", "--batch-size", "128", "--fanouts", "10,10",
                                  "--hidden", "64"),
           "a typed graph (ogbn-mag's shape, 1/256), R-GCN", model=(),
           systems=("distdgl", "p3", "granndis", "fullgraph")),
    Config("link", "tiny-f128", ("--task", "link", "--epochs", "3", "--batch-size", "500",
                                 "--eval-pairs", "500"), "link prediction",
           systems=("distdgl", "p3", "granndis", "fullgraph")),
)}


def dataset(graph: Graph, workdir: Path) -> Path:
    """The graph's dataset directory, made once."""
    path = workdir / "data" / graph.name
    if not (path / "meta.json").is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        log.info("making %s", graph.name)
        subprocess.run([sys.executable, "-m", "dglx_dist", "datagen", *graph.flags,
                        "--overwrite", str(path)], check=True, stdout=subprocess.DEVNULL)
    return path


def measure(config: Config, workdir: Path, timeout: float,
            out: Path | None = None) -> list[dict[str, Any]]:
    """``dglx bench``'s rows for ``config`` (its every strategy and ``auto``), run once (into
    ``out``, default ``runs/NAME``)."""
    out = out or workdir / "runs" / config.name
    results = out / "results.jsonl"
    if not results.is_file():
        data = dataset(GRAPHS[config.graph], workdir)
        cmd = [sys.executable, "-m", "dglx_dist", "bench", "--data", str(data), "--systems",
               ",".join(("auto", *config.systems)), *config.argv(), "--timeout",
               str(timeout), "--out", str(out), "--overwrite", "--no-plot"]
        log.info("%s: %s", config.name, " ".join(cmd[3:]))
        before = os.getloadavg()[0]
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False)
        if not results.is_file():
            raise SystemExit(f"plan_check: dglx bench wrote no results for {config.name!r}")
        (out / "load.json").write_text(json.dumps([before, os.getloadavg()[0]]))
    return [json.loads(line) for line in results.read_text().splitlines() if line.strip()]


def rerun_auto(config: Config, workdir: Path, rows: list[dict[str, Any]], tag: str | None,
               timeout: float) -> list[dict[str, Any]]:
    """``rows`` with the auto row run again by ``dglx bench --systems auto`` into
    ``runs/NAME/auto-TAG`` (kept and reused) where ``tag`` is given: the plan as it is now,
    beside the strategies' rows as they were measured."""
    if tag is None:
        return rows
    again = measure(dataclasses.replace(config, systems=()), workdir, timeout,
                    workdir / "runs" / config.name / f"auto-{tag}")
    return [r for r in rows if not r["system"].startswith("auto")] + again


def plan_now(config: Config, workdir: Path) -> dict[str, Any]:
    """The plan as it is now for ``config``, made as ``dglx bench`` makes it (the same setup,
    this machine's cores), without running anything: what an auto row keeps of it."""
    from dglx_dist.bench.kinds import KINDS, kind_of
    from dglx_dist.bench.planned import plan_fields, plan_setup
    from dglx_dist.bench.presets import NETWORKS
    from dglx_dist.bench.suite import make_setup
    from dglx_dist.cli import build_parser

    data = dataset(GRAPHS[config.graph], workdir)
    args = build_parser().parse_args(["bench", "--data", str(data), *config.argv(), "--out",
                                      str(workdir / "replan")])
    kind = KINDS[kind_of(data)]
    setup = make_setup(args, data, NETWORKS[args.network], kind)
    name, _, plan = plan_setup(setup, accept=lambda built: built.registered_name in
                               config.systems, loaders=kind.loaders)
    return {"system": f"auto ({name})", "strategy": name, **plan_fields(plan)}


def recompute(rows: list[dict[str, Any]], planned: dict[str, Any]) -> list[dict[str, Any]]:
    """``rows`` with the auto row replaced by the plan as it is now (:func:`plan_now`), its
    measurements those of its strategy's own row (that strategy with its default options:
    the plan's options, such as a cache, were not run)."""
    own = next((r for r in rows if r["system"] == planned["strategy"]), {"error": "not run"})
    measured = {k: v for k, v in own.items() if k not in ("system", "strategy", "plan")}
    return [r for r in rows if not r["system"].startswith("auto")] + [measured | planned]


FITTED = ("base", "f16", "f1024", "wide", "10g", "4x1", "2x2", "small", "memory")
"""The configurations the per-step constants are fitted on: a GCN's node classification on
an untyped graph (the model's compute is checked for the GCN alone; a link step and a typed
graph's relations carry costs the law does not have)."""


def fit_constants(verdicts: list[dict[str, Any]], configs: dict[str, Config]) -> dict[str, Any]:
    """The cost of a round across servers and each strategy's per-step overhead that fit the
    measured rows best: least squares through 0 of (measured - predicted without them) over
    the :data:`FITTED` configurations, each row divided by its measured time (relative
    errors: the plan ranks). The round's cost, a property of the machine, is fitted with
    distdgl's overhead on distdgl's rows (every step crosses servers in 2 rounds a layer),
    then each other strategy's overhead with it fixed."""
    import numpy as np

    from benchmarks.costmodel.predict import costs
    from dglx_dist.planner.units import load_measured

    round_s, overhead = load_measured().units.round_s, {
        name: cost.overhead_s_per_step for name, cost in costs().items()}
    rows: dict[str, list] = {}  # per strategy: (steps, rounds, residual) / measured
    for v in verdicts:
        if v["config"] not in FITTED:
            continue
        share = max(1.0, configs[v["config"]].world() / (os.cpu_count() or 1))
        for p in v.get("points", ()):
            known = share * (p["steps"] * overhead.get(p["strategy"], 0.0) +
                             p["rounds"] * round_s)
            y = p["measured"] - p["predicted"] + known
            rows.setdefault(p["strategy"], []).append(
                np.array([share * p["steps"], share * p["rounds"], y]) / p["measured"])
    if "distdgl" not in rows:
        return {}
    d = np.array(rows.pop("distdgl"))
    overhead, fitted = np.linalg.lstsq(d[:, :2], d[:, 2], rcond=None)[0]
    out = {"round_s": float(f"{fitted:.3g}"),
           "overhead_s_per_step": {"distdgl": float(f"{overhead:.3g}")}, "points": len(d)}
    for name, found in rows.items():
        a = np.array(found)
        k = np.linalg.lstsq(a[:, :1], a[:, 2] - fitted * a[:, 1], rcond=None)[0][0]
        out["overhead_s_per_step"][name] = float(f"{max(k, 0.0):.3g}")
    return out


def load(config: Config, workdir: Path) -> list[float] | None:
    """The load average (1 minute) as ``config``'s run began and ended."""
    file = workdir / "runs" / config.name / "load.json"
    return json.loads(file.read_text()) if file.is_file() else None


def _time(row: dict[str, Any], by: str) -> float:
    """``by``: ``epoch_time`` (the median epoch after the first) or ``time_to_accuracy``
    (that times the epochs until val_acc first reached the bench's target)."""
    from dglx_dist.bench.harness import first_reached

    median = None if "error" in row else row.get("epoch_time_median")
    if median is None:
        return math.inf
    if by == "epoch_time":
        return float(median)
    reached = first_reached(row["epoch_times"], row["val_acc_per_epoch"], row["target_acc"])
    return math.inf if reached is None else reached[1] * float(median)


def verdict(config: Config, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The configuration's measured and predicted rankings and whether the pick was right."""
    auto = next((r for r in rows if r["system"].startswith("auto")), None)
    if auto is None or "plan" not in auto:
        return {"config": config.name, "varies": config.varies,
                "error": (auto or {}).get("error", "no auto row")[:200]}
    by = "time_to_accuracy" if any(r.get("target_acc") for r in rows) else "epoch_time"
    measured = sorted((r for r in rows if r is not auto), key=lambda r: _time(r, by))
    picked, twin = _picked(auto, rows, by)
    fastest = min([picked] + [_time(r, by) for r in rows if r is not auto and r is not twin])
    predicted = [r["strategy"] for r in auto["plan"]["rows"]]
    return {"config": config.name, "varies": config.varies, "by": by,
            "pick": auto["strategy"], "options": auto["plan"]["options"],
            "pick_s": picked, "fastest": measured[0]["system"] if measured else None,
            "fastest_s": fastest, "pick_over_fastest": round(picked / fastest, 3)
            if math.isfinite(picked) and fastest > 0 else None,
            "right": math.isfinite(picked) and picked <= WITHIN * fastest,
            "measured_ranking": [_label(r, by) for r in measured],
            "predicted_ranking": predicted,
            "points": _points(auto["plan"]["rows"], rows)}


def _picked(auto: dict[str, Any], rows: list[dict[str, Any]],
            by: str) -> tuple[float, dict[str, Any] | None]:
    """The pick's measured time and its twin: where the auto row ran its strategy with the
    options of that strategy's own row (the twin), the two rows are two runs of one
    configuration (the auto row always the first of the bench's rows), and that strategy's
    time is their mean; else the auto row's, and no twin."""
    twin = next((r for r in rows if r["system"] == auto["strategy"] and
                 sorted(r.get("options", ())) == sorted(auto.get("options", ()))), None)
    times = [_time(auto, by)] + ([_time(twin, by)] if twin is not None else [])
    return sum(times) / len(times), twin


def _label(row: dict[str, Any], by: str) -> str:
    t = _time(row, by)
    why = "failed" if "error" in row else "not reached"
    return f"{row['system']} {t:.3g}" if math.isfinite(t) else f"{row['system']} ({why})"


def _points(planned: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[dict]:
    """(predicted, measured) epoch seconds of each strategy the plan and the bench both ran
    (the measured row with the strategy's defaults; the plan's with its options)."""
    ran = {r["system"]: r for r in rows if "error" not in r and r.get("epoch_time_median")}
    return [{"strategy": p["strategy"], "predicted": p["epoch_s"],
             "measured": ran[p["strategy"]]["epoch_time_median"],
             "steps": p["steps"], "rounds": p.get("rounds", 0.0)}
            for p in planned if p["strategy"] in ran]


def table(verdicts: list[dict[str, Any]]) -> str:
    """One markdown row per configuration."""
    return markdown_table([{
        "config": v["config"], "varies": v["varies"], "pick (options)":
        f"{v.get('pick')} ({v.get('options') or '-'})" if "pick" in v else v.get("error"),
        "pick / fastest": v.get("pick_over_fastest"),
        "measured ranking": ", ".join(v.get("measured_ranking", [])),
        "predicted ranking": ", ".join(v.get("predicted_ranking", [])),
        "right": {True: "yes", False: "no"}.get(v.get("right"), "-"),
        "load": "-" if not v.get("load") else "%.1f / %.1f" % tuple(v["load"])}
        for v in verdicts])


def plot(verdicts: list[dict[str, Any]], path: Path) -> None:
    """Predicted against measured epoch time, log-log, one point per strategy and
    configuration, a colour per strategy, the line y = x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 5.5))
    points = [p | {"config": v["config"]} for v in verdicts for p in v.get("points", [])]
    for name in STRATEGY_SYSTEMS:
        mine = [p for p in points if p["strategy"] == name]
        if mine:
            ax.scatter([p["measured"] for p in mine], [p["predicted"] for p in mine],
                       label=name, s=28)
    if points:
        lo = min(min(p["measured"], p["predicted"]) for p in points) / 1.5
        hi = max(max(p["measured"], p["predicted"]) for p in points) * 1.5
        ax.plot([lo, hi], [lo, hi], color="grey", linestyle="--", label="predicted = measured")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured epoch time (s)")
    ax.set_ylabel("predicted epoch time (s)")
    ax.set_title("dglx plan: predicted vs measured epoch time")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _rows(config: Config, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = measure(config, args.workdir, args.timeout)
    if args.replan:
        return recompute(rows, plan_now(config, args.workdir))
    return rerun_auto(config, args.workdir, rows, args.rerun_auto, args.timeout)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", type=Path, default=Path("plan-check"))
    p.add_argument("--only", help="comma-separated configurations (default: all)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    p.add_argument("--out", type=Path, help="also write the JSON here")
    p.add_argument("--plot", type=Path, help="write the predicted-vs-measured PNG here")
    p.add_argument("--list", action="store_true", help="print the configurations and stop")
    p.add_argument("--rerun-auto", metavar="TAG", help="run the auto rows again (into "
                   "runs/NAME/auto-TAG, kept), after a change to the plan")
    p.add_argument("--replan", action="store_true", help="run nothing new: the plan as it is "
                   "now against the strategies' measured rows (the pick's own row stands for "
                   "the auto row), and the fitted cost of a round across servers")
    args = p.parse_args(argv)
    names = args.only.split(",") if args.only else list(CONFIGS)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        p.error(f"unknown configurations {unknown}; expected some of {', '.join(CONFIGS)}")
    if args.replan:  # those measured
        names = [n for n in names if (args.workdir / "runs" / n / "results.jsonl").is_file()]
    if args.list:
        for n in names:
            emit_text(f"{n}: {CONFIGS[n].varies}: dglx bench {' '.join(CONFIGS[n].argv())}")
        return 0
    verdicts = [verdict(CONFIGS[n], _rows(CONFIGS[n], args))
                | {"load": load(CONFIGS[n], args.workdir)} for n in names]
    right = sum(bool(v.get("right")) for v in verdicts)
    fit = {"fit": fit_constants(verdicts, CONFIGS)} if args.replan else {}
    emit_json({"configs": verdicts, "right": right, "of": len(verdicts), **fit}, args.out)
    emit_text(table(verdicts) + f"\n\nThe pick was the fastest or within "
              f"{round(100 * (WITHIN - 1))}% of it in {right} of {len(verdicts)}.")
    if args.plot:
        plot(verdicts, args.plot)
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    sys.exit(main())
