"""DGL's own published DistDGL examples, unchanged, through ``dglx_dist.run`` under every
strategy, beside DGL's own run of the same script: exit codes, the median test accuracy over
the runs and its range, the median epoch time, as JSON lines and a markdown table
(docs/porting.md has the measured one).

    .venv/bin/python scripts/dgl_examples.py --dgl-repo PATH/TO/dmlc/dgl [--tags v2.1.0 ...]

The scripts are read from a clone of dmlc/dgl (``git show TAG:examples/distributed/...``),
never copied into this repository. Cora is partitioned the way DGL's
``examples/distributed/graphsage/partition_graph.py`` does it (node data ``features`` and
``labels``, METIS, ``balance_ntypes=train_mask``, ``balance_edges=True``), in 1 part for DGL's
standalone run (one process) and 2 parts for the runner (2 processes, 2 virtual servers).
DGL's own run goes through a shim that, on a DGL older than 2.4, puts the two loaders where
DGL 2.4's scripts look for them (``dgl.distributed.DistNodeDataLoader`` and
``DistEdgeDataLoader``, DGL's own classes) and changes nothing else.
``node_classification.py`` takes its own flags ``--num_epochs 20 --batch_size 32 --lr 0.01
--fan_out 10,10`` (its defaults, batches of 1000 at lr 0.003, take one step per epoch on
Cora's 140 training nodes and end at about 0.45 after 20 epochs, too far from converged to
compare); ``node_classification_unsupervised.py`` runs its defaults (it needs scikit-learn
below 1.7, whose LogisticRegression still takes ``multi_class``).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from dglx_dist.report import markdown_table  # noqa: E402
from dglx_dist.runtime.env import free_local_port  # noqa: E402
from dglx_dist.strategies import STRATEGIES  # noqa: E402

EXAMPLES = "examples/distributed/graphsage"
SCRIPTS = {"node_classification.py": ["--num_epochs", "20", "--batch_size", "32", "--lr",
                                      "0.01", "--fan_out", "10,10", "--eval_every", "20"],
           "node_classification_unsupervised.py": []}
UNSUPERVISED_STRATEGIES = ("distdgl", "p3")  # what the issue asks of the unsupervised script
SHIM = """
import runpy, sys
import dgl.dataloading, dgl.distributed
for name in ("DistNodeDataLoader", "DistEdgeDataLoader"):  # DGL 2.4's places, on an older DGL
    if not hasattr(dgl.distributed, name):
        setattr(dgl.distributed, name, getattr(dgl.dataloading, name))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
PARTITION = """
import sys, dgl
from dglx_dist.data import CoraGraphDataset
g = CoraGraphDataset()[0]
g.ndata["features"], g.ndata["labels"] = g.ndata.pop("feat"), g.ndata.pop("label")
dgl.distributed.partition_graph(g, "cora", int(sys.argv[2]), sys.argv[1], part_method="metis",
                                balance_ntypes=g.ndata["train_mask"], balance_edges=True)
"""


def _env(**extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DGLX_")}
    env.update({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "DGLX_TIMEOUT": "120"},
               **extra)
    return env


def _scripts(repo: Path, tags: list[str], out: Path) -> list[tuple[str, str, Path]]:
    """(tag, script name, its file) for each script the tag has."""
    found = []
    for tag in tags:
        for name in SCRIPTS:
            r = subprocess.run(["git", "-C", str(repo), "show", f"{tag}:{EXAMPLES}/{name}"],
                               capture_output=True, text=True)
            if r.returncode == 0:
                path = out / tag / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(r.stdout)
                found.append((tag, name, path))
    return found


def _measure(cmd: list[str], cwd: Path, env: dict[str, str]) -> dict:
    """Runs one script; its exit code, test accuracy (the mean over the ranks that print
    one), mean epoch time and wall time."""
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    accs = [float(a) for a in re.findall(r"TestAccuracy ([0-9.]+)", r.stdout)] or \
        [float(a) for a in re.findall(r"test acc ([0-9.]+)", r.stdout)]
    epochs = [float(t) for t in re.findall(r"TrainEpochTime\(mean\) ([0-9.]+)", r.stdout)]
    errors = [line for line in r.stderr.splitlines() if "error" in line.lower()]
    return {"exit": r.returncode, "test_acc": round(statistics.mean(accs), 4) if accs else None,
            "epoch_s": round(statistics.mean(epochs), 4) if epochs else None,
            "wall_s": round(time.perf_counter() - t0, 1),
            "error": errors[-1][-300:] if r.returncode and errors else None}


def _runs(tag: str, name: str, path: Path, out: Path, strategies: list[str]):
    """DGL's standalone run, then the runner's under each strategy: (system, command, env)."""
    args = ["--graph_name", "cora", "--ip_config", "ip_config.txt", *SCRIPTS[name]]
    one, two = out / "parts1" / "cora.json", out / "parts2" / "cora.json"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--master-port"]
    plain = [*torchrun, str(free_local_port()), "--nproc-per-node", "1", str(out / "shim.py"),
             str(path), *args, "--part_config", str(one)]
    if name.endswith("unsupervised.py"):
        plain += ["--standalone"]
        strategies = [s for s in strategies if s in UNSUPERVISED_STRATEGIES]
    yield "DGL standalone (1 part, 1 process)", plain, _env(DGL_DIST_MODE="standalone")
    for strategy in strategies:
        cmd = [*torchrun, str(free_local_port()), "--nproc-per-node", "2", "-m",
               "dglx_dist.run", "--strategy", strategy, "--cache-dir", str(out / "cache"),
               str(path), *args, "--part_config", str(two)]
        yield f"dglx_dist.run {strategy}", cmd, _env(DGLX_VIRTUAL_SERVERS="2")


def _summary(rows: list[dict]) -> list[dict]:
    """One row per (script, tag, system): exit codes, the median test accuracy and its range,
    the median epoch time."""
    cells: dict[tuple, list[dict]] = {}
    for row in rows:
        cells.setdefault((row["script"], row["tag"], row["system"]), []).append(row)
    out = []
    for (script, tag, system), runs in cells.items():
        accs = [r["test_acc"] for r in runs if r["test_acc"] is not None]
        epochs = [r["epoch_s"] for r in runs if r["epoch_s"] is not None]
        out.append({"script": script, "tag": tag, "system": system,
                    "exit": " ".join(str(r["exit"]) for r in runs),
                    "test_acc": statistics.median(accs) if accs else None,
                    "range": f"{min(accs):.3f}-{max(accs):.3f}" if accs else "",
                    "epoch_s": statistics.median(epochs) if epochs else None})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dgl-repo", required=True, help="a clone of dmlc/dgl with its tags")
    parser.add_argument("--tags", nargs="+", default=["v2.1.0", "v2.4.0", "master"])
    parser.add_argument("--strategies", nargs="+", default=STRATEGIES.names())
    parser.add_argument("--scripts", nargs="+", default=list(SCRIPTS), choices=list(SCRIPTS))
    parser.add_argument("--out", default="dgl-examples")
    parser.add_argument("--runs", type=int, default=3, help="runs per cell (DGL's too)")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "ip_config.txt").write_text("127.0.0.1\n")
    (out / "shim.py").write_text(SHIM)
    for parts in (1, 2):
        if not (out / f"parts{parts}" / "cora.json").is_file():
            subprocess.run([sys.executable, "-c", PARTITION, str(out / f"parts{parts}"),
                            str(parts)], check=True, capture_output=True, env=_env())
    rows = []
    for tag, name, path in _scripts(Path(args.dgl_repo), args.tags, out):
        if name not in args.scripts:
            continue
        for _ in range(args.runs):  # the cells' runs alternate: the machine's load evens out
            for system, cmd, env in _runs(tag, name, path, out, args.strategies):
                row = {"script": name, "tag": tag, "system": system,
                       **_measure(cmd, out, env)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    print(markdown_table(_summary(rows)))


if __name__ == "__main__":
    main()
