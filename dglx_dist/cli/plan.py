"""``dglx plan``: which strategy, with which options, for a graph, a model and a cluster
(:mod:`dglx_dist.planner`; docs/choosing.md, "Planning"). A markdown table of every strategy,
then the choice and why; ``--json`` prints one JSON object instead. ``--measure`` measures
this machine's unit costs first and caches them for later plans."""
from __future__ import annotations

import argparse
import json
import logging
from typing import Callable

from dglx_dist.cli_flags import number, tuple_of
from dglx_dist.config import MODEL_NAMES, TASK_NAMES
from dglx_dist.errors import InvalidValueError
from dglx_dist.report import print_line

__all__ = ["COMMANDS", "LINKS", "parse_link"]

log = logging.getLogger("dglx_dist.cli")

LINKS = {"1g": 1.0, "10g": 10.0, "25g": 25.0, "100g": 100.0}
"""``--link`` presets in Gbit/s (a plain number is Gbit/s too)."""


def parse_link(text: str) -> float:
    """``1g``, ``10g``, ``25g``, ``100g`` or a rate in Gbit/s."""
    if text.lower() in LINKS:
        return LINKS[text.lower()]
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected {', '.join(LINKS)} or a rate in "
                                         "Gbit/s > 0")
    return value


def _add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("the graph: a dataset, partitions, or its sizes")
    g.add_argument("--data", help="dataset directory or built-in name (default: cora, "
                                  "unless --partitions or --nodes)")
    g.add_argument("--partitions", help="a partition directory (plans the strategies it fits)")
    g.add_argument("--nodes", type=number(int, 1), help="nodes of a graph given by its sizes")
    g.add_argument("--edges", type=number(int, 1), help="directed edges (both directions of "
                                                        "an undirected edge)")
    g.add_argument("--feat-dim", type=number(int, 1), default=128, help="feature width with "
                   "--nodes (default 128)")
    g.add_argument("--num-classes", type=number(int, 1), default=16)
    g.add_argument("--train-frac", type=number(float, 0, 1), default=0.1,
                   help="share of training nodes with --nodes (default 0.1)")
    g.add_argument("--cuts", type=tuple_of(float), help="METIS's edge cut into 2, 4, 8... "
                   "parts (default: the synthetic graph's, 0.106,0.161,0.193)")
    m = p.add_argument_group("the model")
    m.add_argument("--model", choices=MODEL_NAMES, default="sage")
    m.add_argument("--hidden", type=number(int, 1), default=64)
    m.add_argument("--fanouts", type=tuple_of(int), default=(10, 25),
                   help="per layer, input layer first; their count is the depth (default 10,25)")
    m.add_argument("--batch-size", type=number(int, 1), help="seeds per rank per step "
                   "(default 1000); with --task link, training edges per rank per step "
                   "(default 1024, dglx train's --edge-batch-size)")
    t = p.add_argument_group("the task")
    t.add_argument("--task", choices=TASK_NAMES, default="node", help="node classification, or "
                   "link prediction on the graph's edges (as dglx train --task link)")
    t.add_argument("--negatives", type=number(int, 1), default=1,
                   help="--task link: uniform negatives per training edge")
    t.add_argument("--train-edges", type=number(int, 1), help="--task link: training edges "
                   "an epoch (default: every edge of the training graph)")
    c = p.add_argument_group("the cluster")
    c.add_argument("--servers", type=number(int, 1), default=1)
    c.add_argument("--ranks-per-server", type=number(int, 1), default=1,
                   help="ranks (or GPUs) per server")
    c.add_argument("--memory-per-server", type=number(int, 1), metavar="BYTES",
                   help="default: this machine's total memory")
    c.add_argument("--link", type=parse_link, help="between servers: 1g, 10g, 25g, 100g or "
                   "Gbit/s (default: measured by `dglx commcheck --payload-mb`, else 10g)")
    c.add_argument("--latency-ms", type=number(float, 0), default=0.0,
                   help="one-way latency between servers")
    c.add_argument("--cores-per-server", type=number(int, 1), metavar="N",
                   help="cores of a server, shared by its ranks: the plan gives each rank's "
                        "loader sampler processes where they have cores (default: not known, "
                        "a core for each rank's loader thread and none for processes)")
    c.add_argument("--compute-speedup", type=number(float, 0, low_open=True), default=1.0,
                   help="a rank's speed at the model's math over one core of the machine the "
                        "units are from (a GPU: 50 is a start)")
    c.add_argument("--sample-speedup", type=number(float, 0, low_open=True), default=1.0,
                   help="the same for sampling and gathering rows")
    p.add_argument("--strategy-opt", action="append", metavar="KEY=VALUE",
                   help="an option to keep (only strategies that take it are planned)")
    p.add_argument("--measure", action="store_true", help="measure this machine's unit costs "
                   "first and cache them (about a second; with CUDA, also the GPU's speed-up "
                   "at the model's math, which --strategy auto plans GPU ranks with)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the table")


def _graph(args: argparse.Namespace):
    from dglx_dist.planner import DEFAULT_CUTS, graph_of_directory, graph_of_partitions, graph_shape
    from dglx_dist.prepare import resolve_dataset

    given = [f for f in ("data", "partitions", "nodes") if getattr(args, f) is not None]
    if len(given) > 1 or (args.nodes is None) != (args.edges is None):
        raise InvalidValueError("dglx plan: give one of --data, --partitions or --nodes with "
                                "--edges")
    cuts = tuple(args.cuts) if args.cuts else DEFAULT_CUTS
    if args.nodes is not None:
        return graph_shape(args.nodes, args.edges, args.feat_dim, args.num_classes,
                           args.train_frac, cuts), None
    if args.partitions is not None:
        from dglx_dist.partition import PartitionDir

        pdir = PartitionDir(args.partitions)
        return graph_of_partitions(pdir, cuts, embed_dim=args.hidden), pdir
    return graph_of_directory(resolve_dataset(args.data or "cora"), cuts,
                              embed_dim=args.hidden), None


def _cmd_plan(args: argparse.Namespace) -> int:
    import psutil
    import torch

    from dglx_dist.cli_flags import parse_key_values
    from dglx_dist.planner import Cluster, make_plan
    from dglx_dist.planner.auto import workload_for
    from dglx_dist.planner.units import (DEFAULT_LINK_GBIT, load_measured, measure_gpu_speedup,
                                      measure_units, save_measured)

    if args.measure:
        units = measure_units()
        found = {"units": units.public()}
        if torch.cuda.is_available():  # what --strategy auto plans a GPU rank's model with
            found["gpu_speedup"] = round(measure_gpu_speedup(units), 3)
        gpu = f", GPU speed-up {found['gpu_speedup']}x" if "gpu_speedup" in found else ""
        log.info("unit costs%s measured here, cached in %s", gpu, save_measured(found))
    measured = load_measured()
    given = parse_key_values(args.strategy_opt, "--strategy-opt")
    graph, pdir = _graph(args)
    cluster = Cluster(args.servers, args.ranks_per_server,
                      args.link or measured.link_gbit or DEFAULT_LINK_GBIT,
                      latency_s=args.latency_ms / 1000,
                      memory_bytes=args.memory_per_server or psutil.virtual_memory().total,
                      compute_speedup=args.compute_speedup, sample_speedup=args.sample_speedup,
                      server_cores=args.cores_per_server)
    work = workload_for({"fanouts": args.fanouts, "batch_size": args.batch_size or 1000,
                         **given}, args.model, args.hidden, task=_task(args))
    if pdir is not None:
        _check_parts(pdir, cluster, given, graph, work)
    plan = make_plan(graph, work, cluster, measured=measured, given=given,
                     accept=None if pdir is None else _fitting(pdir, cluster))
    print_line(json.dumps(plan.public()) if args.json else
               f"{plan.table()}\n{plan.summary()}\n{plan.why()}")
    return 0


def _task(args: argparse.Namespace):
    """The task of the flags, as ``dglx train``'s run config holds it."""
    from dglx_dist.config import TaskConfig

    return TaskConfig(name=args.task, edge_batch_size=args.batch_size or
                      TaskConfig.edge_batch_size, negatives=args.negatives,
                      train_edges=args.train_edges)


def _fitting(pdir, cluster) -> Callable:
    """Takes the strategies (built) that train ``pdir`` on ``cluster``; raises why not."""
    from dglx_dist.runtime.topology import Topology
    from dglx_dist.strategies.base import check_partitions

    topology = Topology(cluster.servers, cluster.ranks_per_server)
    return lambda built: check_partitions(built, pdir, topology) or True


def _check_parts(pdir, cluster, given, graph, work) -> None:
    """Refuses a partition directory whose part count no planned strategy takes on
    ``cluster``, in one line: its parts against the cluster's servers and ranks."""
    from dglx_dist.errors import PartitionError
    from dglx_dist.planner.plan import candidates, for_task
    from dglx_dist.runtime.topology import Topology

    topology = Topology(cluster.servers, cluster.ranks_per_server)
    needs: dict[int, list[str]] = {}
    for name, built in candidates(given, graph, for_task(work)):
        needs.setdefault(built.partition_spec(topology).num_parts, []).append(name)
    parts = pdir.num_parts
    if not needs or parts in needs:
        return
    wants = "; ".join(f"{', '.join(names)} need{'s' if len(names) == 1 else ''} {n}"
                      for n, names in sorted(needs.items()))
    raise PartitionError(
        f"dglx plan: --partitions {pdir.path} has {parts} parts; this cluster has "
        f"{_count(cluster.servers, 'server')} x {_count(cluster.ranks_per_server, 'rank')} "
        f"({_count(cluster.world, 'rank')} in all), on which {wants}: plan for the cluster "
        f"the parts were made for (--servers {parts} --ranks-per-server 1 takes {parts} parts "
        f"under every strategy), or partition again (`dglx partition --parts N`)")


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


# name: (help, add the arguments, run)
COMMANDS: dict[str, tuple[str, Callable, Callable]] = {
    "plan": ("which strategy, with which options, for a graph, a model and a cluster: every "
             "strategy's predicted epoch, bytes and memory, the choice and why", _add_arguments,
             _cmd_plan),
}
