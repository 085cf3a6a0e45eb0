"""``dglx commcheck | rdzvcheck | emulate``: is the cluster (or its stand-in) fit for a job?"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Callable

from dglx_dist.cli_flags import add_flags, flag_names, number
from dglx_dist.config import JobConfig
from dglx_dist.errors import InvalidValueError
from dglx_dist.report import print_line

__all__ = ["COMMANDS"]

log = logging.getLogger("dglx_dist.cli")


def _cmd_commcheck(args: argparse.Namespace) -> int:
    import time

    import torch

    from dglx_dist.runtime import init

    with init(backend=args.backend, device=args.device) as s:
        if s.rank == args.fail_rank:
            raise SystemExit(f"rank {s.rank}: failing on purpose (--fail-rank)")
        ok = True
        for device in dict.fromkeys([torch.device("cpu"), s.device]):  # host, then device
            rows = [torch.full((s.rank + 1, 4), float(s.rank), device=device)
                    for _ in range(s.world_size)]
            got = s.world.all_to_all_v(rows)
            ok = ok and all(bool((g == j).all()) and g.shape[0] == j + 1 and g.device == device
                            for j, g in enumerate(got))
        total = s.world.all_reduce(torch.tensor([float(ok)], device=s.device))
        seconds = None
        if args.payload_mb > 0:  # every rank sends payload_mb to each other rank, timed
            rows = int(args.payload_mb * 2**20 // 4)
            s.world.barrier()
            t0 = time.perf_counter()
            s.world.all_to_all_v([torch.ones(rows, device=s.device)
                                  for _ in range(s.world_size)])
            s.world.barrier()
            seconds = round(time.perf_counter() - t0, 4)
        counts = s.world.all_gather(torch.tensor(list(s.counter.snapshot().values())))
        if s.is_main:
            keys = list(s.counter.snapshot())
            report = {"world_size": s.world_size, "servers": s.topology.num_servers,
                      "ranks_per_server": s.topology.ranks_per_server, "backend": s.backend,
                      "device": str(s.device), "launcher": s.env.launcher,
                      "exchange_ok": int(total.item()) == s.world_size,
                      "payload_mb": args.payload_mb, "payload_seconds": seconds,
                      "link_gbit": _link_gbit(s.topology, args.payload_mb, seconds,
                                              s.env.virtual_servers > 1),
                      "bytes": [dict(zip(keys, c.tolist())) for c in counts]}
            print_line(json.dumps(report))
    return 0


def _link_gbit(topology, payload_mb: float, seconds: float | None,
               virtual: bool) -> float | None:
    """The rate between servers the timed exchange saw (each server sent ``payload_mb`` from
    each of its ranks to each rank of the others through its link), cached for ``dglx plan``
    (:mod:`dglx_dist.planner.units`) unless the servers are ``virtual`` (one machine's ranks
    on its loopback: no link between servers to remember); None without servers to cross or
    a timing."""
    from dglx_dist.planner.units import save_measured

    g, w = topology.ranks_per_server, topology.world_size
    if not seconds or topology.num_servers < 2:
        return None
    rate = round(8 * g * (w - g) * payload_mb * 2**20 / seconds / 1e9, 3)
    if virtual:
        log.info("link rate %.3g Gbit/s between virtual servers (loopback): not cached", rate)
    else:
        log.info("link rate %.3g Gbit/s cached in %s", rate, save_measured({"link_gbit": rate}))
    return rate


def _cmd_rdzvcheck(args: argparse.Namespace) -> int:
    from dglx_dist.runtime.preflight import check_rendezvous_endpoint

    print_line(str(check_rendezvous_endpoint(args.endpoint, args.timeout)))
    return 0


def _add_rdzvcheck(p: argparse.ArgumentParser) -> None:
    p.add_argument("endpoint", metavar="HOST:PORT", help="the --rdzv-endpoint (or "
                   "--master-addr:--master-port) the job will use")
    p.add_argument("--timeout", type=number(float, 0, low_open=True), default=5.0,
                   help="seconds to wait for an answer (default 5)")


def _add_commcheck(p: argparse.ArgumentParser) -> None:
    add_flags(p, JobConfig, skip=set(flag_names(JobConfig)) - {"backend", "device"})  # train's
    p.add_argument("--fail-rank", type=int, default=-1,
                   help="this rank exits right after start-up (to see how a job fails)")
    p.add_argument("--payload-mb", type=float, default=0.0,
                   help="also time an exchange of this many MiB from every rank to every "
                        "other; on several servers, the link rate it saw is cached for "
                        "`dglx plan` and --strategy auto")


def _cmd_emulate(args: argparse.Namespace) -> int:
    from dglx_dist.cluster.emulate import (PRESETS, EmulationUnavailable, LinkSpec,
                                           remove_leftovers, run_job)

    if args.remove_leftovers:
        print_line(json.dumps({"removed": remove_leftovers()}))
        return 0
    target = args.target[1:] if args.target[:1] == ["--"] else args.target
    if not target:
        raise InvalidValueError("dglx emulate: give what torchrun runs after --, e.g. "
                                "`dglx emulate -- -m dglx_dist commcheck`")
    base = PRESETS[args.preset]
    link = LinkSpec(args.rate or base.rate,
                    base.delay_ms if args.delay_ms is None else args.delay_ms, args.queue)
    try:
        nodes = run_job(args.servers, args.nproc_per_server, link, target,
                        timeout=args.timeout)
    except EmulationUnavailable as exc:
        log.error("cannot emulate a cluster here: %s", exc)
        return 3
    except (KeyboardInterrupt, SystemExit) as exc:  # the nodes and namespaces are gone already
        log.error("interrupted (%s); the emulated cluster was removed", type(exc).__name__)
        return 130
    for n in nodes:
        sys.stdout.write(n.stdout)
        if n.returncode:
            log.error("node %d exited with %d; its last output:\n%s", n.node, n.returncode,
                      n.stderr[-3000:])
    return max(n.returncode != 0 for n in nodes)


def _add_emulate(p: argparse.ArgumentParser) -> None:
    from dglx_dist.cluster.emulate import QUEUES

    p.add_argument("--servers", type=int, default=2, help="emulated servers (torchrun nodes)")
    p.add_argument("--nproc-per-server", type=int, default=2, help="processes per server")
    p.add_argument("--preset", choices=("1g", "10g"), default="1g",
                   help="inter-server link: 1 or 10 Gbit/s (default 1g)")
    p.add_argument("--rate", help="link rate in tc's units, e.g. 500mbit (overrides --preset)")
    p.add_argument("--delay-ms", type=float, default=None,
                   help="one-way link delay (needs the kernel's netem qdisc)")
    p.add_argument("--queue", choices=tuple(QUEUES), default="flows",
                   help="how packets waiting for a link queue: one queue per connection, "
                        "served in turn as a host's fair-queueing qdisc does (flows, the "
                        "default), or one queue for all (fifo)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds before the job is "
                   "killed")
    p.add_argument("--remove-leftovers", action="store_true",
                   help="delete namespaces and bridges left by emulations that were killed")
    p.add_argument("target", nargs=argparse.REMAINDER,
                   help="after --: what torchrun runs, e.g. -m dglx_dist train --strategy p3")


# name: (help, add the arguments, run)
COMMANDS: dict[str, tuple[str, Callable, Callable]] = {
    "commcheck": ("under torchrun/srun: exchange test tensors, print topology and bytes",
                  _add_commcheck, _cmd_commcheck),
    "rdzvcheck": ("before a launch: is HOST:PORT free, or a torch.distributed store, or held "
                  "by something else (on which torchrun would hang)?", _add_rdzvcheck,
                  _cmd_rdzvcheck),
    "emulate": ("root, Linux: run a torchrun job on servers emulated by network namespaces "
                "joined by rate-limited links", _add_emulate, _cmd_emulate),
}
