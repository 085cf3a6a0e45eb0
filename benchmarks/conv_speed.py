"""Benchmark: the epoch time of the reference model with the package's convs
(``dglx_dist.nn``) beside DGL's (``dgl.nn``), per strategy, on CPU (issue 59's criterion).

Three arms, ``dglx train`` under torchrun (2 ranks as 2 virtual servers, one thread each, as
``dglx bench`` runs them) on the graph of ``dglx bench``'s preset (``tiny`` unless told):

* ``nodgl-dglx``: ``import dgl`` blocked (a ``sitecustomize`` this script writes), ``--convs
  dglx``: the package's blocks and torch's kernels (:mod:`dglx_dist.graphcore.message`), what a
  user without DGL runs;
* ``dgl-dgl``: DGL installed, ``--convs dgl``: dgl.nn's convs on DGL's blocks (made at the
  model's edge by DGL's door), today's DGL user;
* ``dgl-dglx``: DGL installed, ``--convs dglx``: the package's convs, which get the
  package's blocks there too since 2026-11-29 (before, DGL's blocks, aggregated through
  DGL's kernels): ``nodgl-dglx`` with DGL importable.

The arms alternate run by run (``--repeat`` rounds, every strategy in each). Per run: the
median epoch time without the first epoch and the forward and backward phases (the largest
over the ranks, mean without the first epoch); per arm and strategy, the median over the
runs and their range.

Usage::

    python benchmarks/conv_speed.py --model sage --repeat 3       # ~12 min on 2 cores
    python benchmarks/conv_speed.py --strategies distdgl --repeat 1 --epochs 3

Prints one JSON object and a markdown table.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from dglx_dist.bench.harness import parse_records, summarize
from dglx_dist.bench.presets import PRESETS
from dglx_dist.report import markdown_table
from dglx_dist.runtime.env import free_local_port

ARMS = {"nodgl-dglx": (True, "dglx"), "dgl-dgl": (False, "dgl"), "dgl-dglx": (False, "dglx")}
"""Each arm: (DGL blocked, --convs)."""
STRATEGIES = ("distdgl", "p3", "granndis", "dorylus", "fullgraph")
_BLOCK = """import importlib.abc, sys
class _NoDgl(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "dgl" or name.startswith("dgl."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
sys.meta_path.insert(0, _NoDgl())
"""


def _env(blocked: bool, blockdir: Path) -> dict[str, str]:
    path = [str(blockdir)] * blocked + [os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p),
            "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "DGLX_VIRTUAL_SERVERS": "2"}


def run_once(args, arm: str, strategy: str, data: Path, work: Path) -> dict:
    """One ``dglx train`` run of ``strategy`` in ``arm``; its row."""
    blocked, convs = ARMS[arm]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-port", str(free_local_port()), "-m", "dglx_dist", "train",
           "--data", str(data), "--strategy", strategy, "--model", args.model,
           "--convs", convs, "--hidden", str(args.hidden), "--epochs", str(args.epochs),
           "--eval-every", "0", "--no-progress", "--cache-dir", str(work / "cache")]
    proc = subprocess.run(cmd, env=_env(blocked, work), capture_output=True, text=True,
                          timeout=args.timeout)
    if proc.returncode:
        return {"arm": arm, "strategy": strategy, "error": proc.stderr.strip()[-300:]}
    row = summarize(parse_records(proc.stdout))
    phases = row.get("phases", {})
    return {"arm": arm, "strategy": strategy, "epoch_time": row["epoch_time_median"],
            "forward": phases.get("forward"), "backward": phases.get("backward+allreduce")}


def _stats(values: list[float]) -> str:
    return f"{statistics.median(values):.4f} ({min(values):.4f}..{max(values):.4f})"


def _phases(ok: list[dict]) -> str:
    """The median forward / backward phase ("-" where the strategy reports none: dorylus)."""
    if any(r["forward"] is None or r["backward"] is None for r in ok):
        return "-"
    return "{:.4f} / {:.4f}".format(statistics.median(r["forward"] for r in ok),
                                    statistics.median(r["backward"] for r in ok))


def table(runs: list[dict], strategies, arms) -> list[dict]:
    """Per strategy: each arm's median epoch time (range), forward and backward medians,
    and (a)/(b): the DGL-free arm over dgl.nn's."""
    out = []
    for s in strategies:
        row, med = {"strategy": s}, {}
        for arm in arms:
            ok = [r for r in runs if r["strategy"] == s and r["arm"] == arm and "error" not in r]
            if not ok:
                row[arm] = "failed"
                continue
            med[arm] = statistics.median(r["epoch_time"] for r in ok)
            row[arm] = _stats([r["epoch_time"] for r in ok])
            row[f"{arm} fwd/bwd"] = _phases(ok)
        if "nodgl-dglx" in med and "dgl-dgl" in med:
            row["nodgl-dglx / dgl-dgl"] = round(med["nodgl-dglx"] / med["dgl-dgl"], 2)
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=[n for n, v in PRESETS.items() if v.kind == "graph"],
                   default="tiny")
    p.add_argument("--model", choices=("sage", "gcn", "gat"), default="sage")
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--workdir", type=Path, help="keeps the dataset and partitions (default: "
                                                "a temporary directory)")
    args = p.parse_args(argv)
    strategies, arms = args.strategies.split(","), args.arms.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        work = (args.workdir or Path(tmp)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        (work / "sitecustomize.py").write_text(_BLOCK)
        data = PRESETS[args.preset].dataset(0, work)
        runs = []
        for rnd in range(args.repeat):
            for s in strategies:
                for arm in arms if rnd % 2 == 0 else arms[::-1]:  # alternating order
                    runs.append(run_once(args, arm, s, data, work) | {"round": rnd})
                    print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    rows = table(runs, strategies, arms)
    print(json.dumps({"preset": args.preset, "model": args.model, "epochs": args.epochs,
                      "hidden": args.hidden, "cpus": os.cpu_count(), "runs": runs,
                      "table": rows}))
    print(markdown_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
