"""Benchmark: dorylus async (S=0) vs dorylus sync ("pipe") vs the CPU-only variant.

Every run is ``dglx train --strategy dorylus --model gcn`` (or ``--model gat``) under torchrun
with 2 graph servers (2 ranks) on the same synthetic graph and METIS partitions (cached), same
model, same seed:

* ``async``: bounded asynchrony, staleness 0, ``local`` executor (separate worker processes);
* ``sync``: a barrier at every layer (exact full-graph GCN), ``local`` executor;
* ``cpu``: the same pipeline with every tensor task run on the graph server itself
  (``inline`` executor: the paper's CPU-only variant; no invocations, no executor bytes);
* ``async-s1`` (only when asked for, e.g. by ``scripts/bench.py --sweeps``): staleness 1.

Per run: epoch time (mean without the first epoch), epochs until validation accuracy reaches
``--target`` x the best any run reached, invocations, relaunches and bytes to/from the executor
per epoch (all graph servers), estimated cost per epoch and Dorylus's value = 1/(time x cost).
The paper's target: async per-epoch time at least 15% below sync, with epochs-to-accuracy
within +10%. On a 2-core machine the worker processes and the graph servers share the cores,
so times are this machine's, not a cluster's.

Usage::

    python scripts/bench_dorylus.py --preset tiny            # a few minutes
    python scripts/bench_dorylus.py --preset small --out r.json --plot r.png

Prints one JSON object and markdown tables; ``--plot`` draws epoch time and accuracy per epoch.
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

log = logging.getLogger("bench_dorylus")
# the executor emulates Lambda: every invocation pays a round trip (50 ms: invoke overhead plus
# moving a ~1.4 MB request), 8 concurrent invocations per graph server, 16 intervals each
_LAMBDA = {"latency_ms": 50.0, "workers": 8, "intervals": 16}
PRESETS = {
    "tiny": {"num_nodes": 20_000, "num_edges": 300_000, "feat_dim": 64, "epochs": 20, **_LAMBDA},
    "small": {"num_nodes": 200_000, "num_edges": 2_000_000, "feat_dim": 64, "epochs": 10,
              **_LAMBDA},
}
SYSTEMS = {"async": ["mode=async", "staleness=0"], "sync": ["mode=sync"],
           "cpu": ["mode=sync", "executor=inline"],
           "async-s1": ["mode=async", "staleness=1"]}  # scripts/bench.py's staleness sweep
DEFAULT_SYSTEMS = ["async", "sync", "cpu"]


def run(args, system: str, data: Path) -> dict[str, Any]:
    """One ``dglx train`` run; its metrics summarised."""
    opts = SYSTEMS[system] + [f"intervals={args.intervals}"]
    if system != "cpu":  # the local executor's processes, with the emulated Lambda latency
        opts.append(f"executor_options=workers={args.workers},"
                    f"latency_s={args.latency_ms / 1000:g}")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-port", str(free_local_port()), "-m", "dglx_dist", "train", "--strategy",
           "dorylus", "--model", args.model, "--data", str(data), "--epochs", str(args.epochs),
           "--eval-every", "1", "--hidden", str(args.hidden), "--lr", str(args.lr),
           "--dropout", str(args.dropout), "--seed", "0", "--cache-dir", str(args.workdir / "parts"),
           "--no-progress", *[a for o in opts for a in ("--strategy-opt", o)]]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
           "DGLX_VIRTUAL_SERVERS": "2",  # one graph server per (virtual) server
           "DGLX_TIMEOUT": str(int(args.timeout))}
    log.info("%s: %s", system, " ".join(cmd[-12:]))
    t0 = time.perf_counter()
    (proc,), _ = run_group([cmd], env, args.timeout, [None])
    if proc.returncode != 0:
        return {"system": system, "error": f"exit {proc.returncode}"}
    records = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    timed = records[1:] or records
    mean = lambda key: sum(r.get(key, 0) for r in timed) / len(timed)  # noqa: E731
    return {"system": system, "epoch_time": round(mean("epoch_time"), 3),
            "invocations": int(mean("invocations")), "relaunches": int(mean("relaunches")),
            "mb_to_executor": round(mean("bytes_to_executor") / 1e6, 2),
            "mb_from_executor": round(mean("bytes_from_executor") / 1e6, 2),
            "mb_between_servers": round(mean("bytes_sent_inter") / 1e6, 2),
            "cost_usd": mean("cost_usd"), "value": round(mean("value"), 1),
            "test_acc": records[-1]["test_acc"], "val_acc": [r["val_acc"] for r in records],
            "epoch_times": [r["epoch_time"] for r in records],
            "run_wall_s": round(time.perf_counter() - t0, 1)}


def add_derived(rows: list[dict], target: float) -> None:
    best = max((max(r["val_acc"]) for r in rows if "error" not in r), default=0.0)
    for r in rows:
        if "error" in r:
            continue
        r["target_acc"] = round(target * best, 4)
        r["epochs_to_acc"] = next((i + 1 for i, a in enumerate(r["val_acc"])
                                   if a >= r["target_acc"]), None)
        r["cost_usd"] = f"{r['cost_usd']:.3g}"


def checks(rows: list[dict]) -> list[dict]:
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ok = [r for r in rows if "error" not in r]
    ax1.bar([r["system"] for r in ok], [r["epoch_time"] for r in ok], color="tab:blue")
    ax1.set_ylabel("epoch time (s)")
    ax1.set_title("dorylus: epoch time")
    for r in ok:
        ax2.plot(range(1, len(r["val_acc"]) + 1), r["val_acc"], label=r["system"])
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("validation accuracy")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    p.add_argument("--systems", type=lambda s: s.split(","), default=DEFAULT_SYSTEMS,
                   help=f"of {', '.join(SYSTEMS)} (async-s1: staleness 1)")
    p.add_argument("--epochs", type=int, help="epochs per run (default: the preset's)")
    p.add_argument("--model", choices=("gcn", "gat"), default="gcn",
                   help="gcn, or gat (4 heads of --hidden, attention tasks per edge)")
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--intervals", type=int, help="vertex intervals per server (preset: 16)")
    p.add_argument("--workers", type=int,
                   help="local executor processes per server (preset: 8)")
    p.add_argument("--latency-ms", type=float,
                   help="latency injected into every invocation, a Lambda round trip "
                        "(preset: 50; 0 for bare worker processes)")
    p.add_argument("--target", type=float, default=0.95,
                   help="epochs to accuracy: val_acc >= target x the best of any run")
    add_common(p, "bench_out/dorylus")
    return parse_with_preset(p, argv, PRESETS)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args = parse_args(argv)
    from dglx_dist.data.synthetic import SyntheticConfig

    data = synthetic_dataset(SyntheticConfig(num_nodes=args.num_nodes, num_edges=args.num_edges,
                                             feat_dim=args.feat_dim, num_classes=16,
                                             seed=args.seed), args.workdir)
    rows = [run(args, system, data) for system in args.systems]
    add_derived(rows, args.target)
    result = {"preset": args.preset, "model": args.model, "graph_servers": 2,
              "cpus": os.cpu_count(),
              "graph": {k: getattr(args, k) for k in ("num_nodes", "num_edges", "feat_dim")},
              "runs": rows, "checks": checks(rows)}
    emit_json(result, args.out)
    cols = ["system", "epoch_time", "epochs_to_acc", "test_acc", "invocations", "relaunches",
            "mb_to_executor", "mb_from_executor", "mb_between_servers", "cost_usd", "value"]
    print("\n" + markdown_table([{c: r.get(c, r.get("error")) for c in cols} for r in rows]))
    if result["checks"]:
        print("\n" + markdown_table(result["checks"]))
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
