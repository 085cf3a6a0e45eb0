"""Benchmark: granndis against the full-graph baseline and distdgl (GraNNDis's evaluation shape).

Every run is ``dglx train`` under torchrun with 4 processes as 2 virtual servers x 2 ranks,
training ResGCN+ (GraphConv, hidden ``--hidden``, dropout 0.5, Adam) on a synthetic DC-SBM
graph; each strategy partitions it its own way (cached):

* ``granndis``: shared preloading with EAS (m=1, k=15), R=1 (full-graph);
* ``fullgraph``: the plain full-graph baseline, halo exchange with every rank each layer
  (PipeGCN-style, without PipeGCN's staleness);
* ``distdgl``: sampled mini-batches (``--fanout`` per layer, batch 1000 per rank).

Depths ``--depths`` (default 3 and 28). Per run: epoch time (mean without the first epoch),
bytes sent inter- and intra-server per epoch (all ranks), activation memory per rank (bytes
autograd saves in one forward, the largest rank), peak RSS, validation accuracy after every
epoch and time to accuracy (summed epoch times until val_acc first reaches ``--target`` x the
best any system reached at that depth). The bytes are exact, but loopback is as fast as shared
memory, so the epoch time on slow inter-server links is *modelled*: measured time plus each
server's inter-server bytes over the link (``--links``, no overlap assumed); issue 7's
emulated cluster will measure it.

Memory sweep (``--mem-depths`` at ``--hidden``, one epoch each): the largest depth x width a
system trains with every rank's activation memory under ``--mem-cap-mb`` (granndis may pick
any ``--mem-r`` co-batch count, which is the point of cooperative batching).

Usage::

    python scripts/bench_granndis.py --preset tiny                    # a few minutes
    python scripts/bench_granndis.py --preset small --plot out.png

Prints one JSON object and markdown tables; ``--plot`` draws bytes, time and memory.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench_common import add_common, emit_json, parse_with_preset

from dglx_dist.bench.datasets import synthetic_dataset
from dglx_dist.bench.procs import run_group
from dglx_dist.report import markdown_table
from dglx_dist.runtime.env import free_local_port

log = logging.getLogger("bench_granndis")
PRESETS = {
    "tiny": {"num_nodes": 20_000, "num_edges": 300_000, "feat_dim": 128, "epochs": 5},
    "small": {"num_nodes": 200_000, "num_edges": 4_000_000, "feat_dim": 128, "epochs": 4},
}
SYSTEMS = {"granndis": [], "fullgraph": [], "distdgl": ["batch_size=1000"]}


def dataset(args: argparse.Namespace) -> Path:
    from dglx_dist.data.synthetic import SyntheticConfig

    return synthetic_dataset(SyntheticConfig(num_nodes=args.num_nodes, num_edges=args.num_edges,
                                             feat_dim=args.feat_dim, num_classes=16,
                                             seed=args.seed), args.workdir)


def strategy_opts(system: str, depth: int, args) -> list[str]:
    """``dglx train`` options of ``system``: a strategy name, with ``/R=n`` for granndis's
    co-batches."""
    system, _, r = system.partition("/R=")
    opts = list(SYSTEMS[system]) + ([f"co_batches={r}"] if r else [])
    if system == "distdgl":
        opts.append("fanouts=" + ",".join([str(args.fanout)] * depth))
    else:
        opts.append(f"num_layers={depth}")
    return [a for o in opts for a in ("--strategy-opt", o)]


def run(args, system: str, data: Path, depth: int, epochs: int) -> dict[str, Any]:
    """One ``dglx train`` run; its metrics summarised."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
           "--master-port", str(free_local_port()), "-m", "dglx_dist", "train", "--strategy",
           system.split("/")[0], "--model", "resgcn", "--data", str(data), "--epochs",
           str(epochs), "--eval-every", "1", "--hidden", str(args.hidden), "--lr", "0.003",
           "--seed", "0", "--cache-dir", str(args.workdir / "parts"), "--no-progress",
           "--measure-saved-bytes",
           *strategy_opts(system, depth, args)]
    env = {**os.environ, "DGLX_VIRTUAL_SERVERS": "2", "OMP_NUM_THREADS": "1",
           "GLOO_SOCKET_IFNAME": "lo", "DGLX_TIMEOUT": str(int(args.timeout))}
    log.info("%s, %d layers, %s", system, depth, data.name)
    t0 = time.perf_counter()
    try:
        (proc,), _ = run_group([cmd], env, args.timeout, [None])
    except Exception as exc:  # noqa: BLE001  (a timeout is a result: the system did not make it)
        return {"system": system, "depth": depth, "error": f"{type(exc).__name__}"}
    if proc.returncode != 0:
        return {"system": system, "depth": depth, "error": f"exit {proc.returncode}"}
    records = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    timed = records[1:] or records
    mean = lambda key: sum(r[key] for r in timed) / len(timed)  # noqa: E731
    return {"system": system, "depth": depth, "epoch_time": round(mean("epoch_time"), 3),
            "bytes_inter": int(mean("bytes_sent_inter")),
            "bytes_intra": int(mean("bytes_sent_intra")),
            "saved_mb": max(r["peak_saved_mb"] for r in records),
            "rss_mb": max(r["peak_mem_mb"] for r in records), "steps": records[-1]["steps"],
            "val_acc": [r["val_acc"] for r in records], "test_acc": records[-1]["test_acc"],
            "epoch_times": [r["epoch_time"] for r in records],
            "run_wall_s": round(time.perf_counter() - t0, 1)}


def add_derived(rows: list[dict], args) -> None:
    """Time to accuracy and the modelled epoch time on slow inter-server links."""
    for depth in {r["depth"] for r in rows}:
        mine = [r for r in rows if r["depth"] == depth and "error" not in r]
        best = max((max(r["val_acc"]) for r in mine), default=0.0)
        for r in mine:
            r["target_acc"] = round(args.target * best, 4)
            spent, r["time_to_acc"] = 0.0, None
            for t, acc in zip(r["epoch_times"], r["val_acc"]):
                spent += t
                if acc >= r["target_acc"]:
                    r["time_to_acc"] = round(spent, 2)
                    break
            for gbit in args.links:  # each server sends half the job's inter-server bytes
                link = r["bytes_inter"] / 2 / (gbit * 1e9 / 8)
                r[f"epoch_time_{gbit:g}gbit"] = round(r["epoch_time"] + link, 3)


def memory_sweep(args, data: Path) -> list[dict]:
    rows = []
    for depth in args.mem_depths:
        for system in SYSTEMS:
            for r in (args.mem_r if system == "granndis" else [1]):
                row = run(args, system if r == 1 else f"granndis/R={r}", data, depth, 1)
                rows.append({k: row.get(k) for k in ("system", "depth", "saved_mb", "rss_mb",
                                                     "epoch_time", "error")})
    return rows


def checks(rows: list[dict], mem: list[dict], args) -> list[dict]:
    def row(system, depth):  # the system, else its first variant that ran (granndis/R=n)
        found = [r for r in rows if r["system"].split("/")[0] == system and
                 r["depth"] == depth and "error" not in r]
        return min(found, key=lambda r: r["system"] != system) if found else None

    out = []
    for depth in args.depths:
        g, f = row("granndis", depth), row("fullgraph", depth)
        if g and f:
            v = round(g["bytes_inter"] / max(f["bytes_inter"], 1), 5)
            name = g["system"]
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
                            "target": "<= 1.0" if depth == max(args.depths) else "(reported)",
                            "status": ("PASS" if v <= 1.0 else "FAIL")
                            if depth == max(args.depths) else ""})
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if "error" not in r]
    systems = args.systems
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    width = 0.8 / len(args.depths)
    for i, depth in enumerate(args.depths):
        by = {r["system"]: r for r in ok if r["depth"] == depth}
        xs = [j + i * width for j in range(len(systems))]
        axes[0].bar(xs, [by[s]["bytes_inter"] / 2**20 if s in by else 0 for s in systems],
                    width, label=f"{depth} layers")
        key = f"epoch_time_{min(args.links):g}gbit"
        axes[1].bar(xs, [by[s][key] if s in by else 0 for s in systems], width,
                    label=f"{depth} layers")
    for ax, title in ((axes[0], "inter-server MiB / epoch"),
                      (axes[1], f"epoch time (s), {min(args.links):g} Gbit/s links (modelled)")):
        ax.set_xticks([j + width * (len(args.depths) - 1) / 2 for j in range(len(systems))])
        ax.set_xticklabels(systems)
        ax.set_title(title)
        ax.legend()
    for system in sorted({m["system"] for m in mem}):
        pts = [(m["depth"], m["saved_mb"]) for m in mem
               if m["system"] == system and m.get("saved_mb") is not None]
        if pts:
            axes[2].plot(*zip(*pts), "o-", label=system)
    axes[2].axhline(args.mem_cap_mb, color="grey", linestyle="--", label="cap")
    axes[2].set_xlabel(f"layers (hidden {args.hidden})")
    axes[2].set_ylabel("activation MB per rank")
    axes[2].set_yscale("log")
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args = parse_args(argv)
    data = dataset(args)
    rows = [run(args, system, data, depth, args.epochs)
            for depth in args.depths for system in args.systems]
    add_derived(rows, args)
    mem = memory_sweep(args, data) if args.mem_depths else []
    result = {"preset": args.preset, "ranks": "2 virtual servers x 2", "cpus": os.cpu_count(),
              "graph": {k: getattr(args, k) for k in ("num_nodes", "num_edges", "feat_dim")},
              "runs": rows, "memory": mem, "checks": checks(rows, mem, args)}
    emit_json(result, args.out)
    cols = ["system", "depth", "epoch_time", *[f"epoch_time_{g:g}gbit" for g in args.links],
            "bytes_inter", "bytes_intra", "saved_mb", "rss_mb", "time_to_acc", "test_acc",
            "steps"]
    print("\n" + markdown_table([{c: r.get(c, r.get("error")) for c in cols} for r in rows]))
    if mem:
        print("\n" + markdown_table(mem))
    print("\n" + markdown_table(result["checks"]))
    if args.plot:
        plot(rows, mem, args, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
