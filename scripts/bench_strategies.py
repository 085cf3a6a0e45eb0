"""Benchmark: strategies side by side on the same synthetic graphs (P3's evaluation shape).

Every run is ``dglx train`` under torchrun with 4 processes as 2 virtual servers x 2 ranks, the
same 2-layer GraphSAGE (mean), fanouts 10,25 (25 neighbours of a seed, then 10 of each: P3's
"(25,10)"), batch 1000 per rank, Adam; each strategy partitions the dataset its own way
(cached). Two sweeps:

* feature width: F in ``--features`` (default 64, 256, 1024) at hidden 32;
* hidden width: ``--hiddens`` (default 32..512) at F = 256, to find where P3 stops paying off
  (its layer-1 exchange grows with the hidden width, distdgl's feature pull does not).

Per run: epoch time (mean without the first epoch), bytes sent intra- and inter-server per
epoch (all ranks), test accuracy. Checks: P3's inter-server bytes at F=1024, hidden 32 are at
most 1/8 of distdgl's; P3's bytes grow by at most 25% from the smallest to the largest F.

Usage::

    python scripts/bench_strategies.py --preset tiny                  # ~3 min
    python scripts/bench_strategies.py --preset small --plot out.png  # ~10 min

Prints one JSON object and markdown tables; ``--plot`` draws bytes and epoch time per sweep.
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

log = logging.getLogger("bench_strategies")
PRESETS = {
    "tiny": {"num_nodes": 20_000, "num_edges": 300_000, "epochs": 3},
    "small": {"num_nodes": 100_000, "num_edges": 1_500_000, "epochs": 3},
}


def dataset(workdir: Path, num_nodes: int, num_edges: int, feat_dim: int, seed: int) -> Path:
    """A synthetic DC-SBM dataset with ``feat_dim`` features (generated once, cached)."""
    from dglx_dist.data.synthetic import SyntheticConfig

    return synthetic_dataset(SyntheticConfig(num_nodes=num_nodes, num_edges=num_edges,
                                             feat_dim=feat_dim, num_classes=16, seed=seed),
                             workdir)


def run(args: argparse.Namespace, strategy: str, data: Path, hidden: int) -> dict[str, Any]:
    """One ``dglx train`` run; its metrics summarised."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
           "--master-port", str(free_local_port()), "-m", "dglx_dist", "train", "--strategy",
           strategy, "--data", str(data), "--epochs", str(args.epochs), "--eval-every",
           str(args.epochs), "--hidden", str(hidden), "--lr", "0.003", "--seed", "0",
           "--strategy-opt", "fanouts=10,25", "--strategy-opt", "batch_size=1000",
           "--cache-dir", str(args.workdir / "parts"), "--no-progress"]
    env = {**os.environ, "DGLX_VIRTUAL_SERVERS": "2", "OMP_NUM_THREADS": "1",
           "GLOO_SOCKET_IFNAME": "lo"}
    log.info("%s, hidden %d, %s", strategy, hidden, data.name)
    t0 = time.perf_counter()
    (proc,), _ = run_group([cmd], env, args.timeout, [None])
    if proc.returncode != 0:
        raise RuntimeError(f"{strategy} failed with exit code {proc.returncode}")
    records = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    timed = records[1:] or records
    mean = lambda key: sum(r[key] for r in timed) / len(timed)  # noqa: E731
    return {"strategy": strategy, "hidden": hidden, "epoch_time": round(mean("epoch_time"), 3),
            "bytes_inter": int(mean("bytes_sent_inter")),
            "bytes_intra": int(mean("bytes_sent_intra")), "test_acc": records[-1]["test_acc"],
            "steps": records[-1]["steps"], "run_wall_s": round(time.perf_counter() - t0, 1)}


def sweeps(args: argparse.Namespace) -> tuple[list[dict], list[dict]]:
    by_feature, by_hidden = [], []
    for feat in args.features:
        data = dataset(args.workdir, args.num_nodes, args.num_edges, feat, args.seed)
        for strategy in args.strategies:
            by_feature.append({"feat_dim": feat} | run(args, strategy, data, args.hidden))
    data = dataset(args.workdir, args.num_nodes, args.num_edges, args.sweep_feat, args.seed)
    for hidden in args.hiddens:
        for strategy in args.strategies:
            done = [r for r in by_feature if r["feat_dim"] == args.sweep_feat
                    and r["hidden"] == hidden and r["strategy"] == strategy]
            row = done[0] if done else {"feat_dim": args.sweep_feat} | run(args, strategy,
                                                                         data, hidden)
            by_hidden.append(row)
    return by_feature, by_hidden


def checks(by_feature: list[dict], by_hidden: list[dict], args) -> list[dict]:
    def row(rows, strategy, **key):
        found = [r for r in rows if r["strategy"] == strategy
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
        cross = [r["hidden"] for r in by_hidden if r["strategy"] == "p3"
                 and (d := row(by_hidden, "distdgl", hidden=r["hidden"])) and r[key] >= d[key]]
        out.append({"check": f"smallest hidden where p3 {what} >= distdgl's (F="
                             f"{args.sweep_feat})", "value": min(cross) if cross else "none",
                    "target": "(reported)", "status": ""})
    return out


def plot(by_feature: list[dict], by_hidden: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for col, (rows, x, label) in enumerate(((by_feature, "feat_dim", "feature width F"),
                                            (by_hidden, "hidden", "hidden width (F=256)"))):
        for strategy in sorted({r["strategy"] for r in rows}):
            mine = [r for r in rows if r["strategy"] == strategy]
            xs = [r[x] for r in mine]
            axes[0][col].plot(xs, [r["bytes_inter"] / 2**20 for r in mine], "o-", label=strategy)
            axes[1][col].plot(xs, [r["epoch_time"] for r in mine], "o-", label=strategy)
        for ax, ylabel in ((axes[0][col], "inter-server MiB / epoch"),
                           (axes[1][col], "epoch time (s)")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel(label)
            ax.set_ylabel(ylabel)
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    p.add_argument("--features", type=ints, default=[64, 256, 1024])
    p.add_argument("--hidden", type=int, default=32, help="hidden width of the feature sweep")
    p.add_argument("--hiddens", type=ints, default=[32, 64, 128, 256, 512])
    p.add_argument("--sweep-feat", type=int, default=256, help="F of the hidden sweep")
    p.add_argument("--strategies", type=lambda s: s.split(","), default=["distdgl", "p3"])
    add_common(p, "bench-strategies-work", "write a PNG of both sweeps here")
    return parse_with_preset(p, argv, PRESETS)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args = parse_args(argv)
    by_feature, by_hidden = sweeps(args)
    result = {"preset": args.preset, "ranks": "2 virtual servers x 2", "cpus": os.cpu_count(),
              "by_feature": by_feature, "by_hidden": by_hidden,
              "checks": checks(by_feature, by_hidden, args)}
    emit_json(result, args.out)
    cols = ("strategy", "feat_dim", "hidden", "epoch_time", "bytes_inter", "bytes_intra",
            "test_acc", "steps")
    for title, rows in (("feature sweep", by_feature), ("hidden sweep", by_hidden)):
        print(f"\n{title}\n\n" + markdown_table([{c: r[c] for c in cols} for r in rows]))
    print("\n" + markdown_table(result["checks"]))
    if args.plot:
        plot(by_feature, by_hidden, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
