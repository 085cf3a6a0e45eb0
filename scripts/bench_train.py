"""Benchmark: our ``distdgl`` strategy against DGL's own DistDGL, side by side in one run.

Both train the same GraphSAGE (our ``SAGE`` class, same seed) on the same dataset in 2 METIS
partitions (train/val/test and edges balanced) with 2 trainers and the same fanouts, batch
size, epochs and optimizer. Ours: ``dglx partition --method metis --parts 2``, then ``torchrun
--nproc-per-node 2 -m dglx_dist train --strategy distdgl`` with ``DGLX_VIRTUAL_SERVERS=2``.
DGL: ``dgl.distributed.partition_graph``, then per simulated machine one DGL server and one
trainer running DGL's example loop (``scripts/_dgl_distdgl_worker.py``; each machine gets a
private /dev/shm through ``unshare --mount``, see that module's docstring).

Partitioning is not in the epoch time. Per system: mean epoch time without the first epoch
(with ``--repeat N``: N runs per system, alternating ours/DGL, and the median of the runs'
means; this machine's speed drifts by 20-30% between runs), steps per epoch, test accuracy
(all test nodes, full neighborhoods), peak memory per trainer and our inter-server bytes per
epoch. ``--profile`` adds an instrumented run of ours to
compare phase by phase (sampling, KVStore pull, forward, backward, all-reduce, optimizer) with
the same phases timed in DGL's loop.

Usage::

    python scripts/bench_train.py --preset tiny           # Cora, quick
    python scripts/bench_train.py --preset small --repeat 3 --profile --out results.json
    python scripts/bench_train.py --data DIR --mode ours --epochs 3
    python scripts/bench_train.py --preset small --mode all --repeat 3  # + ours, glibc malloc

``--mode all`` adds a third system, ours with ``DGLX_MALLOC=system`` (glibc's default allocator
settings, as DGL's processes run), to show how much of the difference the allocator setting
of :mod:`dglx_dist.runtime.allocator` makes.

Prints one JSON object (rows, profile, checks) and markdown tables to stdout; progress goes
to stderr via ``logging``. The exit code is 0 unless a run crashed.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dglx_dist.report import markdown_table
from dglx_dist.runtime.env import free_local_port

log = logging.getLogger("bench_train")
WORKER = Path(__file__).resolve().parent / "_dgl_distdgl_worker.py"
PRESETS = {
    "tiny": {"data": "cora", "epochs": 30, "hidden": 16, "lr": 0.01},
    "small": {"synthetic": {"num_nodes": 200_000, "num_edges": 4_000_000, "feat_dim": 128,
                            "num_classes": 16}, "epochs": 5, "hidden": 64, "lr": 0.003},
}
COLUMNS = ("system", "epochs", "epoch_time", "epoch_time_first", "steps", "test_acc",
           "peak_mem_mb", "server_peak_mb", "bytes_sent_inter_per_epoch", "run_wall_s")
PHASES = ("sample", "pull", "forward", "backward+allreduce", "allreduce", "optimizer", "other")


def dataset_dir(args: argparse.Namespace, workdir: Path) -> Path:
    """``--data``, the preset's built-in dataset, or its synthetic one (generated, cached)."""
    from dglx_dist.prepare import resolve_dataset

    preset = PRESETS[args.preset]
    if args.data or "data" in preset:
        return resolve_dataset(args.data or preset["data"])
    from dglx_dist.data.synthetic import SyntheticConfig

    return synthetic_dataset(SyntheticConfig(**preset["synthetic"], seed=args.seed), workdir)


def synthetic_dataset(config, workdir: Path) -> Path:
    """The synthetic dataset of ``config`` in ``workdir`` (generated once, keyed by config)."""
    from dglx_dist.data.synthetic import write_synthetic

    key = hashlib.sha1(json.dumps(dataclasses.asdict(config), sort_keys=True).encode())
    path = workdir / f"synthetic-{key.hexdigest()[:12]}"
    if not (path / "meta.json").is_file():
        log.info("generating synthetic dataset %s: %s", path, config)
        write_synthetic(config, path, progress=True)
    return path


def data_key(data: Path) -> str:
    """A cache key for partitions of ``data`` (its files' sizes and modification times)."""
    h = hashlib.sha1(str(data.resolve()).encode())
    for name in ("meta.json", "edges.parquet", "nodes.parquet"):
        st = (data / name).stat()
        h.update(f"{name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return f"{data.name}-{h.hexdigest()[:12]}"


def nonnegative_features(data: Path) -> bool:
    """Whether every feature is >= 0 (then rows can be normalised by their sums)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    col = pq.read_table(data / "nodes.parquet", columns=["feat"]).column("feat")
    return pc.min(pc.list_flatten(col)).as_py() >= 0


def run_group(cmds: list[list[str]], env: dict[str, str], timeout: float,
              logs: list[Path | None]) -> tuple[list[subprocess.CompletedProcess], int]:
    """Runs commands concurrently, each in its own process group; kills the groups on timeout.

    Returns one CompletedProcess per command (stdout text where its log is None) and the
    number of processes found left over in those groups afterwards (and killed).
    """
    files = [open(lg, "w") if lg else None for lg in logs]
    procs = [subprocess.Popen(c, env=env, start_new_session=True, text=True,
                              stdout=f or subprocess.PIPE, stderr=f and subprocess.STDOUT)
             for c, f in zip(cmds, files)]
    deadline, outs = time.monotonic() + timeout, []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=max(deadline - time.monotonic(), 1))
            outs.append(subprocess.CompletedProcess(p.args, p.returncode, out or ""))
    except subprocess.TimeoutExpired:
        log.error("timed out after %.0fs; killing the process groups", timeout)
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        raise
    finally:
        left = reap_groups([p.pid for p in procs])
        for f in files:
            f and f.close()
    return outs, left


def reap_groups(pgids: list[int]) -> int:
    """Kills (and counts) the processes still left in the process groups we started."""
    import psutil

    left = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if os.getpgid(proc.pid) in pgids and proc.pid != os.getpid():
                left.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    for proc in left:
        log.warning("left-over process %d (%s); killing it", proc.pid,
                    " ".join(proc.info["cmdline"] or [])[:120])
        proc.kill()
    psutil.wait_procs(left, timeout=10)
    return len(left)


def hyper(args: argparse.Namespace, meta: dict[str, Any], row_norm: bool) -> list[str]:
    """The shared hyper-parameters as worker options."""
    return ["--epochs", str(args.epochs), "--hidden", str(args.hidden), "--lr", str(args.lr),
            "--dropout", str(args.dropout), "--weight-decay", str(args.weight_decay),
            "--seed", str(args.seed), "--batch-size", str(args.batch_size),
            "--fanouts", args.fanouts, "--num-classes", str(meta["num_classes"])] + (
        ["--row-normalize"] if row_norm else []) + (  # bench.py's options
        ["--model", args.model] if getattr(args, "model", None) else []) + (
        ["--eval-val"] if getattr(args, "eval_val", False) else [])


def partitions(kind: str, data: Path, workdir: Path, env: dict[str, str]) -> Path:
    """Our (``dglx partition --method metis --parts 2``) or DGL's (``partition_graph`` with
    METIS and the same balance constraints) partitions of ``data``, cached in ``workdir``."""
    out = workdir / f"{kind}-parts-{data_key(data)}"
    done = out / ("partition.json" if kind == "ours" else "bench_partition_done.json")
    if not done.is_file():
        log.info("%s: partitioning %s -> %s", kind, data, out)
        cmd = ([sys.executable, "-m", "dglx_dist", "partition", str(data), str(out), "--method",
                "metis", "--parts", "2", "--overwrite"] if kind == "ours" else
               [sys.executable, str(WORKER), "partition", "--data", str(data), "--out", str(out)])
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return out if kind == "ours" else out / "bench.json"


def run_ours(args, data: Path, meta: dict[str, Any], row_norm: bool, workdir: Path,
             env: dict[str, str], profile: bool = False,
             system: str = "ours (dglx distdgl)") -> dict[str, Any]:
    """Our distdgl under torchrun (or, with ``profile``, the instrumented loop)."""
    parts = partitions("ours", data, workdir, env)
    run = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-port", str(free_local_port())]
    if profile:
        cmd = run + [str(WORKER), "ours-profile", "--partitions", str(parts)] + hyper(
            args, meta, row_norm) + (["--cprofile", str(workdir / "ours.pstats")]
                                     if args.cprofile else [])
    else:
        cmd = run + ["-m", "dglx_dist", "train", "--strategy", "distdgl", "--data", str(data),
                     "--partitions", str(parts), "--epochs", str(args.epochs), "--eval-every",
                     str(args.epochs), "--strategy-opt", f"fanouts={args.fanouts}",
                     "--strategy-opt", f"batch_size={args.batch_size}", "--hidden",
                     str(args.hidden), "--lr", str(args.lr), "--dropout", str(args.dropout),
                     "--weight-decay", str(args.weight_decay), "--seed", str(args.seed),
                     "--cache-dir", str(workdir / "cache"), "--no-progress"] + (
            ["--row-normalize"] if row_norm else []) + [
            a for opt in args.ours_opt for a in ("--strategy-opt", opt)]
    log.info("ours: %s", " ".join(cmd))
    t0 = time.perf_counter()
    (proc,), left = run_group([cmd], env, args.timeout, [None])
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"our run failed with exit code {proc.returncode} (log above)")
    records = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if profile:
        return records[-1]
    return summarize(system, records, wall, test_acc=records[-1]["test_acc"],
                     peak=max(r["peak_mem_mb"] for r in records)) | {"leftover_procs": left}


def shm_wrapper() -> list[str]:
    """The ``unshare`` prefix giving a command a private /dev/shm (root, else a user ns)."""
    mount = ["sh", "-c", 'mount -t tmpfs tmpfs /dev/shm && exec "$@"', "sh"]
    for flags in (["--mount"], ["--user", "--map-root-user", "--mount"]):
        cmd = ["unshare", *flags, "--propagation", "private"] + mount
        if subprocess.run(cmd + ["true"], capture_output=True).returncode == 0:
            return cmd
    raise RuntimeError("cannot give each simulated machine its own /dev/shm: `unshare --mount` "
                       "and `unshare --user --mount` both failed; DGL servers on one host "
                       "would share (and overwrite) each other's shared-memory tensors")


def run_dgl(args, data: Path, meta: dict[str, Any], row_norm: bool, workdir: Path,
            env: dict[str, str]) -> dict[str, Any]:
    """DGL's DistDGL: 2 simulated machines, each one server + one trainer."""
    part_config = partitions("dgl", data, workdir, env)
    run_dir = workdir / "dgl-run"
    run_dir.mkdir(parents=True, exist_ok=True)
    for f in run_dir.glob("*.json"):
        f.unlink()
    ip_config = run_dir / "ip_config.txt"
    ip_config.write_text("".join(f"127.0.0.1 {free_local_port()}\n" for _ in range(2)))
    common = ["--machines", "2", "--ip-config", str(ip_config), "--part-config",
              str(part_config), "--result-dir", str(run_dir),
              "--master-port", str(free_local_port()),
              "--timeout", str(args.timeout)] + hyper(args, meta, row_norm)
    cmds = [shm_wrapper() + [sys.executable, str(WORKER), "machine", "--machine", str(m)]
            + common for m in range(2)]
    logs = [run_dir / f"machine{m}.log" for m in range(2)]
    log.info("dgl: %s", " ".join(cmds[0]))
    t0 = time.perf_counter()
    procs, left = run_group(cmds, env, args.timeout + 120, logs)
    wall = time.perf_counter() - t0
    if any(p.returncode for p in procs) or not (run_dir / "trainer.json").is_file():
        tails = {str(lg): lg.read_text().splitlines()[-15:] for lg in logs}
        raise RuntimeError(f"DGL run failed (exit codes {[p.returncode for p in procs]}); "
                           f"log tails: {json.dumps(tails, indent=1)}")
    res = json.loads((run_dir / "trainer.json").read_text())
    servers = [json.loads((run_dir / f"server{m}.json").read_text())["peak_mb"]
               for m in range(2) if (run_dir / f"server{m}.json").is_file()]
    row = summarize("DGL DistDGL 2.1", res["records"], wall, test_acc=res["test_acc"],
                    peak=max(res["peak_mem_mb_train"]))
    row.update(server_peak_mb=max(servers) if servers else None, test_nodes=res["test_nodes"],
               peak_mem_mb_after_eval=max(res["peak_mem_mb_end"]), leftover_procs=left)
    row["phases"] = mean_phases([r["phases_max"] for r in res["records"][1:]])
    return row


def mean_phases(per_epoch: list[dict[str, float]]) -> dict[str, float]:
    """Phase seconds per epoch, averaged over the given epochs."""
    keys = sorted({k for p in per_epoch for k in p})
    return {k: round(sum(p.get(k, 0.0) for p in per_epoch) / max(len(per_epoch), 1), 4)
            for k in keys}


def summarize(system: str, records: list[dict[str, Any]], wall: float, test_acc: float,
              peak: float) -> dict[str, Any]:
    """One table row from per-epoch records (the first epoch is warm-up)."""
    timed = records[1:] or records
    row = {"system": system, "epochs": len(records),
           "epoch_time": round(sum(r["epoch_time"] for r in timed) / len(timed), 4),
           "epoch_time_first": records[0]["epoch_time"], "steps": records[-1]["steps"],
           "test_acc": test_acc, "peak_mem_mb": peak, "run_wall_s": round(wall, 1),
           "epoch_times": [r["epoch_time"] for r in records], "loss": records[-1].get("loss")}
    if any("val_acc" in r for r in records):
        row["val_accs"] = [r.get("val_acc") for r in records]
    if "bytes_sent_inter" in records[-1]:
        row["bytes_sent_inter_per_epoch"] = int(sum(r["bytes_sent_inter"] for r in timed)
                                                / len(timed))
    return row


def combine_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row per system over repeated runs: the median run's epoch time (a failed run makes
    the row an error); the other columns come from the first run."""
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    row = dict(runs[0])
    if len(runs) > 1:
        times = [r["epoch_time"] for r in runs]
        row["epoch_time"] = statistics.median(times)
        row["epoch_time_runs"] = times
    return row


def checks(rows: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The ratio checks: PASS / FAIL, or n/a when a side did not run."""
    ours, dgl = rows.get("ours", {"error": "-"}), rows.get("dgl", {"error": "-"})
    ran = "error" not in ours and "error" not in dgl
    items = (("ours_epoch_time / dgl_epoch_time", "<= 1.0", lambda v: v <= 1.0,
              lambda: round(ours["epoch_time"] / dgl["epoch_time"], 3)),
             ("|ours_acc - dgl_acc|", "<= 0.01", lambda v: v <= 0.01,
              lambda: round(abs(ours["test_acc"] - dgl["test_acc"]), 4)),
             ("steps per epoch: ours - dgl", "== 0", lambda v: v == 0,
              lambda: ours["steps"] - dgl["steps"]))
    other = rows.get("ours_system_malloc", {"error": "-"})
    if "error" not in other and "error" not in dgl:  # for information: the allocator's share
        items += (("ours (DGLX_MALLOC=system) / dgl epoch time", "(info)", None,
                   lambda: round(other["epoch_time"] / dgl["epoch_time"], 3)),)
    out = []
    for name, target, passes, value in items:
        v = value() if ran else None
        out.append({"check": name, "value": v, "target": target,
                    "status": "n/a" if v is None else "info" if passes is None else
                    ("PASS" if passes(v) else "FAIL")})
    return out


def bench(args: argparse.Namespace, workdir: Path) -> tuple[dict[str, Any], bool]:
    """Runs the selected systems one after the other; returns the result and whether all ran."""
    data = dataset_dir(args, workdir)
    meta = json.loads((data / "meta.json").read_text())
    row_norm = (nonnegative_features(data) if args.row_normalize == "auto"
                else args.row_normalize == "on")
    log.info("dataset %s: %d nodes, %d edges, feat %d, %d classes; row-normalise: %s", data,
             meta["num_nodes"], meta["num_edges"], meta["feat_dim"], meta["num_classes"],
             row_norm)
    env = {**os.environ, "DGLX_VIRTUAL_SERVERS": "2", "OMP_NUM_THREADS": "1",
           "GLOO_SOCKET_IFNAME": "lo"}
    runs: dict[str, list[dict[str, Any]]] = {}
    runners = {"ours": lambda: run_ours(args, data, meta, row_norm, workdir, env),
               "ours_system_malloc": lambda: run_ours(
                   args, data, meta, row_norm, workdir, {**env, "DGLX_MALLOC": "system"},
                   system="ours, DGLX_MALLOC=system"),
               "dgl": lambda: run_dgl(args, data, meta, row_norm, workdir, env)}
    order = {"both": ["ours", "dgl"], "all": ["ours", "ours_system_malloc", "dgl"]}
    for rep in range(args.repeat):  # alternating, so slow spells of the machine hit both
        for name in order.get(args.mode, [args.mode]):
            try:
                row = runners[name]()
                log.info("%s (run %d): %s", name, rep + 1, {k: row.get(k) for k in COLUMNS})
            except Exception as exc:  # reported in the output, and the exit code says so
                log.error("%s failed: %s", name, exc)
                row = {"system": name, "error": f"{type(exc).__name__}: {exc}"}
            runs.setdefault(name, []).append(row)
    rows = {name: combine_runs(rs) for name, rs in runs.items()}
    result = {"dataset": {"path": str(data), **{k: meta[k] for k in (
        "num_nodes", "num_edges", "feat_dim", "num_classes")}}, "parts": 2, "trainers": 2,
        "hyper": {k: getattr(args, k) for k in ("epochs", "hidden", "lr", "dropout",
                                                 "weight_decay", "batch_size", "fanouts",
                                                 "seed")} | {"row_normalize": row_norm},
        "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
        "rows": list(rows.values()), "checks": checks(rows)}
    if args.profile and "ours" in rows and "error" not in rows["ours"]:
        prof = run_ours(args, data, meta, row_norm, workdir, env, profile=True)
        result["profile"] = profile_rows(prof, rows.get("dgl", {}))
        result["cprofile_top"] = prof.get("cprofile_top")
    return result, all("error" not in r for r in rows.values())


def profile_rows(ours: dict[str, Any], dgl: dict[str, Any]) -> list[dict[str, Any]]:
    """Per epoch (max over trainers, mean over epochs after the first): phase seconds, rows."""
    ours_ph, dgl_ph = ({**r.get("phases", {}), "epoch": r.get("epoch_time")} for r in (ours, dgl))
    dgl_ph.setdefault("allreduce", "(inside backward)")
    return [{"phase": k, "ours": ours_ph.get(k), "dgl": dgl_ph.get(k)}
            for k in PHASES + ("epoch", "input_rows")]


def report(result: dict[str, Any]) -> str:
    """The markdown tables of a result."""
    text = markdown_table(result["rows"], COLUMNS) + "\n\n" + markdown_table(
        result["checks"], ("check", "value", "target", "status"))
    errors = [f"- {r['system']}: {r['error']}" for r in result["rows"] if "error" in r]
    if errors:
        text += "\n\nfailed:\n" + "\n".join(errors)
    if result.get("profile"):
        text += ("\n\nseconds per epoch by phase (max over trainers; ours: instrumented run); "
                 "input_rows: feature rows pulled per epoch:\n\n")
        text += markdown_table(result["profile"])
    return text


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; preset values fill whatever was not given."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), default="small",
                   help="tiny: Cora; small: synthetic 200k nodes / 4M edges / feat 128")
    p.add_argument("--data", help="a dataset directory or built-in name (overrides the preset's)")
    p.add_argument("--mode", choices=("ours", "dgl", "both", "all"), default="both",
                   help="all: also ours with glibc's default allocator (DGLX_MALLOC=system)")
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per system, alternating; epoch_time is the median run's")
    p.add_argument("--ours-opt", action="append", default=[], metavar="KEY=VALUE",
                   help="extra distdgl option for our run (repeatable), e.g. fanouts=5,10")
    p.add_argument("--epochs", type=int, help="epochs (default: preset; tiny 30, small 5)")
    p.add_argument("--hidden", type=int, help="hidden width (default: preset; tiny 16, small 64)")
    p.add_argument("--lr", type=float, help="Adam learning rate (default: preset)")
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--batch-size", type=int, default=1000, help="seeds per trainer per step")
    p.add_argument("--fanouts", default="10,25", help="per layer, input layer first")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--row-normalize", choices=("auto", "on", "off"), default="auto",
                   help="divide input rows by their sums (auto: if no feature is negative)")
    p.add_argument("--workdir", default="bench_out/train", help="datasets, partitions, logs")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per training run")
    p.add_argument("--profile", action="store_true", help="also time our trainer's phases")
    p.add_argument("--cprofile", action="store_true",
                   help="with --profile: cProfile rank 0 too (inflates those phase times)")
    p.add_argument("--out", help="also write the JSON result to this file")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    args = p.parse_args(argv)
    for key in ("epochs", "hidden", "lr"):
        if getattr(args, key) is None:
            setattr(args, key, PRESETS[args.preset][key])
    if args.epochs < 2:
        p.error("--epochs must be >= 2 (the first epoch is warm-up and not averaged)")
    return args


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; returns the exit code."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    result, ok = bench(args, workdir)
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text, report(result), sep="\n\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
