"""DGL's published single-process GraphSAGE example, ported to dglx_dist as docs/porting.md
says, under every strategy, beside the plain script: exit codes, the median test accuracy
over the runs and its range, as JSON lines and a markdown table (docs/porting.md has the
measured one).

    .venv/bin/python scripts/dgl_ports.py --dgl-repo PATH/TO/dmlc/dgl [--tags v2.1.0 ...]

``examples/pytorch/graphsage/node_classification.py`` is read from a clone of dmlc/dgl at
each tag (never copied into this repository). The plain script changes its data loading
only (Cora from ``dglx_dist.data`` through DGL's ``AsNodePredDataset``, for ogbn-products,
which needs the network) and runs in one process; the port makes the :data:`PORT` edits on
top (the lines docs/porting.md shows) and runs in 2 processes under ``torchrun
--standalone``. Each run prints "Test Accuracy X" once per rank (the mean is taken).
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from dgl_examples import run_env, summary

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from dglx_dist.report import markdown_table  # noqa: E402
from dglx_dist.runtime.env import free_local_port  # noqa: E402
from dglx_dist.strategies import STRATEGIES  # noqa: E402

SCRIPT = "examples/pytorch/graphsage/node_classification.py"
DATA = [  # (a line of DGL's script, what the plain script has instead)
    ("from ogb.nodeproppred import DglNodePropPredDataset",
     "from dglx_dist.data import CoraGraphDataset"),
    ('    dataset = AsNodePredDataset(DglNodePropPredDataset("ogbn-products"))',
     "    dataset = AsNodePredDataset(CoraGraphDataset())"),
]
PORT = [  # (a line of the script, the lines that replace it): the port's changed lines
    ("import dgl.nn as dglnn", ["import dgl.nn as dglnn", "import dglx_dist"]),
    ("from dgl.dataloading import (", ["from dglx_dist import ("]),
    ("            feat = feat.to(device)",  # y as every rank's rows, written and read by all
     ["            y = dglx_dist.DistTensor(y.shape, y.dtype)",
      "            feat = feat.to(device)"]),
    ("    args = parser.parse_args()",
     ['    parser.add_argument("--strategy", default="distdgl")',
      "    args = parser.parse_args()"]),
    ('    g = g.to("cuda" if args.mode == "puregpu" else "cpu")',
     ['    g = g.to("cuda" if args.mode == "puregpu" else "cpu")',
      "    g = dglx_dist.distribute(g, strategy=args.strategy)"]),
    ("    model = SAGE(in_size, 256, out_size).to(device)",
     ["    model = SAGE(in_size, 256, out_size).to(device)",
      "    model = dglx_dist.parallelize(model, g)"]),
]


def edited(text: str, edits: list) -> str:
    """``text`` with each edit's line (it must be there exactly once) replaced."""
    lines = text.splitlines()
    for old, new in edits:
        where = [i for i, line in enumerate(lines) if line == old]
        if len(where) != 1:
            raise SystemExit(f"{SCRIPT}: {len(where)} lines are {old!r}; expected one")
        new = [new] if isinstance(new, str) else new
        lines[where[0]:where[0] + 1] = new
    return "\n".join(lines) + "\n"


def scripts(repo: Path, tag: str, out: Path) -> tuple[Path, Path] | None:
    """The plain script and its port at ``tag``, written under ``out`` (None: no script)."""
    r = subprocess.run(["git", "-C", str(repo), "show", f"{tag}:{SCRIPT}"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None
    plain = edited(r.stdout, DATA)
    (out / tag).mkdir(parents=True, exist_ok=True)
    paths = out / tag / "plain.py", out / tag / "port.py"
    paths[0].write_text(plain)
    paths[1].write_text(edited(plain, PORT))
    return paths


def measure(cmd: list[str], cwd: Path, env: dict[str, str]) -> dict:
    """One run: exit code, the mean of the ranks' test accuracies, wall time."""
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    accs = [float(a) for a in re.findall(r"Test Accuracy ([0-9.]+)", r.stdout)]
    errors = [line for line in r.stderr.splitlines() if "error" in line.lower()]
    return {"exit": r.returncode, "test_acc": round(statistics.mean(accs), 4) if accs else None,
            "epoch_s": None, "wall_s": round(time.perf_counter() - t0, 1),
            "error": errors[-1][-300:] if r.returncode and errors else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dgl-repo", required=True, help="a clone of dmlc/dgl with its tags")
    parser.add_argument("--tags", nargs="+", default=["v2.1.0", "v2.4.0"])
    parser.add_argument("--strategies", nargs="+", default=STRATEGIES.names())
    parser.add_argument("--out", default="dgl-ports")
    parser.add_argument("--runs", type=int, default=3, help="runs per cell (the plain one's too)")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    rows = []
    for tag in args.tags:
        paths = scripts(Path(args.dgl_repo), tag, out)
        for _ in range(args.runs if paths is not None else 0):  # cells alternate
            runs = [("DGL, one process", [sys.executable, str(paths[0])])]
            runs += [(f"port, {s}", [sys.executable, "-m", "torch.distributed.run",
                                     "--master-port", str(free_local_port()),
                                     "--nproc-per-node", "2", str(paths[1]), "--strategy", s])
                     for s in args.strategies]
            for system, cmd in runs:
                row = {"example": "graphsage (single process)", "tag": tag, "system": system,
                       **measure(cmd, out, run_env())}
                print(json.dumps(row), flush=True)
                rows.append(row)
    print(markdown_table(summary(rows)))


if __name__ == "__main__":
    main()
