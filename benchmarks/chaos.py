"""Fault injection: a small training job run N times, a random rank (or executor worker) killed
at a random moment of its training, against one fault-free run.

Each run is ``dglx train`` under ``torchrun --standalone --max-restarts 3`` with
``--checkpoint-dir`` (a checkpoint per epoch). The script SIGKILLs one worker process while the
job trains; torchrun's agent tears the group down and restarts it; the restarted ranks see
``TORCHELASTIC_RESTART_COUNT > 0`` and resume from the newest intact checkpoint. A kill can land
anywhere after the first checkpoint, also during a later checkpoint's save (the atomic commit
is what keeps that safe).

Reported per run: the victim, when it was killed, the exit code, whether the job resumed from a
checkpoint, wall time, time lost (wall minus the fault-free run's), and whether the final model
(every rank's parameters in the last checkpoint) equals the fault-free run's bit for bit. The
strategies re-seed sampling per epoch and checkpoints carry every RNG state, so with the same
partitions the final models must be identical: ``differing_models`` must be 0 (for dorylus in
``mode=sync``; its async mode is not deterministic even without faults).

    python -m benchmarks.chaos --runs 5                       # distdgl on Cora, ~4 min
    python -m benchmarks.chaos --runs 3 --strategy dorylus --model gcn --strategy-opt mode=sync \
        --victim worker --epochs 100
    python -m benchmarks.chaos --runs 1 --kill-after-checkpoint 3    # the e2e test's mode

Prints one JSON object, a markdown table of the runs and one of the summary; exits 1 unless
every run was struck, completed and ended with the fault-free model.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import torch

from dglx_dist.checkpoint import find_latest
from dglx_dist.cluster.procs import kill_group
from dglx_dist.checkpoint.files import decode, read_file
from dglx_dist.report import markdown_table

log = logging.getLogger("chaos")


def command(args: argparse.Namespace, ckpt: Path, cache: Path, restarts: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
            str(args.nproc), "--max-restarts", str(restarts), "--monitor-interval", "0.5",
            "-m", "dglx_dist", "train", "--strategy", args.strategy, "--model", args.model,
            "--data", args.data, "--epochs", str(args.epochs), "--eval-every", "0",
            "--row-normalize", "--no-progress", "--cache-dir", str(cache),
            "--checkpoint-dir", str(ckpt), "--seed", "0",
            *[a for opt in args.strategy_opt for a in ("--strategy-opt", opt)]]


def workers(agent: psutil.Process, victim: str) -> list[psutil.Process]:
    """The job's ranks (children of torchrun's agent) or their executor worker processes."""
    try:
        ranks = [p for p in agent.children() if "dglx_dist" in " ".join(p.cmdline())]
        if victim == "rank":
            return ranks
        return [c for r in ranks for c in r.children(recursive=True)]
    except psutil.Error:
        return []


def final_models(ckpt: Path) -> dict[str, dict[str, torch.Tensor]]:
    """Every rank file's model state in the newest intact checkpoint."""
    found = find_latest(ckpt)
    if found is None:
        return {}
    path, manifest = found
    return {name: decode(read_file(path, manifest, name), name)["model"]
            for name in manifest["files"] if name.startswith("rank-")}


def same_models(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[f].keys() == b[f].keys() and all(torch.equal(a[f][k], b[f][k]) for k in a[f])
        for f in a)


def one_run(args, work: Path, i: int, clean: dict[str, Any] | None, rng: random.Random
            ) -> dict[str, Any]:
    """One job; with ``clean`` (the fault-free run's row) a worker is killed during it."""
    ckpt, out = work / f"ckpt-{i}", work / f"run-{i}.log"
    shutil.rmtree(ckpt, ignore_errors=True)  # an earlier invocation's run of the same number
    env = dict(os.environ, DGLX_TIMEOUT=str(args.timeout))
    row: dict[str, Any] = {"run": i if clean else "fault-free", "victim": "",
                           "killed_at_s": None}
    t0 = time.monotonic()
    with open(out, "w") as log_file:
        proc = subprocess.Popen(command(args, ckpt, work / "parts", 3 if clean else 0),
                                stdout=log_file, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            row["first_checkpoint_s"] = wait_first_checkpoint(proc, ckpt, t0)
            if clean:
                row.update(inject(args, proc, ckpt, clean, rng, t0))
            code = proc.wait(timeout=args.run_timeout)
        except subprocess.TimeoutExpired:
            code = "timeout"
        finally:
            kill_group(proc)
    wall = time.monotonic() - t0
    text = out.read_text(errors="replace")
    records = [json.loads(line) for line in text.splitlines() if line.startswith('{"epoch"')]
    row["relaunches"] = sum(r.get("relaunches", 0) for r in records)  # executor tasks redone
    row.update(exit=code, resumed="resumed from" in text, wall_s=round(wall, 2),
               lost_s=round(wall - clean["wall_s"], 2) if clean else 0.0)
    if code != 0:
        log.warning("run %s exited %s; its output: %s", row["run"], code, out)
    return row


def wait_first_checkpoint(proc: subprocess.Popen, ckpt: Path, t0: float) -> float | None:
    """Seconds until the job's first checkpoint appeared (training under way); None if the job
    ended without one."""
    while proc.poll() is None:
        if any(p.name.startswith("epoch-") for p in ckpt.glob("epoch-*")):
            return round(time.monotonic() - t0, 2)
        time.sleep(0.05)
    return None


def inject(args, proc: subprocess.Popen, ckpt: Path, clean: dict[str, Any],
           rng: random.Random, t0: float) -> dict[str, Any]:
    """Waits for the moment to strike (a given checkpoint, or a random moment of the training
    the fault-free run had left after its first checkpoint), then SIGKILLs one worker."""
    if args.kill_after_checkpoint is not None:
        target = ckpt / f"epoch-{args.kill_after_checkpoint:06d}"
        while not target.exists() and proc.poll() is None:
            time.sleep(0.05)
    else:
        left = clean["wall_s"] - (clean["first_checkpoint_s"] or 0.0)
        time.sleep(rng.uniform(0.0, 0.8) * max(left, 0.0))
    try:
        agent = psutil.Process(proc.pid)
    except psutil.NoSuchProcess:
        return {"victim": "(job ended first)"}
    while proc.poll() is None:
        victims = workers(agent, args.victim)
        if victims:
            # not rng.choice: after rng.uniform it picked the same rank in every run (seeds 0, 7)
            victim = victims[rng.getrandbits(32) % len(victims)]
            try:
                what = f"rank {victim.environ().get('RANK', '?')}"
                if args.victim == "worker":
                    what = f"a worker of {what}"
                victim.send_signal(signal.SIGKILL)
            except psutil.Error:
                continue
            return {"victim": what, "killed_at_s": round(time.monotonic() - t0, 2)}
        time.sleep(0.05)
    return {"victim": "(job ended first)"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5, help="faulted runs")
    p.add_argument("--strategy", default="distdgl")
    p.add_argument("--strategy-opt", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--model", default="sage")
    p.add_argument("--data", default="cora")
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--victim", choices=("rank", "worker"), default="rank",
                   help="kill a rank, or one of its executor workers (dorylus)")
    p.add_argument("--kill-after-checkpoint", type=int, default=None, metavar="EPOCH",
                   help="strike once this checkpoint exists instead of at a random time")
    p.add_argument("--timeout", type=float, default=60.0, help="DGLX_TIMEOUT of the job")
    p.add_argument("--run-timeout", type=float, default=600.0)
    p.add_argument("--seed", type=int, default=0, help="seeds the victims and kill times")
    p.add_argument("--workdir", type=Path, default=None)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="dglx-chaos-"))
    work.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)

    clean = one_run(args, work, 0, None, rng)
    if clean["exit"] != 0:
        log.error("the fault-free run failed: %s", work / "run-0.log")
        return 1
    reference = final_models(work / "ckpt-0")
    clean["model_equal"] = bool(reference)
    rows = [clean]
    for i in range(1, args.runs + 1):
        row = one_run(args, work, i, clean, rng)
        row["model_equal"] = same_models(final_models(work / f"ckpt-{i}"), reference)
        rows.append(row)
        log.info("run %d: %s", i, row)
    faulted = rows[1:]
    struck = [r for r in faulted if r["killed_at_s"] is not None]
    summary = {"runs": len(faulted), "faults": len(struck),
               "completed": sum(r["exit"] == 0 for r in faulted),
               "resumed": sum(r["resumed"] for r in faulted),
               "max_lost_s": max((r["lost_s"] for r in struck), default=0.0),
               "differing_models": sum(not r["model_equal"] for r in faulted),
               "fault_free_wall_s": clean["wall_s"], "strategy": args.strategy,
               "epochs": args.epochs, "workdir": str(work)}
    print(json.dumps({"summary": summary, "rows": rows}))
    print(markdown_table(rows) + "\n")
    print(markdown_table([summary]))
    ok = (summary["completed"] == summary["runs"] == summary["faults"]
          and summary["differing_models"] == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
