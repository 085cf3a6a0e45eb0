"""P3's sweeps, distdgl against p3 as the feature width and the hidden width grow
(``benchmarks/bench_strategies.py``, whose docstring says what is measured; ``python -m
benchmarks.sweeps --sweeps p3``). Every run is :func:`~dglx_dist.bench.harness.run_strategy`
on 2 servers x 2 ranks (virtual, or the emulated cluster with ``--network``)."""
from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

from benchmarks.sweeps.common import (add_common, emit_json, emit_text, parse_with_preset,
                                      sweep_dataset, sweep_presets, sweep_setup)
from dglx_dist.bench.harness import attempt, run_strategy
from dglx_dist.bench.report import Panel, Series, draw
from dglx_dist.report import markdown_table

__all__ = ["PRESETS", "checks", "main", "parse_args", "plot", "run", "sweeps"]

log = logging.getLogger("dglx_dist.bench")
# (num_nodes, num_edges, epochs)  # feat_dim: each run's own
PRESETS = sweep_presets(64, tiny=(20_000, 300_000, 3), small=(100_000, 1_500_000, 3),
                        **{"1m": (1_000_000, 20_000_000, 2)})


def run(args: argparse.Namespace, strategy: str, data: Path, hidden: int) -> dict[str, Any]:
    """One ``dglx train`` run (GraphSAGE, fanouts 10,25, batch 1000 per rank, lr 0.003,
    evaluated once at the end with ``--eval-fanouts``); its metrics summarised, or the
    error (a run that fails, e.g. out of memory, is a row saying so)."""
    setup = sweep_setup(args, data, {"model": {"name": "sage", "hidden": hidden},
                                     "optimizer": {"lr": 0.003},
                                     "loop": {"epochs": args.epochs, "eval_every": args.epochs}},
                        batch_size=1000, fanouts=(10, 25), servers=2, ranks_per_server=2)
    log.info("%s, hidden %d, %s", strategy, hidden, data.name)
    options = [f"eval_fanouts={args.eval_fanouts}"] if args.eval_fanouts else []
    row = attempt(strategy, lambda: run_strategy(strategy, setup, {strategy: options}))
    if "error" in row:
        return {"strategy": strategy, "hidden": hidden, "error": row["error"].splitlines()[0]}
    return {"strategy": strategy, "hidden": hidden, "epoch_time": round(row["epoch_time"], 3),
            "bytes_inter": row["bytes_inter"], "bytes_intra": row["bytes_intra"],
            "test_acc": row["test_acc"], "steps": row["steps"],
            "run_wall_s": row["run_wall_s"]}


def sweeps(args: argparse.Namespace) -> tuple[list[dict], list[dict]]:
    """The feature sweep's rows and the hidden sweep's (a run both need is made once)."""
    by_feature, by_hidden = [], []
    for feat in args.features:
        data = sweep_dataset(PRESETS, args, feat)
        for strategy in args.strategies:
            by_feature.append({"feat_dim": feat} | run(args, strategy, data, args.hidden))
    data = sweep_dataset(PRESETS, args, args.sweep_feat)
    for hidden in args.hiddens:
        for strategy in args.strategies:
            done = [r for r in by_feature if r["feat_dim"] == args.sweep_feat
                    and r["hidden"] == hidden and r["strategy"] == strategy]
            row = done[0] if done else {"feat_dim": args.sweep_feat} | run(args, strategy,
                                                                         data, hidden)
            by_hidden.append(row)
    return by_feature, by_hidden


def checks(by_feature: list[dict], by_hidden: list[dict], args) -> list[dict]:
    """P3's bytes against distdgl's at the largest F, their growth with F, and where p3 stops
    paying off as the hidden width grows."""
    def row(rows, strategy, **key):
        found = [r for r in rows if r["strategy"] == strategy and "error" not in r
                 and all(r[k] == v for k, v in key.items())]
        return found[0] if found else None

    out = []
    top, low = max(args.features), min(args.features)
    p3, dd = row(by_feature, "p3", feat_dim=top), row(by_feature, "distdgl", feat_dim=top)
    if p3 and dd:
        v = round(p3["bytes_inter"] / dd["bytes_inter"], 4)
        out.append({"check": f"p3 / distdgl inter bytes, F={top}", "value": v,
                    "target": "<= 0.125", "status": "PASS" if v <= 0.125 else "FAIL"})
    p3_low = row(by_feature, "p3", feat_dim=low)
    if p3 and p3_low:
        v = round(p3["bytes_inter"] / p3_low["bytes_inter"], 3)
        out.append({"check": f"p3 inter bytes F={top} / F={low}", "value": v,
                    "target": "<= 1.25", "status": "PASS" if v <= 1.25 else "FAIL"})
    for key, what in (("bytes_inter", "inter bytes"), ("epoch_time", "epoch time")):
        cross = [r["hidden"] for r in by_hidden if r["strategy"] == "p3" and "error" not in r
                 and (d := row(by_hidden, "distdgl", hidden=r["hidden"])) and r[key] >= d[key]]
        out.append({"check": f"smallest hidden where p3 {what} >= distdgl's (F="
                             f"{args.sweep_feat})", "value": min(cross) if cross else "none",
                    "target": "(reported)", "status": ""})
    return out


def plot(by_feature: list[dict], by_hidden: list[dict], path: Path) -> None:
    """Inter-server bytes (top) and epoch time (bottom) against F and the hidden width."""
    def lines(rows, x, key, scale, ylabel, xlabel):
        rows = [r for r in rows if "error" not in r]
        return Panel(f"{ylabel} by {xlabel}", tuple(
            Series(s, tuple(r[x] for r in rows if r["strategy"] == s),
                   tuple(r[key] / scale for r in rows if r["strategy"] == s))
            for s in sorted({r["strategy"] for r in rows})), kind="lines", xlabel=xlabel,
            ylabel=ylabel, log2x=True)

    sweeps_ = ((by_feature, "feat_dim", "feature width F"), (by_hidden, "hidden", "hidden width"))
    draw([lines(rows, x, key, scale, ylabel, xlabel)
          for key, scale, ylabel in (("bytes_inter", 2**20, "inter-server MiB / epoch"),
                                     ("epoch_time", 1, "epoch time (s)"))
          for rows, x, xlabel in sweeps_], path, columns=2)


def parse_args(argv: list[str] | None = None, description: str = "") -> argparse.Namespace:
    """``benchmarks/bench_strategies.py``'s options; the preset fills the graph and epochs."""
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    p.add_argument("--features", type=ints, default=[64, 256, 1024])
    p.add_argument("--hidden", type=int, default=32, help="hidden width of the feature sweep")
    p.add_argument("--hiddens", type=ints, default=[32, 64, 128, 256, 512])
    p.add_argument("--sweep-feat", type=int, default=256, help="F of the hidden sweep")
    p.add_argument("--eval-fanouts", default="",
                   help="fanouts of the final evaluation, e.g. 10,25 (default: full "
                        "neighbourhoods, whose batches reach most of a large graph)")
    p.add_argument("--strategies", type=lambda s: s.split(","), default=["distdgl", "p3"])
    add_common(p, "bench-strategies-work", "write a PNG of both sweeps here")
    return parse_with_preset(p, argv, PRESETS)


def main(argv: list[str] | None = None, description: str = "") -> int:
    """Runs both sweeps; writes the JSON result and the markdown tables to stdout."""
    args = parse_args(argv, description)
    by_feature, by_hidden = sweeps(args)
    result = {"preset": args.preset, "ranks": "2 servers x 2", "network": args.network,
              "cpus": os.cpu_count(),
              "by_feature": by_feature, "by_hidden": by_hidden,
              "checks": checks(by_feature, by_hidden, args)}
    emit_json(result, args.out)
    cols = ("strategy", "feat_dim", "hidden", "epoch_time", "bytes_inter", "bytes_intra",
            "test_acc", "steps", "error")
    text = [f"\n{title}\n\n" + markdown_table([{c: r.get(c, "") for c in cols} for r in rows])
            for title, rows in (("feature sweep", by_feature), ("hidden sweep", by_hidden))]
    emit_text("\n".join(text) + "\n\n" + markdown_table(result["checks"]))
    if args.plot:
        plot(by_feature, by_hidden, args.plot)
    return 0
