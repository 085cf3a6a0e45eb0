"""Hostile input and data safety as runs (issue 38, items 3 and 4): each case runs a `dglx`
command (under torchrun with 2 ranks where it trains) in a fresh directory that also holds a
user's files, and reports the exit code, our error lines (`ERROR dglx_dist ...`, or a usage
error's `dglx CMD: error: ...`; torchrun's closing summary quotes them again, which is not
counted), the traceback frames of this package printed (torchrun prints its own traceback
when a rank fails: not counted), the seconds to exit, the processes and listening ports the
command left, and the user's files lost or changed, as JSON lines and a markdown table. A case
passes when the run ends as expected (`refuse`: exit != 0, one line, none of our frames;
an error that each rank raised on its own, outside any collective, is each rank's line, the
same line; `run`: exit 0)
within DGLX_TIMEOUT + 30 s, leaving nothing running or listening and every user file as it
was. Unit-level cases (a DataLoader's arguments, DistTensor writes, a user's exception on
one rank) are tests, named in docs/reliability.md.

    python -m benchmarks.hostile_runs --timeout 20
    python -m benchmarks.hostile_runs --cases link-negatives-0 cache-dir-shared
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import psutil

from benchmarks.faults import job_env
from dglx_dist.report import markdown_table
from dglx_dist.runtime.env import free_local_port

USER_FILES = {"thesis.txt": b"years of work\n", "meta.json": b'{"mine": true}\n',
              "partition.json": b'{"not": "dglx"}\n'}


@dataclass(frozen=True)
class Case:
    """One run: ``args`` (after ``dglx``; ``{w}`` is the case's directory) under torchrun
    with ``ranks`` ranks (0: plainly), ``expect`` "refuse" or "run", ``prepare`` run first."""

    args: str
    expect: str = "refuse"
    ranks: int = 0
    prepare: Callable[[Path], None] | None = None
    what: str = ""


def _user_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for name, data in USER_FILES.items():
        (path / name).write_bytes(data)


def _bad_json(w: Path) -> None:
    (w / "dgl").mkdir()
    (w / "dgl" / "g.json").write_text('{"graph_name": "g", "num_nodes": 10, "node_map": {"_N": [[0')


def _checkpoints(w: Path) -> None:
    _dglx(w, 2, "train --epochs 2 --checkpoint-dir {w}/ckpt --cache-dir {w}/cache")


def _truncated(w: Path) -> None:
    _checkpoints(w)
    newest = sorted((w / "ckpt").rglob("*.pt"))[-1]
    newest.write_bytes(newest.read_bytes()[:100])


SCRIPT = """
import os, torch, dgl, dgl.nn as dglnn, dglx_dist
from dglx_dist.data import CoraGraphDataset
case = os.environ["HOSTILE_CASE"]
g0 = CoraGraphDataset()[0]
if case == "nan-feat":
    g0.ndata["feat"][5, 3] = float("nan")
if case == "int-feat":
    g0.ndata["feat"] = (g0.ndata["feat"] > 0).long()
if case == "odd-edges":  # self-loops, repeated edges, 10 isolated nodes
    g0 = dgl.add_self_loop(g0)
    g0.add_edges(g0.edges()[0][:100], g0.edges()[1][:100])
    g0.add_nodes(10)
if case == "one-train-node":
    g0.ndata["train_mask"][:] = False
    g0.ndata["train_mask"][0] = True
g = dglx_dist.distribute(g0, strategy="distdgl", cache_dir=os.environ["HOSTILE_CACHE"])
if case == "distribute-twice":
    g = dglx_dist.distribute(g0, strategy="distdgl", cache_dir=os.environ["HOSTILE_CACHE"])
if case == "missing-ndata":
    g.ndata["missing"]
ids = torch.nonzero(g.ndata["train_mask"][torch.arange(g.num_nodes())]).squeeze(1)
if case == "ids-out-of-range":
    ids = torch.tensor([0, 10 ** 6])
if case == "ids-float":
    ids = ids.float()
class Net(torch.nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.conv = conv

    def forward(self, blocks, x):
        return self.conv(blocks[0], x)


conv = dglnn.GraphConv(g.ndata["feat"].shape[1], 7, allow_zero_in_degree=True)
model = dglx_dist.parallelize(conv if case == "bare-conv" else Net(conv), g)
loader = dglx_dist.DataLoader(g, ids, dglx_dist.NeighborSampler([5]), batch_size=16)
opt = torch.optim.Adam(model.parameters(), lr=0.01)
for step, (inputs, outputs, blocks) in enumerate(loader):
    if case == "user-raises" and step == 2 and torch.distributed.get_rank() == 1:
        raise RuntimeError("a bug in the user's loop")
    x = g.ndata["feat"][inputs].float()
    loss = torch.nn.functional.cross_entropy(model(blocks, x), g.ndata["label"][outputs])
    opt.zero_grad()
    loss.backward()
    opt.step()
print("trained", step + 1, "steps")
"""


def _script(w: Path) -> None:
    (w / "user_script.py").write_text(SCRIPT)


def script_case(case: str, expect: str = "refuse", what: str = "") -> Case:
    """The drop-in user script above, one of its cases, under torchrun with 2 ranks."""
    return Case(f"SCRIPT {case}", expect=expect, ranks=2, prepare=_script, what=what)


TRAIN = "train --epochs 2 --cache-dir {w}/cache"
CASES = {
    "link-negatives-0": Case(f"{TRAIN} --task link --negatives 0", ranks=2),
    "link-edge-batch-0": Case(f"{TRAIN} --task link --edge-batch-size 0", ranks=2),
    "link-edge-batch-float": Case(f"{TRAIN} --task link --edge-batch-size 1.5", ranks=2),
    "memory-limit-0": Case(f"{TRAIN} --memory-limit 0", ranks=2),
    "memory-limit-negative": Case(f"{TRAIN} --memory-limit -5", ranks=2),
    "memory-limit-huge": Case(f"{TRAIN} --memory-limit {10 ** 30}", expect="run", ranks=2,
                              what="a limit no run reaches: trains"),
    "datagen-huge": Case("datagen {w}/g --num-nodes 1000000000000"),
    "datagen-zero-nodes": Case("datagen {w}/g --num-nodes 0"),
    "bench-bad-preset": Case("bench --preset huge --out {w}/b"),
    "bench-bad-systems": Case("bench --preset tiny --systems nothing --out {w}/b"),
    "from-dgl-bad-json": Case("partition --from-dgl {w}/dgl/g.json {w}/out", prepare=_bad_json),
    "cache-dir-a-file": Case("train --epochs 2 --cache-dir {w}/thesis.txt", ranks=2,
                             what="--cache-dir naming the user's file"),
    "cache-dir-users": Case("train --epochs 2 --cache-dir {w}/user", ranks=2,
                            what="--cache-dir holding a user's files"),
    "checkpoint-dir-users": Case(f"{TRAIN} --checkpoint-dir {{w}}/user", ranks=2,
                                 what="--checkpoint-dir holding a user's files"),
    "bench-out-users": Case("bench --preset tiny --systems dgl --epochs 2 --out {w}/user",
                            what="--out holding a user's files"),
    "partition-out-users": Case("partition {w}/ds {w}/user --method hash --parts 2",
                                prepare=lambda w: _dglx(w, 0, "datagen {w}/ds --num-nodes 1000 "
                                                              "--num-edges 5000"),
                                what="the output directory holding a user's files"),
    "resume-other-world-size": Case(f"{TRAIN} --epochs 3 --checkpoint-dir {{w}}/ckpt --resume",
                                    ranks=1, prepare=_checkpoints,
                                    what="checkpoints of 2 ranks resumed by 1"),
    "resume-truncated": Case(f"{TRAIN} --epochs 3 --checkpoint-dir {{w}}/ckpt --resume",
                             expect="run", ranks=2, prepare=_truncated,
                             what="the newest checkpoint file cut short: the one before"),
    "script-nan-feat": script_case("nan-feat"),
    "script-int-feat": script_case("int-feat", "run", "integer features: the model casts"),
    "script-odd-edges": script_case("odd-edges", "run",
                                    "self-loops, repeated edges, isolated nodes"),
    "script-one-train-node": script_case("one-train-node", "run",
                                         "one rank's share of the training nodes is empty"),
    "script-distribute-twice": script_case("distribute-twice", "run"),
    "script-missing-ndata": script_case("missing-ndata"),
    "script-bare-conv": script_case("bare-conv", what="a bare GraphConv as the model"),
    "script-ids-out-of-range": script_case("ids-out-of-range"),
    "script-ids-float": script_case("ids-float"),
    "script-user-raises": script_case("user-raises",
                                      what="rank 1 raises in its loop at step 2"),
    "resume-other-strategy": Case("train --epochs 3 --strategy p3 --cache-dir {w}/cache "
                                  "--checkpoint-dir {w}/ckpt --resume", ranks=2,
                                  prepare=_checkpoints, what="distdgl's checkpoints, p3"),
}


def shared_cache(w: Path, timeout: float) -> dict:
    """Two 2-rank jobs started together on one new --cache-dir: both must partition (or wait
    for the other's partitions) and train to the same test accuracy (same data and seed)."""
    args = "train --epochs 2 --no-progress --cache-dir {w}/cache --metrics-file {w}/m%d.jsonl"
    t0 = time.monotonic()
    jobs = [subprocess.Popen(_command(w, 2, args % i), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, env=job_env(timeout),
                             start_new_session=True) for i in (0, 1)]
    errs = [job.communicate(timeout=timeout + 300)[1] for job in jobs]
    codes = [job.returncode for job in jobs]
    said = [ln for e in errs for ln in e.splitlines()
            if "ERROR dglx_dist" in ln or "dglx_dist error on rank" in ln]
    seconds = time.monotonic() - t0
    accs = [[json.loads(line).get("test_acc") for line in (w / f"m{i}.jsonl").read_text()
             .splitlines()][-1] if (w / f"m{i}.jsonl").is_file() else None for i in (0, 1)]
    left = [p for p in psutil.process_iter() if any(_in_group(p, j.pid) for j in jobs)]
    return {"case": "cache-dir-shared", "expect": "run", "exit": max(codes),
            "line": f"test_acc {accs[0]} and {accs[1]}" + (f"; {said[0][-300:]}" if said
                                                            else ""), "our_frames": 0,
            "seconds": round(seconds, 1), "left": len(left), "ports": 0, "files_lost": 0,
            "pass": codes == [0, 0] and accs[0] is not None and accs[0] == accs[1]
            and not left}


def _command(w: Path, ranks: int, args: str) -> list[str]:
    words = args.format(w=w).split()
    dglx = [str(w / "user_script.py")] if words[0] == "SCRIPT" else ["-m", "dglx_dist", *words]
    if not ranks:
        return [sys.executable, *dglx]
    return [sys.executable, "-m", "torch.distributed.run", "--master-port",
            str(free_local_port()), "--nproc-per-node", str(ranks), *dglx]


def _dglx(w: Path, ranks: int, args: str) -> None:
    subprocess.run(_command(w, ranks, args), check=True, capture_output=True, env=job_env(20))


def _digest(root: Path) -> dict[str, str]:
    return {str(f.relative_to(root)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in root.rglob("*") if f.is_file() and f.name in USER_FILES}


def run_case(name: str, case: Case, w: Path, timeout: float) -> dict:
    _user_dir(w / "user")
    _user_dir(w)
    if case.prepare:
        case.prepare(w)
    before = _digest(w)
    t0 = time.monotonic()
    env = {**job_env(timeout), "HOSTILE_CASE": case.args.split()[-1],
           "HOSTILE_CACHE": str(w / "cache")}
    proc = subprocess.Popen(_command(w, case.ranks, case.args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout + 120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
    seconds = time.monotonic() - t0
    group = [p for p in psutil.process_iter(["pid"]) if _in_group(p, proc.pid)]
    ports = sorted({c.laddr.port for c in psutil.net_connections("tcp")
                    if c.status == psutil.CONN_LISTEN and c.pid in {p.pid for p in group}})
    for p in group:
        p.kill()
    after = _digest(w)
    lost = sorted(f for f in before if after.get(f) != before[f])
    lines = (out + err).splitlines()
    said = [ln for ln in lines if ("ERROR dglx_dist" in ln or ": error: " in ln
                                   or "dglx_dist error on rank" in ln)
            and not ln.lstrip().startswith("traceback :")]  # torchrun's summary quotes it
    frames = [ln for ln in lines if 'File "' in ln and "/dglx_dist/" in ln]
    # the same error raised by every rank on its own (not a collective) is each rank's line
    distinct = {re.sub(r"on rank \d+", "on rank R", ln[ln.find("rror"):]) for ln in said}
    refused = proc.returncode != 0 and len(distinct) == 1 and not frames
    ok = (refused if case.expect == "refuse" else proc.returncode == 0)
    return {"case": name, "what": case.what or case.args, "expect": case.expect,
            "exit": proc.returncode,
            "line": said[-1][said[-1].find("ERROR") + 6 if "ERROR" in said[-1] else 0:][:200]
            if said else "", "ranks_saying": len(said), "our_frames": len(frames),
            "seconds": round(seconds, 1), "left": len(group), "ports": len(ports),
            "files_lost": len(lost),
            "pass": ok and seconds <= timeout + 30 and not group and not lost}


def _in_group(p: psutil.Process, pgid: int) -> bool:
    try:
        return os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, ProcessLookupError):
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=20.0, help="DGLX_TIMEOUT of the runs")
    ap.add_argument("--cases", nargs="+", choices=sorted([*CASES, "cache-dir-shared"]),
                    default=[*CASES, "cache-dir-shared"])
    args = ap.parse_args(argv)
    rows = []
    for name in args.cases:
        with tempfile.TemporaryDirectory(prefix=f"dglx-hostile-{name}-") as tmp:
            row = (shared_cache(Path(tmp), args.timeout) if name == "cache-dir-shared" else
                   run_case(name, CASES[name], Path(tmp), args.timeout))
        print(json.dumps(row), flush=True)
        rows.append(row)
    print(markdown_table(rows, ["case", "expect", "exit", "line", "ranks_saying", "our_frames",
                                "seconds", "left", "ports", "files_lost", "pass"]))
    return 0 if all(r["pass"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
