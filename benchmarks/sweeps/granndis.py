"""GraNNDis's sweeps, granndis against the full-graph baseline and distdgl on deep ResGCN+
(``benchmarks/bench_granndis.py``, whose docstring says what is measured; ``python -m
benchmarks.sweeps`` runs the depth sweep). Every run is
:func:`~dglx_dist.bench.harness.run_strategy` on 2 servers x 2 ranks (virtual,
or the emulated cluster with ``--network``) with ``--measure-saved-bytes``."""
from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

from benchmarks.sweeps.common import (add_common, emit_json, emit_text, parse_with_preset,
                                      sweep_dataset, sweep_presets, sweep_setup)
from dglx_dist.bench.harness import (add_time_to_accuracy, attempt, reduce_records,
                                     run_strategy, summarize)
from dglx_dist.bench.report import Panel, Series, draw
from dglx_dist.report import markdown_table

__all__ = ["PRESETS", "SYSTEMS", "add_derived", "checks", "depth_sweep", "main", "memory_sweep",
           "parse_args", "plot", "run"]

log = logging.getLogger("dglx_dist.bench")
# (num_nodes, num_edges, epochs)
PRESETS = sweep_presets(128, tiny=(20_000, 300_000, 5), small=(200_000, 4_000_000, 4),
                        **{"1m": (1_000_000, 20_000_000, 2)})
SYSTEMS = ("granndis", "fullgraph", "distdgl")


def _summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    return summarize(records) | reduce_records(records, {"peak_saved_mb": "max"})


def run(args, system: str, data: Path, depth: int, epochs: int) -> dict[str, Any]:
    """One ``dglx train`` run of ``system`` (a strategy; ``granndis/R=n``: n co-batches) at
    ``depth`` layers; its metrics summarised, or the error."""
    strategy, _, r = system.partition("/R=")
    # fanouts: distdgl's; the others get num_layers=depth from them; batch: distdgl's
    setup = sweep_setup(args, data, {"model": {"name": "resgcn", "hidden": args.hidden},
                                     "optimizer": {"lr": 0.003}, "loop": {"epochs": epochs}},
                        batch_size=1000, fanouts=(args.fanout,) * depth, servers=2,
                        ranks_per_server=2, train_flags=("--measure-saved-bytes",))
    log.info("%s, %d layers, %s", system, depth, data.name)
    row = attempt(system, lambda: run_strategy(
        strategy, setup, {strategy: [f"co_batches={r}"] if r else []}, _summary))
    if "error" in row:  # a timeout is a result: the system did not make it
        return {"system": system, "depth": depth, "error": row["error"].splitlines()[0][:120]}
    return {"system": system, "depth": depth, "epoch_time": round(row["epoch_time"], 3),
            "bytes_inter": row["bytes_inter"], "bytes_intra": row["bytes_intra"],
            "saved_mb": row["peak_saved_mb"], "rss_mb": row["peak_mem_mb"],
            "steps": row["steps"], "val_acc": row["val_acc_per_epoch"],
            "test_acc": row["test_acc"], "epoch_times": row["epoch_times"],
            "run_wall_s": row["run_wall_s"]}


def add_derived(rows: list[dict], args) -> None:
    """Time to accuracy (the target: ``--target`` x the best any system reached at that depth)
    and the modelled epoch time on slow inter-server links."""
    for depth in {r["depth"] for r in rows}:
        mine = [r for r in rows if r["depth"] == depth and "error" not in r]
        curves = [{"system": r["system"], "epoch_times": r["epoch_times"],
                   "val_acc_per_epoch": r["val_acc"], "val_acc": r["val_acc"][-1]}
                  for r in mine]
        add_time_to_accuracy(curves, args.target, best_epoch=True)
        for r, c in zip(mine, curves):
            r["target_acc"] = c["target_acc"]
            r["time_to_acc"] = c["time_to_accuracy"] and round(c["time_to_accuracy"], 2)
            for gbit in args.links:  # each server sends half the job's inter-server bytes
                link = r["bytes_inter"] / 2 / (gbit * 1e9 / 8)
                r[f"epoch_time_{gbit:g}gbit"] = round(r["epoch_time"] + link, 3)


def memory_sweep(args, data: Path) -> list[dict]:
    """One epoch per system and depth of ``--mem-depths``: activation memory and RSS."""
    rows = []
    for depth in args.mem_depths:
        for system in SYSTEMS:
            for r in (args.mem_r if system == "granndis" else [1]):
                row = run(args, system if r == 1 else f"granndis/R={r}", data, depth, 1)
                rows.append({k: row.get(k) for k in ("system", "depth", "saved_mb", "rss_mb",
                                                     "epoch_time", "error")})
    return rows


def _depth_checks(rows: list[dict], args) -> list[dict]:
    def row(system, depth):  # the system, else its first variant that ran (granndis/R=n)
        found = [r for r in rows if r["system"].split("/")[0] == system and
                 r["depth"] == depth and "error" not in r]
        return min(found, key=lambda r: r["system"] != system) if found else None

    out = []
    for depth in args.depths:
        g, f = row("granndis", depth), row("fullgraph", depth)
        if not (g and f):
            continue
        v = round(g["bytes_inter"] / max(f["bytes_inter"], 1), 5)
        name, last = g["system"], depth == max(args.depths)
        out.append({"check": f"{name} / fullgraph inter bytes, {depth} layers", "value": v,
                    "target": "<= 0.1", "status": "PASS" if v <= 0.1 else "FAIL"})
        saved = (f["bytes_inter"] - g["bytes_inter"]) / 2  # per server, per epoch
        extra = g["epoch_time"] - f["epoch_time"]
        out.append({"check": f"inter-server link speed below which {name} is faster, "
                             f"{depth} layers (modelled)",
                    "value": f"{saved * 8 / extra / 1e9:.2f} Gbit/s" if extra > 0 else "any",
                    "target": "(reported)", "status": ""})
        for gbit in args.links:
            key = f"epoch_time_{gbit:g}gbit"
            v = round(g[key] / f[key], 3)
            out.append({"check": f"{name} / fullgraph epoch time at {gbit:g} Gbit/s "
                                 f"(modelled), {depth} layers", "value": v,
                        "target": "<= 1.0" if last else "(reported)",
                        "status": ("PASS" if v <= 1.0 else "FAIL") if last else ""})
    return out


def checks(rows: list[dict], mem: list[dict], args) -> list[dict]:
    """The depth sweep's bytes and modelled time; the memory sweep's largest depth x width."""
    out = _depth_checks(rows, args)
    best = {}
    for m in mem:
        fits = m.get("saved_mb") is not None and m["saved_mb"] <= args.mem_cap_mb
        family = m["system"].split("/")[0]
        if fits:
            best[family] = max(best.get(family, 0), m["depth"] * args.hidden)
    for family in SYSTEMS if mem else ():
        out.append({"check": f"largest depth x width under {args.mem_cap_mb:g} MB per rank: "
                             f"{family}", "value": best.get(family, 0), "target": "(reported)",
                    "status": ""})
    if mem:
        g = best.get("granndis", 0)
        ok = g > best.get("fullgraph", 0) and g > best.get("distdgl", 0)
        out.append({"check": "granndis trains the largest depth x width under the cap",
                    "value": g, "target": "> both baselines", "status": "PASS" if ok else "FAIL"})
    return out


def plot(rows: list[dict], mem: list[dict], args, path: Path) -> None:
    """Inter-server bytes and modelled epoch time per system (a bar per depth), and the
    memory sweep's activation memory per depth."""
    ok = [r for r in rows if "error" not in r]
    slow = f"epoch_time_{min(args.links):g}gbit"

    def bars(key: str, scale: float, title: str) -> Panel:
        by = {d: {r["system"]: r for r in ok if r["depth"] == d} for d in args.depths}
        return Panel(title, tuple(Series(f"{d} layers", tuple(args.systems), tuple(
            by[d][s][key] / scale if s in by[d] else None for s in args.systems))
            for d in args.depths))

    mem_lines = tuple(Series(s, *zip(*pts)) for s in sorted({m["system"] for m in mem})
                      if (pts := [(m["depth"], m["saved_mb"]) for m in mem if m["system"] == s
                                  and m.get("saved_mb") is not None]))
    draw([bars("bytes_inter", 2**20, "inter-server MiB / epoch"),
          bars(slow, 1, f"epoch time (s), {min(args.links):g} Gbit/s links (modelled)"),
          Panel("activation memory", mem_lines, kind="lines",
                xlabel=f"layers (hidden {args.hidden})", ylabel="activation MB per rank",
                logy=True, hline=("cap", args.mem_cap_mb))], path)


def parse_args(argv: list[str] | None = None, description: str = "") -> argparse.Namespace:
    """``benchmarks/bench_granndis.py``'s options; the preset fills the graph and epochs."""
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    p.add_argument("--depths", type=ints, default=[3, 28])
    p.add_argument("--systems", type=lambda s: s.split(","), default=list(SYSTEMS),
                   help="strategies to run; granndis/R=n: with n co-batches")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--epochs", type=int, help="epochs per run (default: the preset's)")
    p.add_argument("--fanout", type=int, default=5, help="distdgl's fanout per layer")
    p.add_argument("--target", type=float, default=0.95,
                   help="time to accuracy: val_acc >= target x the best at that depth")
    p.add_argument("--links", type=lambda s: [float(x) for x in s.split(",")], default=[1, 10],
                   help="inter-server link speeds (Gbit/s) for the modelled epoch time")
    p.add_argument("--mem-depths", type=ints, default=[7, 14, 28, 56],
                   help="memory sweep depths (empty: no sweep)")
    p.add_argument("--mem-r", type=ints, default=[1, 4, 16], help="granndis co-batch counts")
    p.add_argument("--mem-cap-mb", type=float, default=64.0,
                   help="activation memory per rank for the depth x width check")
    add_common(p, "bench-granndis-work")
    return parse_with_preset(p, argv, PRESETS)


def depth_sweep(args: argparse.Namespace, data: Path) -> list[dict]:
    """Every system of ``--systems`` at every depth of ``--depths``, derived columns added."""
    rows = [run(args, system, data, depth, args.epochs)
            for depth in args.depths for system in args.systems]
    add_derived(rows, args)
    return rows


def main(argv: list[str] | None = None, description: str = "") -> int:
    """Runs the depth and memory sweeps; writes the JSON result and the tables to stdout."""
    args = parse_args(argv, description)
    data = sweep_dataset(PRESETS, args, args.feat_dim)
    rows = depth_sweep(args, data)
    mem = memory_sweep(args, data) if args.mem_depths else []
    result = {"preset": args.preset, "ranks": "2 servers x 2", "network": args.network,
              "cpus": os.cpu_count(),
              "graph": {k: getattr(args, k) for k in ("num_nodes", "num_edges", "feat_dim")},
              "runs": rows, "memory": mem, "checks": checks(rows, mem, args)}
    emit_json(result, args.out)
    cols = ["system", "depth", "epoch_time", *[f"epoch_time_{g:g}gbit" for g in args.links],
            "bytes_inter", "bytes_intra", "saved_mb", "rss_mb", "time_to_acc", "test_acc",
            "steps"]
    text = ["\n" + markdown_table([{c: r.get(c, r.get("error")) for c in cols} for r in rows])]
    text += ["\n" + markdown_table(mem)] if mem else []
    emit_text("\n".join(text + ["\n" + markdown_table(result["checks"])]))
    if args.plot:
        plot(rows, mem, args, args.plot)
    return 0
