"""Faults that must end a job cleanly: a frozen store host, a killed launcher, a killed
partitioning. Each kind runs ``--runs`` times; per kind it reports runs, clean ends (the
survivors out within DGLX_TIMEOUT + 30 s, nothing left running, the master port free, and for
partitioning, the next run into the same directory succeeding with no temporary left), the
processes left behind and the seconds to the end, as JSON lines and a markdown table.

    python -m benchmarks.faults --runs 2 --timeout 20

Kinds:
  freeze-standalone  torchrun --standalone, 2 ranks training Cora; SIGSTOP the rank that hosts
                     the job's store (rank 0). seconds: SIGSTOP -> rank 1 exited.
  freeze-c10d        the same with a c10d rendezvous endpoint.
  freeze-2node       docs/launching.md's multi-node launch on one machine: two torchrun agents
                     (--nnodes 2, one rank each) meeting at a c10d endpoint; SIGSTOP rank 0,
                     which hosts the job's store. seconds: SIGSTOP -> the other node's rank
                     exited; clean also needs that node's agent gone and the line naming rank 0
                     printed there. The frozen node stands for a frozen machine: its processes
                     are killed afterwards and not counted.
  kill-launcher      SIGKILL torchrun's agent mid-training (dorylus: ranks plus executor
                     workers). seconds: SIGKILL -> every process it started exited.
  kill-partition     SIGKILL `dglx partition` while it writes a synthetic graph's parts, then
                     partition into the same directory again. seconds: the second run.
  hostile-store      torchrun --standalone, 2 ranks training Cora; from a process outside the
                     job, connect to every socket the job listens on from all interfaces (the
                     agent's rendezvous store, rank 0's store), send 64 KB of random bytes,
                     then as a store client write rank 1's health entries malformed (a flag
                     that is not a number, a heartbeat that is not JSON). The job must go on
                     training (new records); then SIGKILL rank 1 and write the entries again:
                     rank 0 must exit within DGLX_TIMEOUT + 30 s with one PeerError line naming
                     rank 1, nothing left. seconds: SIGKILL -> rank 0 exited.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from dglx_dist.report import markdown_table
from dglx_dist.runtime.env import free_local_port

KINDS = ("freeze-standalone", "freeze-c10d", "freeze-2node", "kill-launcher", "kill-partition",
         "hostile-store")


def job_env(timeout: float) -> dict[str, str]:
    """The environment of a job under test: the caller's, without dglx's and torchrun's own
    variables, with DGLX_TIMEOUT set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DGLX_", "RANK", "WORLD"))}
    env.update({"DGLX_TIMEOUT": str(timeout), "OMP_NUM_THREADS": "1"})
    return env


def _train(work: Path, launch: list[str], strategy: str, nproc: int = 2) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *launch, "--nproc-per-node", str(nproc),
            "-m", "dglx_dist", "train", "--strategy", strategy, "--model", "gcn", "--epochs",
            "100000", "--eval-every", "1", "--no-progress", "--metrics-file",
            str(work / "metrics.jsonl"), "--cache-dir", str(work / "cache")]


def _started(agent: subprocess.Popen, metrics: Path, limit: float = 180) -> list[psutil.Process]:
    """The agent's processes once training has written its first record."""
    deadline = time.monotonic() + limit
    while not (metrics.is_file() and metrics.read_text().strip()):
        if agent.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the job did not start (exit {agent.poll()})")
        time.sleep(0.2)
    return psutil.Process(agent.pid).children(recursive=True)


def _names_rank0(log: Path) -> bool:
    """The survivor's output has the PeerError line, and it names rank 0."""
    text = log.read_text()
    return "PeerError" in text and "rank 0" in text.split("PeerError", 1)[1][:400]


def _left(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            continue
    return out


def _listening(port: int) -> bool:
    return any(c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
               for c in psutil.net_connections("tcp"))


def _suspend(frozen, survivor, agent: subprocess.Popen, timeout: float) -> tuple[float, float]:
    """Freezes ``frozen``; seconds until ``survivor`` exits, and until its ``agent`` does."""
    frozen.suspend()
    t0 = time.monotonic()
    psutil.wait_procs([survivor], timeout=timeout + 60)
    survivor_s = time.monotonic() - t0
    with contextlib.suppress(subprocess.TimeoutExpired):
        agent.wait(timeout=120)
    return survivor_s, time.monotonic() - t0


def _freeze(work: Path, timeout: float, rdzv: str) -> dict[str, Any]:
    port = free_local_port()
    launch = (["--standalone"] if rdzv == "standalone" else
              ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--nnodes", "1"])
    with open(work / "stderr.log", "w") as err:
        agent = subprocess.Popen(_train(work, launch, "distdgl"), env=job_env(timeout),
                                 stdout=subprocess.DEVNULL, stderr=err)
        procs = _started(agent, work / "metrics.jsonl")
        ranks = {int(p.environ().get("RANK", -1)): p for p in procs}
        survivor_s, job_s = _suspend(ranks[0], ranks[1], agent, timeout)
    left = _left(procs + [psutil.Process(agent.pid)] if agent.poll() is None else procs)
    named = _names_rank0(work / "stderr.log")
    for p in left:
        p.kill()
    return {"seconds": round(survivor_s, 1), "job_seconds": round(job_s, 1),
            "clean": survivor_s <= timeout + 30 and not left and named, "left": len(left)}


def _freeze_two_nodes(work: Path, timeout: float) -> dict[str, Any]:
    port = free_local_port()
    agents, logs = [], [work / f"node{n}.log" for n in (0, 1)]
    for node, log in enumerate(logs):
        launch = ["--nnodes", "2", "--node-rank", str(node), "--rdzv-backend", "c10d",
                  "--rdzv-id", "faults", "--rdzv-endpoint", f"127.0.0.1:{port}"]
        with open(log, "w") as err:
            agents.append(subprocess.Popen(_train(work, launch, "distdgl", nproc=1),
                                           env=job_env(timeout), stdout=subprocess.DEVNULL,
                                           stderr=err))
    try:
        _started(agents[0], work / "metrics.jsonl")
        procs = {a.pid: psutil.Process(a.pid).children(recursive=True) for a in agents}
        rank_of = {p: int(p.environ().get("RANK", -1)) for ps in procs.values() for p in ps}
        frozen = next(p for p, r in rank_of.items() if r == 0)
        survivor = next(p for p, r in rank_of.items() if r == 1)
        live = next(a for a in agents if survivor in procs[a.pid])
        survivor_s, job_s = _suspend(frozen, survivor, live, timeout)
        left = _left(procs[live.pid] + [psutil.Process(live.pid)] if live.poll() is None
                     else procs[live.pid])
        named = _names_rank0(logs[agents.index(live)])
        said = [line for line in logs[agents.index(live)].read_text().splitlines()
                if "ERROR dglx_dist" in line]
    finally:
        for a in agents:  # the frozen node (and anything else still up) goes now
            if a.poll() is None:
                agent = psutil.Process(a.pid)
                for p in agent.children(recursive=True) + [agent]:
                    with contextlib.suppress(psutil.NoSuchProcess):
                        p.kill()
            a.wait()
    return {"seconds": round(survivor_s, 1), "job_seconds": round(job_s, 1),
            "clean": survivor_s <= timeout + 30 and not left and named, "left": len(left),
            "said": said[-1][-300:] if said else None}


def _kill_launcher(work: Path, timeout: float) -> dict[str, Any]:
    port = free_local_port()
    agent = subprocess.Popen(_train(work, ["--master-port", str(port)], "dorylus"),
                             env=job_env(timeout), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    procs = _started(agent, work / "metrics.jsonl")
    agent.send_signal(signal.SIGKILL)
    t0 = time.monotonic()
    _, alive = psutil.wait_procs(procs, timeout=timeout + 30)
    seconds = time.monotonic() - t0
    agent.wait()
    busy = _listening(port)
    for p in alive:
        p.kill()
    return {"seconds": round(seconds, 1), "job_seconds": round(seconds, 1),
            "clean": not alive and not busy, "left": len(alive)}


def _kill_partition(work: Path, timeout: float) -> dict[str, Any]:
    data, out = work / "graph", work / "parts"
    subprocess.run([sys.executable, "-m", "dglx_dist", "datagen", str(data), "--num-nodes",
                    "300000", "--num-edges", "3000000", "--feat-dim", "64"], check=True,
                   capture_output=True)
    cmd = [sys.executable, "-m", "dglx_dist", "partition", str(data), str(out), "--method",
           "hash", "--parts", "4"]
    first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not list(work.glob(".parts.tmp-*/part-00001")) and first.poll() is None:
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait()
    stale = len(list(work.glob(".parts.tmp-*")))
    t0 = time.monotonic()
    second = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    left = len(list(work.glob(".parts.*")))
    ok = second.returncode == 0 and (out / "partition.json").is_file() and (data / "meta.json"
                                                                           ).is_file()
    return {"seconds": round(seconds, 1), "job_seconds": round(seconds, 1),
            "clean": ok and stale == 1 and left == 0, "left": left}


def _public_ports(procs: list[psutil.Process]) -> list[int]:
    """The ports ``procs`` listen on from every interface (``0.0.0.0`` / ``::``)."""
    pids = {p.pid for p in procs}
    return sorted({c.laddr.port for c in psutil.net_connections("tcp")
                   if c.status == psutil.CONN_LISTEN and c.pid in pids
                   and c.laddr.ip in ("0.0.0.0", "::")})


def _forge(ports: list[int]) -> None:
    """Garbage, then malformed health entries of rank 1, to every port (a store or not)."""
    import datetime

    import torch.distributed as dist

    for port in ports:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 5) as s:
            s.sendall(os.urandom(1 << 16))
        with contextlib.suppress(RuntimeError):
            store = dist.TCPStore("127.0.0.1", port, None, False,
                                  timeout=datetime.timedelta(seconds=5))
            store.set("dglx/health/joined/1", "abc")
            store.set("dglx/health/beat/1", "not a heartbeat")


def _records(metrics: Path) -> int:
    return len(metrics.read_text().splitlines()) if metrics.is_file() else 0


def _hostile_store(work: Path, timeout: float) -> dict[str, Any]:
    metrics = work / "metrics.jsonl"
    with open(work / "stderr.log", "w") as err:
        agent = subprocess.Popen(_train(work, ["--standalone"], "distdgl"), env=job_env(timeout),
                                 stdout=subprocess.DEVNULL, stderr=err)
        procs = _started(agent, metrics)
        ports = _public_ports(procs + [psutil.Process(agent.pid)])
        _forge(ports)
        before = _records(metrics)
        time.sleep(5)
        trained_on = _records(metrics) > before and agent.poll() is None
        ranks = {int(p.environ().get("RANK", -1)): p for p in procs}
        ranks[1].kill()
        t0 = time.monotonic()
        _forge(ports)
        psutil.wait_procs([ranks[0]], timeout=timeout + 60)
        seconds = time.monotonic() - t0
        with contextlib.suppress(subprocess.TimeoutExpired):
            agent.wait(timeout=120)
    left = _left(procs + [psutil.Process(agent.pid)] if agent.poll() is None else procs)
    text = (work / "stderr.log").read_text()
    named = "PeerError" in text and "rank 1" in text.split("PeerError", 1)[1][:400]
    for p in left:
        p.kill()
    return {"seconds": round(seconds, 1), "job_seconds": round(seconds, 1), "ports": ports,
            "clean": trained_on and named and seconds <= timeout + 30 and not left,
            "left": len(left)}


RUNNERS = {"freeze-standalone": lambda w, t: _freeze(w, t, "standalone"),
           "freeze-c10d": lambda w, t: _freeze(w, t, "c10d"),
           "freeze-2node": _freeze_two_nodes,
           "kill-launcher": _kill_launcher, "kill-partition": _kill_partition,
           "hostile-store": _hostile_store}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=20.0, help="DGLX_TIMEOUT of the jobs")
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    args = p.parse_args(argv)
    rows = []
    for kind in args.kinds:
        results = []
        for i in range(args.runs):
            with tempfile.TemporaryDirectory(prefix=f"dglx-faults-{kind}-") as tmp:
                res = RUNNERS[kind](Path(tmp), args.timeout)
            print(json.dumps({"kind": kind, "run": i, **res}), flush=True)
            results.append(res)
        secs = sorted(r["seconds"] for r in results)
        rows.append({"kind": kind, "runs": len(results),
                     "clean": sum(r["clean"] for r in results),
                     "left_behind": sum(r["left"] for r in results),
                     "seconds_median": secs[len(secs) // 2], "seconds_max": secs[-1],
                     "job_seconds_max": max(r["job_seconds"] for r in results)})
    print(markdown_table(rows))
    return 0 if all(r["clean"] == r["runs"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
