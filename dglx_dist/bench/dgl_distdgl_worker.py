"""DGL's own DistDGL, launched by hand on one host (the worker of
:mod:`dglx_dist.bench.dgl_distdgl`, run as ``python -m dglx_dist.bench.dgl_distdgl_worker``).

DGL 2.1 ships no launcher in the wheel (``tools/launch.py`` lives in its source tree), so this
module does what that launcher does: one graph server and ``--trainers`` trainers per "machine"
(launch.py's ``--num_trainers``), with the
``DGL_*`` environment variables ``dgl.distributed.initialize`` reads (``dist_context.py``), and
the trainers wired into ``torch.distributed`` (gloo) through ``MASTER_ADDR``/``RANK``/...

Two machines on one host need two things DGL does not do by itself:

* **A private /dev/shm per machine.** A DGL server puts its partition's graph and KVStore
  tensors in POSIX shared memory under names that do not include the partition id
  (``<graph_name>``, ``node~_N~feat-kvdata-``); two servers on one host would open the same
  segments and overwrite each other's features. The launcher (``dgl_distdgl.run_dgl``) runs each
  ``machine`` command under ``unshare --mount`` with a fresh tmpfs on /dev/shm, so each
  machine's server and trainer share memory with each other only, as on a real cluster.
* **The machine id.** A client finds its machine by matching the ip_config addresses against
  its interfaces (``rpc_client.get_local_machine_id``); with every machine at 127.0.0.1 all
  trainers would say machine 0. The trainer replaces that lookup by its ``--machine`` number.

A trainer's rank is the one DGL gives it (``DistGraph.rank()``: a machine's trainers
contiguous, in the order they connected), and its process group takes that rank, so that
``node_split`` and ``edge_split`` (which use DGL's) and torch agree.

Subcommands: ``partition`` (METIS), ``machine`` (one server + its trainers, in the caller's
namespace), ``server`` and ``trainer`` (started by ``machine``; its loops:
:mod:`~dglx_dist.bench.dgl_distdgl_nodes`, :mod:`~dglx_dist.bench.dgl_distdgl_link`).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from dglx_dist.cli_flags import add_flags, tuple_of
from dglx_dist.config import TRAINING, RunConfig
from dglx_dist.errors import InternalError
from dglx_dist.memory import peak_rss_bytes

__all__ = ["PHASES", "main"]

log = logging.getLogger("dglx_dist.bench")
MODULE = "dglx_dist.bench.dgl_distdgl_worker"
GRAPH_NAME = "bench"
SHUTDOWN_GRACE_S = 20
"""Seconds a trainer that finished may take in DGL's shutdown before it is killed."""
PHASES = ("sample", "pull", "forward", "backward+allreduce", "allreduce", "optimizer", "other")


def status_mb() -> float:
    """This process's peak resident memory (``VmHWM``) in MiB."""
    return peak_rss_bytes() / 2**20


def partition_main(args: argparse.Namespace) -> None:
    """Partitions a dataset directory the way DGL's DistDGL examples do: METIS, balancing the
    edges, each node type and, within the labeled type, each split (the constraints our
    ``metis`` balances; without types, the one type ``_N``'s splits)."""
    import dgl
    import torch

    from dglx_dist.data import read_dataset, to_dgl

    t0 = time.perf_counter()
    if args.task == "link":
        from dglx_dist.bench.dgl_distdgl_link import partition_link

        partition_link(args, GRAPH_NAME)
        return _partitioned(args, t0)
    ds = read_dataset(args.data)
    category = ds.category or "_N"  # the labeled type: without types, the one type
    labeled = ds.nodes[category]
    split = np.zeros(labeled.num_nodes, dtype=np.int64)
    for i, mask in enumerate(labeled.masks().values(), start=1):  # train, val, test: the
        split[mask & (split == 0)] = i  # constraints our metis balances, in one vector
    # each node type, and within the labeled type each split (DGL takes one type's alone)
    balance = {category: torch.from_numpy(np.unique(split, return_inverse=True)[1])}
    dgl.distributed.partition_graph(to_dgl(ds), GRAPH_NAME, args.parts, args.out,
                                    part_method="metis", balance_ntypes=balance,
                                    balance_edges=True)
    _partitioned(args, t0)


def _partitioned(args: argparse.Namespace, t0: float) -> None:
    meta = {"seconds": round(time.perf_counter() - t0, 2), "peak_mb": round(status_mb(), 1)}
    Path(args.out, "bench_partition_done.json").write_text(json.dumps(meta))


def _dgl_env(args: argparse.Namespace) -> dict[str, str]:
    """The variables DGL's launch.py gives both servers and trainers."""
    return {**os.environ, "DGL_NUM_SAMPLER": "0", "OMP_NUM_THREADS": str(args.threads),
            "DGL_NUM_CLIENT": str(args.machines * args.trainers),
            "DGL_CONF_PATH": args.part_config,
            "DGL_IP_CONFIG": args.ip_config, "DGL_NUM_SERVER": "1",
            "DGL_GRAPH_FORMAT": "csc", "GLOO_SOCKET_IFNAME": args.ifname}


def machine_main(args: argparse.Namespace, options: list[str]) -> int:
    """One machine: its server (partition ``--machine``) and its ``--trainers`` trainers;
    waits for them all.

    Args:
        args: the parsed options.
        options: the command line after ``machine``, handed on to the server and the trainers
            (each with its ``--local`` index on the machine).
    """
    me = [sys.executable, "-m", MODULE]
    server_env = {**_dgl_env(args), "DGL_ROLE": "server", "DGL_SERVER_ID": str(args.machine)}
    trainer_env = {**_dgl_env(args), "DGL_ROLE": "client", "DGL_DIST_MODE": "distributed",
                   "DGL_GROUP_ID": "0", "MASTER_ADDR": args.master_addr,
                   "MASTER_PORT": str(args.master_port)}
    server = subprocess.Popen(me + ["server"] + options, env=server_env)
    trainers = [subprocess.Popen(me + ["trainer"] + options + ["--local", str(i)],
                                 env=trainer_env | {"LOCAL_RANK": str(i)})
                for i in range(args.trainers)]
    rc, hung = _wait_trainers(args, trainers)
    try:  # the servers leave once the last client has said goodbye
        server.wait(timeout=5 if rc or hung else 60)
    except subprocess.TimeoutExpired:
        log.warning("machine %d: server did not exit; killing", args.machine)
        server.kill()
        server.wait()
    return rc or (0 if hung else server.returncode)


def _wait_trainers(args: argparse.Namespace,
                   trainers: list[subprocess.Popen]) -> tuple[int, bool]:
    """The first non-zero exit code of the machine's trainers (else 0), and whether one was
    killed after its training was done: DGL's ``exit_client`` at interpreter exit now and then
    never returns (seen once in this project's test runs, both machines' trainers after the
    link loop had written its results), nor does gloo's teardown (:func:`_finish`), so a
    trainer that marked itself done gets ``SHUTDOWN_GRACE_S`` to exit; one still running at
    ``--timeout`` is killed as failed."""
    deadline, done_at = time.monotonic() + args.timeout, {}
    codes, hung = {}, False
    while len(codes) < len(trainers):
        now = time.monotonic()
        for i, trainer in enumerate(trainers):
            if i in codes or trainer.poll() is not None:
                codes.setdefault(i, trainer.returncode)
                continue
            if i not in done_at and _done_marker(args, i).exists():
                done_at[i] = now
            if i in done_at and now - done_at[i] > SHUTDOWN_GRACE_S:
                log.warning("machine %d: trainer %d done but stuck in DGL's shutdown for %ss; "
                            "killing it (its results are complete)", args.machine, i,
                            SHUTDOWN_GRACE_S)
                trainer.kill()
                trainer.wait()
                codes[i], hung = 0, True
            elif now > deadline:
                log.warning("machine %d: trainer %d still running after %ss; killing",
                            args.machine, i, args.timeout)
                trainer.kill()
                codes[i] = trainer.wait()
        time.sleep(0.2)
    return next((c for c in codes.values() if c), 0), hung


def server_main(args: argparse.Namespace) -> None:
    """A DGL graph server: ``initialize`` serves until the clients shut it down, then exits."""
    import dgl

    with contextlib.suppress(SystemExit):
        dgl.distributed.initialize(args.ip_config)
    Path(args.result_dir, f"server{args.machine}.json").write_text(
        json.dumps({"peak_mb": round(status_mb(), 1)}))


def _setup(args: argparse.Namespace):
    """Initialises DGL and torch.distributed; returns the graph."""
    import dgl
    import torch.distributed as dist
    from dgl.distributed import rpc_client

    # every "machine" is 127.0.0.1 here, so tell DGL's client which one it is on
    rpc_client.get_local_machine_id = lambda _namebook: args.machine
    dgl.distributed.initialize(args.ip_config)
    g = dgl.distributed.DistGraph(GRAPH_NAME, part_config=args.part_config)
    first = args.machine * args.trainers  # DGL ranks a machine's trainers contiguously
    if (not first <= g.rank() < first + args.trainers
            or g.get_partition_book().partid != args.machine):
        raise InternalError(f"machine {args.machine}: DGL trainer rank {g.rank()}, partition "
                            f"{g.get_partition_book().partid}")
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.pg_timeout),
                            rank=g.rank(), world_size=args.machines * args.trainers)
    return g


def _reduce(values: list[float], op) -> list[float]:
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=op)
    return t.tolist()


def trainer_main(args: argparse.Namespace) -> None:
    """DGL's DistDGL training loop of ``--task``: node classification
    (:func:`dglx_dist.bench.dgl_distdgl_nodes.train_nodes` of our reference model, or of the
    R-GCN on a typed graph) or link prediction
    (:func:`dglx_dist.bench.dgl_distdgl_link.train_link_dgl`); rank 0 writes its result with
    every trainer's peak memory (MiB; the node task's after training and at the end)."""
    import torch
    import torch.distributed as dist

    from dglx_dist.bench.dgl_distdgl_link import train_link_dgl
    from dglx_dist.bench.dgl_distdgl_nodes import MASKS, node_job, train_nodes

    torch.set_num_threads(args.threads)
    g = _setup(args)
    if args.task == "link":
        out, peaks = train_link_dgl(args, g, _reduce), {"peak_mem_mb_train": status_mb()}
    else:
        out, peak_train = train_nodes(args, g, node_job(args, g, MASKS), _reduce)
        peaks = {"peak_mem_mb_train": peak_train, "peak_mem_mb_end": status_mb()}
    n, rank = len(peaks), dist.get_rank()  # each trainer's peaks at its place, summed
    every = [0.0] * (n * dist.get_world_size())
    every[n * rank:n * (rank + 1)] = peaks.values()
    every = _reduce(every, dist.ReduceOp.SUM)
    out |= {k: [round(p, 1) for p in every[i::n]] for i, k in enumerate(peaks)}
    _finish(args, out if dist.get_rank() == 0 else None)


def _finish(args: argparse.Namespace, out: dict[str, Any] | None) -> None:
    """Writes the result (rank 0's ``out``), marks this machine's training done
    (``done<machine>.json``) for :func:`machine_main` once every trainer has its results, and
    leaves the process group; DGL's atexit hook (``exit_client``) then tells the servers to
    shut down. The mark comes before leaving: gloo's teardown joins its worker threads, and
    after DGL's ``SparseAdam`` (its ``alltoallv_cpu`` never waits for its ``isend`` s) that
    join now and then never returns (seen once in this project's typed runs)."""
    import torch.distributed as dist

    if out is not None:
        Path(args.result_dir, "trainer.json").write_text(json.dumps(out))
    dist.barrier()
    _done_marker(args).write_text("")
    dist.destroy_process_group()


def _done_marker(args: argparse.Namespace, local: int | None = None) -> Path:
    """Where trainer ``local`` of this machine (default: this trainer) marks itself done (the
    launcher clears ``*.json``)."""
    return Path(args.result_dir, f"done{args.machine}-{args.local if local is None else local}"
                                 ".json")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The subcommand and its options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=("partition", "machine", "server", "trainer"))
    p.add_argument("--data", help="partition: dataset directory")
    p.add_argument("--out", help="partition: output directory")
    p.add_argument("--ifname", default="lo", help="the interface between machines: gloo's, and "
                   "(other than lo) the one whose sent bytes the trainer counts per epoch")
    for flag, kind, default in (  # paths; then numbers (the trainer's are bench_train's)
            ("--ip-config", str, None), ("--master-addr", str, "127.0.0.1"),
            ("--part-config", str, None), ("--result-dir", str, None),
            ("--parts", int, 2), ("--machine", int, 0), ("--machines", int, 2),
            ("--trainers", int, 1), ("--local", int, 0),
            ("--master-port", int, 29500), ("--threads", int, 1), ("--timeout", float, 3600.0),
            ("--pg-timeout", float, 600.0), ("--batch-size", int, 1000),
            ("--eval-batch-size", int, 4096), ("--num-classes", int, 0),
            ("--fanouts", tuple_of(int), (10, 25)), ("--eval-fanouts", tuple_of(int), ())):
        p.add_argument(flag, type=kind, default=default)
    # the run config's training sections: dglx train's flags (partition: --task and --seed
    # split link edges; trainer: --eval-every 1 adds validation accuracy after every epoch)
    add_flags(p, RunConfig, sections=TRAINING, base=RunConfig().updated(
        model={"hidden": 64}, optimizer={"lr": 0.003}, loop={"epochs": 5, "eval_every": 0}))
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Runs one subcommand; returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    run = {"partition": partition_main, "machine": lambda a: machine_main(a, argv[1:]),
           "server": server_main, "trainer": trainer_main}[args.command]
    return run(args) or 0


if __name__ == "__main__":
    sys.exit(main())
