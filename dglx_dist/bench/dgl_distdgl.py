"""DGL's own DistDGL, run on one host: partitions (DGL's, and ours made the same way) and a
job of 2 simulated machines, each one DGL server and one trainer in its own mount namespace
(:mod:`dglx_dist.bench.dgl_distdgl_worker`, started as ``python -m``; its docstring says why
each machine needs a private /dev/shm); the result row (:func:`summarize_run`).
"""
from __future__ import annotations

import contextlib
import json
import logging
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dglx_dist.bench.datasets import data_key
from dglx_dist.bench.procs import run_group
from dglx_dist.bench.shared import Setup
from dglx_dist.cli_flags import to_argv
from dglx_dist.config import TRAINING
from dglx_dist.errors import NotSupportedError, RunFailedError
from dglx_dist.runtime.env import free_local_port

__all__ = ["MACHINES", "WORKER", "dgl_layout", "epoch_bytes", "hyper",
           "mean_phases", "partitions", "run_dgl", "sent_bytes", "shm_wrapper",
           "summarize_run", "timed_epoch"]

log = logging.getLogger("dglx_dist.bench")
# not imported: ``python -m`` of a module the package has already imported warns (runpy)
WORKER = [sys.executable, "-m", "dglx_dist.bench.dgl_distdgl_worker"]
"""The worker's command line (subcommand and options follow)."""
MACHINES = 2
"""Simulated machines, each one DGL server and its trainers."""


def dgl_layout(setup: Setup) -> tuple[int, int]:
    """DGL's trainers per machine and seeds (link: training edges) per trainer per step: as
    many trainers as the setup has ranks, each with the setup's batch, as DGL's launch.py
    ``--num_trainers`` runs one trainer per GPU of a machine; where the ranks do not divide
    over the machines, one trainer each with the global batch's share."""
    if setup.world % MACHINES == 0:
        return setup.world // MACHINES, setup.batch_size
    return 1, setup.batch_size * setup.world // MACHINES


def hyper(setup: Setup) -> list[str]:
    """The setup's run config (its :data:`~dglx_dist.config.TRAINING` sections), batch and
    fanouts as worker options (validation accuracy after every epoch where the setup
    evaluates every epoch: ``--eval-every 1``)."""
    trainers, batch = dgl_layout(setup)
    return [*to_argv(setup.training(), sections=TRAINING), "--trainers", str(trainers),
            "--batch-size", str(batch), "--fanouts", ",".join(map(str, setup.fanouts)),
            "--num-classes", str(setup.num_classes)] + (
        ["--eval-fanouts", ",".join(map(str, setup.eval_fanouts))] if setup.eval_fanouts
        else [])


def sent_bytes(ifname: str) -> int | None:
    """(In a DGL machine's process) what the machine, its server and trainer, has sent to the
    others so far: interface ``ifname``'s counter in its network namespace; None on loopback,
    which carries the machine's traffic with itself too."""
    from dglx_dist.cluster.emulate import tx_bytes

    return None if ifname == "lo" else tx_bytes(ifname)


def epoch_bytes(ifname: str, before: int | None, reduce, counts: bool = True) -> dict[str, int]:
    """``bytes_sent_inter``: every machine's bytes sent since its ``before`` (:func:`sent_bytes`;
    collective through ``reduce(values, op)``), summed as ``dglx train`` sums its ranks'; and
    ``bytes_sent_inter_busiest``, the most one machine sent; empty where not counted. Of a
    machine's trainers, which read the same counter, only the one that ``counts`` adds it."""
    import torch.distributed as dist

    if before is None:
        return {}
    sent = sent_bytes(ifname) - before if counts else 0
    return {"bytes_sent_inter": int(reduce([sent], dist.ReduceOp.SUM)[0]),
            "bytes_sent_inter_busiest": int(reduce([sent], dist.ReduceOp.MAX)[0])}


def timed_epoch(args, reduce, epoch: int, run) -> dict[str, Any]:
    """(In a DGL trainer) epoch ``epoch``'s record of ``run()`` (wall time, steps, mean loss,
    phase seconds), collective through ``reduce(values, op)``: its start, time, steps and
    phases the largest over trainers, the loss their mean, and :func:`epoch_bytes` (counted
    by each machine's first trainer)."""
    import torch.distributed as dist

    sent, started = sent_bytes(args.ifname), time.time()
    wall, steps, loss, phases = run()
    names = sorted(phases)
    maxes = reduce([wall, steps, -started] + [phases[k] for k in names], dist.ReduceOp.MAX)
    return {"epoch": epoch, "started_at": round(-maxes[2], 3), "epoch_time": round(maxes[0], 4),
            "steps": int(maxes[1]),
            "loss": round(reduce([loss], dist.ReduceOp.SUM)[0] / dist.get_world_size(), 5),
            "phases_max": {k: round(v, 4) for k, v in zip(names, maxes[3:])},
            **epoch_bytes(args.ifname, sent, reduce, counts=args.local == 0)}


def partitions(kind: str, data: Path, workdir: Path, env: dict[str, str],
               link_seed: int | None = None) -> Path:
    """Our (``dglx partition --method metis --parts 2``) or DGL's (``partition_graph`` with
    METIS and the same balance constraints) partitions of ``data``, cached in ``workdir``;
    with ``link_seed``, DGL's partitions of the link task's training graph split off ``data``
    with that seed (:mod:`dglx_dist.bench.dgl_distdgl_link`)."""
    task = "" if link_seed is None else f"link{link_seed}-"
    out = workdir / f"{kind}-{task}parts-{data_key(data)}"
    done = out / ("partition.json" if kind == "ours" else "bench_partition_done.json")
    if not done.is_file():
        log.info("%s: partitioning %s -> %s", kind, data, out)
        link = [] if link_seed is None else ["--task", "link", "--seed", str(link_seed)]
        cmd = ([sys.executable, "-m", "dglx_dist", "partition", str(data), str(out), "--method",
                "metis", "--parts", "2", "--overwrite"] if kind == "ours" else
               WORKER + ["partition", "--data", str(data), "--out", str(out)] + link)
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return out if kind == "ours" else out / "bench.json"


def shm_wrapper() -> list[str]:
    """The ``unshare`` prefix giving a command a private /dev/shm (root, else a user ns)."""
    mount = ["sh", "-c", 'mount -t tmpfs tmpfs /dev/shm && exec "$@"', "sh"]
    for flags in (["--mount"], ["--user", "--map-root-user", "--mount"]):
        cmd = ["unshare", *flags, "--propagation", "private"] + mount
        if subprocess.run(cmd + ["true"], capture_output=True).returncode == 0:
            return cmd
    raise NotSupportedError("cannot give each simulated machine its own /dev/shm: `unshare "
                            "--mount` and `unshare --user --mount` both failed; DGL servers "
                            "on one host would share (and overwrite) each other's "
                            "shared-memory tensors")


def _run_machines(setup: Setup, part_config: Path, run_dir: Path, env: dict[str, str],
                  logs: list[Path]) -> tuple[list[subprocess.CompletedProcess], int]:
    """The machines on loopback, or each in its server's namespace of an emulated cluster
    (``setup.network`` ``emulated-<preset>``, the link our strategies get): one ``machine``
    command each, its trainers' gloo on the cluster's interface."""
    from dglx_dist.cluster.emulate import IFNAME, PRESETS, emulated

    link = setup.network.removeprefix("emulated-")
    with (emulated(MACHINES, PRESETS[link]) if link in PRESETS
          else contextlib.nullcontext()) as cluster:
        addresses, ifname = ((cluster.addresses, IFNAME) if cluster
                             else (["127.0.0.1"] * MACHINES, "lo"))
        ip_config = run_dir / "ip_config.txt"
        ip_config.write_text("".join(f"{a} {free_local_port()}\n" for a in addresses))
        common = ["--machines", str(MACHINES), "--ip-config", str(ip_config), "--part-config",
                  str(part_config), "--result-dir", str(run_dir), "--master-addr", addresses[0],
                  "--master-port", str(free_local_port()), "--ifname", ifname,
                  "--timeout", str(setup.timeout)] + hyper(setup)
        cmds = [shm_wrapper() + WORKER + ["machine", "--machine", str(m)] + common
                for m in range(MACHINES)]  # each machine with its own /dev/shm
        if cluster:
            cmds = [cluster.command(m, cmd) for m, cmd in enumerate(cmds)]
        log.info("dgl: %s", " ".join(cmds[0]))
        return run_group(cmds, env, setup.timeout + 120, logs)


def run_dgl(setup: Setup, env: dict[str, str]) -> dict[str, Any]:
    """DGL's DistDGL on the setup's data, training config, batch, fanouts and network: 2
    simulated machines, each one server and :func:`dgl_layout`'s trainers, with environment
    ``env``."""
    link = setup.run.task.name == "link"
    part_config = partitions("dgl", setup.data, setup.workdir, env,
                             setup.run.loop.seed if link else None)
    run_dir = setup.workdir / "dgl-run"
    run_dir.mkdir(parents=True, exist_ok=True)
    logs = [run_dir / f"machine{m}.log" for m in range(MACHINES)]
    for attempt in (1, 2):
        for f in run_dir.glob("*.json"):
            f.unlink()
        t0, launched = time.perf_counter(), time.time()
        procs, left = _run_machines(setup, part_config, run_dir, env, logs)
        wall = time.perf_counter() - t0
        failed = any(p.returncode for p in procs) or not (run_dir / "trainer.json").is_file()
        # DGL's own trainer now and then hangs in its RPC (no step after connecting; the link
        # test's DGL row, twice in two sessions' runs): run it once more, and say so in the row
        if not (failed and attempt == 1 and
                any("still running after" in lg.read_text() for lg in logs)):
            break
        log.warning("dgl: a DGL trainer hung (DGL's RPC); running DGL's DistDGL once more")
    if failed:
        tails = {str(lg): lg.read_text().splitlines()[-15:] for lg in logs}
        raise RunFailedError(f"DGL run failed (exit codes {[p.returncode for p in procs]}); "
                             f"log tails: {json.dumps(tails, indent=1)}")
    res = json.loads((run_dir / "trainer.json").read_text())
    servers = [json.loads((run_dir / f"server{m}.json").read_text())["peak_mb"]
               for m in range(MACHINES) if (run_dir / f"server{m}.json").is_file()]
    hung = [m for m, lg in enumerate(logs) if "stuck in DGL's shutdown" in lg.read_text()]
    how = {"server_peak_mb": max(servers, default=None), "leftover_procs": left,
           "shutdown_killed": hung or None,  # the results are complete; the row says so
           "hung_runs": attempt - 1}
    if link:  # the records as they are (dglx train's fields), for the harness to summarise
        return {"records": res["records"], "test": res["test"],
                "peak_mem_mb": max(res["peak_mem_mb_train"])} | how
    row = summarize_run("DGL DistDGL 2.1", res["records"], wall, test_acc=res["test_acc"],
                        peak=max(res["peak_mem_mb_train"]))
    return row | how | {"test_nodes": res["test_nodes"],
                        "peak_mem_mb_after_eval": max(res["peak_mem_mb_end"]),
                        "phases": mean_phases([r["phases_max"] for r in res["records"][1:]])
                        } | startup(res["records"], launched)


def startup(records: list[dict[str, Any]], launched: float) -> dict[str, Any]:
    """``startup_s``: seconds from a run's launch (``time.time()`` just before it) to the
    start of its first epoch's training (the first record's ``started_at``); nothing
    without one."""
    first = next((r for r in records if "started_at" in r), None)
    return {} if first is None else {"startup_s": round(first["started_at"] - launched, 2)}


def mean_phases(per_epoch: list[dict[str, float]]) -> dict[str, float]:
    """Phase seconds per epoch, averaged over the given epochs."""
    keys = sorted({k for p in per_epoch for k in p})
    return {k: round(sum(p.get(k, 0.0) for p in per_epoch) / max(len(per_epoch), 1), 4)
            for k in keys}


def summarize_run(system: str, records: list[dict[str, Any]], wall: float, test_acc: float,
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
    if "cache_hit_rate" in records[-1]:  # ours with the remote-row cache
        row["cache_hit_rate"] = round(statistics.mean(
            r.get("cache_hit_rate", 0.0) for r in timed), 4)
    for key in ("bytes_sent_inter", "bytes_sent_inter_busiest"):
        if key in records[-1]:
            row[f"{key}_per_epoch"] = int(sum(r[key] for r in timed) / len(timed))
    return row
