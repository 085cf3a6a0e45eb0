"""The GPU checklist's training runs (docs/install.md, "GPUs"): every strategy trains on the
DGL-free path with ``--device cuda``, and an epoch is timed on the GPU beside the same run on
the CPU.

What it runs, each as its own ``torchrun ... -m dglx_dist train`` with a timeout (a failure
is a row of the table, not the end of the list):

* ``node``: Cora, node classification, each strategy, one rank on NCCL;
* ``node-2r``: the same with two ranks sharing the GPU over gloo;
* ``typed``: a typed graph (``dglx datagen --preset mag-small``), one rank, under each
  strategy that trains graphs with types;
* ``link``: Cora, link prediction, one rank, under each strategy with edge loaders;
* ``time``: a larger synthetic graph (``dglx datagen``, ``--nodes``), one rank, a hidden width of 128,
  on ``--device`` and again on the CPU: the median epoch time (first epoch left out) of each;
* ``pipe``: the sampled strategies (distdgl, p3) on the same graph and ``--device``, their
  loader in turn (``--prefetch-thread off``) against a worker thread (``on``, issue 79), with
  the share of each epoch the step waited on the host for its draws and rows (``sample`` and
  ``pull`` of the records' ``phases_max``), and the worker with two sampler processes
  drawing its steps (``--num-workers 2``); on a GPU the worker's again with the steps drawn
  on the GPU (``--use-uva``), and with a quarter of the feature rows kept there as well
  (``--gpu-cache``).

The correctness runs go ``--jobs`` at a time; the timed ones one at a time. With ``--device
cpu`` it runs the same list on the CPU (a dry run without a GPU). Writes each run's log and
``checklist.json`` under ``--out``; prints one JSON line and a markdown table. Exit status 1
when any run failed.

Usage (from the repository root, the package importable)::

    python scripts/gpu_checklist.py --device cuda --out /tmp/gpu
    python scripts/gpu_checklist.py --device cpu --epochs 3 --nodes 5000 --jobs 2   # dry run
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

STRATEGIES = ("distdgl", "p3", "granndis", "dorylus", "fullgraph")


@dataclasses.dataclass(frozen=True)
class Check:
    """One ``dglx train`` run of the list."""

    kind: str
    strategy: str
    device: str
    ranks: int = 1
    backend: str = "gloo"
    data: str = "cora"
    task: str = "node"
    epochs: int = 10
    hidden: int = 16
    blocked: bool = False  # ``import dgl`` fails in every process of the run
    servers: int = 0  # DGLX_VIRTUAL_SERVERS, where not 0
    convs: str = "dglx"  # the reference model's (--convs): "dgl" is DGL's path, dgl.nn's convs
    thread: str = "auto"  # the training loader's --prefetch-thread
    uva: bool = False  # the training loader's --use-uva: its steps drawn on the GPU
    kept: int = 0  # the training loader's --gpu-cache: feature rows kept on the GPU
    workers: int = 0  # the training loader's --num-workers: sampler processes per rank

    @property
    def name(self) -> str:
        name = f"{self.kind}-{self.strategy}-{self.device.replace(':', '')}"
        name += "" if self.thread == "auto" else f"-thread-{self.thread}"
        name += ("-uva" if self.uva else "") + (f"-kept{self.kept}" if self.kept else "")
        name += f"-workers{self.workers}" if self.workers else ""
        return name + ("-nodgl" if self.blocked else "")

    @property
    def cache_key(self) -> str:
        """Runs at the same time never share a partition directory; the timed pair does."""
        return f"time-{self.strategy}" if self.kind in ("time", "pipe") else self.name

    def command(self, cache: Path) -> list[str]:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", str(self.ranks), "-m", "dglx_dist", "train",
                "--strategy", self.strategy, "--data", self.data, "--task", self.task,
                "--device", self.device, "--backend", self.backend, "--epochs", str(self.epochs),
                "--hidden", str(self.hidden), "--convs", self.convs,
                "--prefetch-thread", self.thread, *(["--use-uva"] if self.uva else []),
                *(["--gpu-cache", str(self.kept)] if self.kept else []),
                "--num-workers", str(self.workers),
                "--eval-every", "0", "--no-progress", "--cache-dir", str(cache / self.cache_key)]


def _capabilities(name: str):
    from dglx_dist.strategies import STRATEGIES as registry

    return registry.get(name).capabilities


def checks(device: str, epochs: int, mag: str, big: str,
           nodes: int) -> tuple[list[Check], list[Check]]:
    """The correctness runs and the timed ones."""
    gpu = device.startswith("cuda")
    one = "nccl" if gpu else "gloo"
    runs = [Check("node", s, device, 1, one, epochs=epochs) for s in STRATEGIES]
    runs += [Check("node-2r", s, device, 2, "gloo", epochs=epochs) for s in STRATEGIES]
    runs += [Check("typed", s, device, 1, one, data=mag, epochs=3) for s in STRATEGIES
             if _capabilities(s).typed_graphs]
    runs += [Check("link", s, device, 1, one, task="link", epochs=5)
             for s in STRATEGIES if _capabilities(s).link_prediction]
    timed = [Check("time", s, d, 1, "nccl" if d.startswith("cuda") else "gloo", data=big,
                   epochs=4, hidden=128) for s in STRATEGIES for d in dict.fromkeys([device, "cpu"])]
    # in turn, on a worker thread and with two sampler processes drawing for it; on a GPU,
    # the worker's steps drawn there too, then with a quarter of the feature rows kept there
    # as well (p3 holds the input features itself: no rows of them to keep)
    ways = [("off", False, 0, 0), ("on", False, 0, 0), ("on", False, 0, 2)]
    ways += [("on", True, 0, 0), ("on", True, nodes // 4, 0)] if gpu else []
    timed += [Check("pipe", s, device, 1, one, data=big, epochs=4, hidden=128, thread=t, uva=u,
                    kept=k, workers=w) for s in ("distdgl", "p3") for t, u, k, w in ways
              if not (k and s == "p3")]
    return runs, timed


def _records(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def _env(check: Check, out: Path, threads: int | None) -> dict:
    """The run's environment: ``threads``, its virtual servers, and where ``check.blocked`` a
    ``sitecustomize`` that blocks DGL first on the path of each of its processes."""
    from dglx_dist.testing.nodgl import blocking_path

    env = {**os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
    if check.servers:
        env["DGLX_VIRTUAL_SERVERS"] = str(check.servers)
    if check.blocked:
        folder = out / "nodgl"  # a caller's own sitecustomize there is kept
        if not (folder / "sitecustomize.py").exists():
            blocking_path(folder)
        path = [str(folder), env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
    return env


def run(check: Check, out: Path, cache: Path, timeout: float,
        threads: int | None = None) -> dict:
    """One run: its status, result (test accuracy or MRR), median epoch time, seconds;
    ``threads``: torch's threads per process (runs side by side share the cores: left to
    torch, each takes them all, and the CPU-bound phases of four runs took 10-30x longer)."""
    log = out / f"{check.name}.log"
    env = _env(check, out, threads)
    start = time.perf_counter()
    try:
        proc = subprocess.run(check.command(cache), capture_output=True, text=True,
                              timeout=timeout, env=env)
        text, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        text, rc = f"{exc.stdout or ''}{exc.stderr or ''}\nTIMEOUT after {timeout} s", 124
    seconds = time.perf_counter() - start
    log.write_text(text if isinstance(text, str) else text.decode(errors="replace"))
    records = _records(text if isinstance(text, str) else "")
    epochs = [r for r in records if "epoch_time" in r][1:]
    times = [r["epoch_time"] for r in epochs]
    waits = [(r["phases_max"].get("sample", 0) + r["phases_max"].get("pull", 0))
             / r["epoch_time"] for r in epochs if r.get("phases_max") and r["epoch_time"]]
    result = next((r[k] for r in reversed(records) for k in ("test_acc", "test_mrr") if k in r),
                  None)
    errors = [ln for ln in text.splitlines() if "Error" in ln or "error:" in ln]
    row = {**dataclasses.asdict(check), "name": check.name, "rc": rc,
           "status": "ok" if rc == 0 and records else ("timeout" if rc == 124 else "FAIL"),
           "result": result, "epoch_time": statistics.median(times) if times else None,
           "host_wait": round(statistics.median(waits), 3) if waits else None,
           "seconds": round(seconds, 1), "error": errors[-1][:160] if rc and errors else ""}
    with open(out / "rows.jsonl", "a") as f:  # what is done survives a cut-off list
        f.write(json.dumps(row) + "\n")
    return row


def _prepare(args, out: Path) -> tuple[str, str]:
    """The typed and the larger synthetic dataset, written once."""
    mag, big = out / "data-mag-small", out / f"data-community-{args.nodes}"
    for path, flags in ((mag, ["--preset", "mag-small"]),
                        (big, ["--num-nodes", str(args.nodes), "--num-edges",
                               str(20 * args.nodes), "--feat-dim", "100", "--num-classes",
                               "20"])):
        if not (path / "meta.json").exists():
            subprocess.run([sys.executable, "-m", "dglx_dist", "datagen", *flags, "--out",
                            str(path)], check=True, capture_output=True)
    return str(mag), str(big)


def table(rows: list[dict]) -> str:
    head = ("| run | strategy | device | ranks | backend | status | result | epoch s | "
            "host wait | wall s |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        res = "" if r["result"] is None else f"{r['result']:.3f}"
        ep = "" if r["epoch_time"] is None else f"{r['epoch_time']:.4f}"
        wait = "" if r.get("host_wait") is None else f"{r['host_wait']:.0%}"
        kind = r["kind"] + ("" if r.get("thread", "auto") == "auto" else f" ({r['thread']})")
        kind += (" (uva)" if r.get("uva") else "") + (f" (kept {r['kept']})" if r.get("kept")
                                                      else "")
        kind += f" ({r['workers']} workers)" if r.get("workers") else ""
        lines.append(f"| {kind} | {r['strategy']} | {r['device']} | {r['ranks']} | "
                     f"{r['backend']} | {r['status']} | {res} | {ep} | {wait} | {r['seconds']} |")
    failed = [r for r in rows if r["status"] != "ok"]
    lines += [f"\n{r['name']}: {r['error']}" for r in failed]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (a dry run)")
    p.add_argument("--out", default="/tmp/gpu-checklist", help="logs and checklist.json")
    p.add_argument("--epochs", type=int, default=30, help="epochs of each Cora node run (the "
                   "typed runs take 3, the link runs 5)")
    p.add_argument("--nodes", type=int, default=50_000, help="nodes of the timed graph (a "
                   "community graph with 20 edges per node and 100 features, as ogbn-products' "
                   "shape)")
    p.add_argument("--jobs", type=int, default=4, help="correctness runs at a time")
    p.add_argument("--timeout", type=float, default=240, help="seconds per run")
    p.add_argument("--only", nargs="*", default=None, help="run kinds to keep (node, node-2r, "
                   "typed, link, time, pipe)")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = out / "parts"
    mag, big = _prepare(args, out)
    runs, timed = checks(args.device, args.epochs, mag, big, args.nodes)
    if args.only is not None:
        runs = [c for c in runs if c.kind in args.only]
        timed = [c for c in timed if c.kind in args.only]
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        threads = max(1, (os.cpu_count() or 1) // (args.jobs * 2))  # 2 ranks at most a run
        rows = list(pool.map(lambda c: run(c, out, cache, args.timeout, threads), runs))
    rows += [run(c, out, cache, args.timeout) for c in timed]
    (out / "checklist.json").write_text(json.dumps(rows, indent=1))
    print(json.dumps({"device": args.device, "runs": len(rows),
                      "failed": [r["name"] for r in rows if r["status"] != "ok"]}))
    print(table(rows))
    return int(any(r["status"] != "ok" for r in rows))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
