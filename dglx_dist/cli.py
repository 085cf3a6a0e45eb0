"""The ``dglx`` command: datagen, partition, partitioners, train, demo, commcheck, emulate.

Results go to stdout (a markdown table and a JSON line); logs and progress bars to stderr.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Callable, Sequence

from dglx_dist.config import add_dataclass_arguments, dataclass_from_args, number, parse_key_values
from dglx_dist.errors import DglxError, InvalidValueError
from dglx_dist.runtime.env import launch_position
from dglx_dist.runtime.failure import one_line, report, tell_launcher

__all__ = ["main", "build_parser"]

log = logging.getLogger("dglx_dist.cli")


def _cmd_datagen(args: argparse.Namespace) -> int:
    from dglx_dist.data.synthetic import SyntheticConfig, write_synthetic

    config = dataclass_from_args(SyntheticConfig, args)
    meta = write_synthetic(config, args.out, overwrite=args.overwrite, progress=True)
    print(json.dumps({"out": str(args.out), **meta.to_json()}))
    return 0


def _partition_dataset(args: argparse.Namespace) -> int:
    from dglx_dist.partition import partition_dataset

    _refuse_options(args, _IMPORT_ONLY, "only with --from-dgl")
    report = partition_dataset(args.data, args.out, args.method or "metis",
                               2 if args.parts is None else args.parts,
                               parse_key_values(args.opt), overwrite=args.overwrite,
                               progress=True, memory_limit=args.memory_limit,
                               nonfinite=args.nonfinite)
    print(report.to_markdown())
    print(json.dumps(report.to_json()))
    return 0


def _import_dgl(args: argparse.Namespace) -> int:
    from dglx_dist.partition import PartitionDir, import_dgl_partitions

    _refuse_options(args, _DATASET_ONLY, "--from-dgl keeps DGL's parts as they are")
    out = import_dgl_partitions(args.data, args.out, args.overwrite, orig_nids=args.orig_nids,
                                orig_eids=args.orig_eids, num_classes=args.num_classes,
                                keys=parse_key_values(args.key, "--key"),
                                nonfinite=args.nonfinite, progress=True)
    m = PartitionDir(out).manifest
    print(json.dumps({"out": str(out), **{k: m[k] for k in (
        "num_parts", "num_nodes", "num_edges", "feat_dim", "num_classes", "relabeled")},
        "core_per_part": [e["num_core"] for e in m["parts"]],
        "halo_per_part": [e["num_halo"] for e in m["parts"]],
        "edges_per_part": [e["num_edges"] for e in m["parts"]],
        "edge_cut": m["dataset"]["edge_cut"], "not_imported": m["dataset"]["not_imported"]}))
    return 0


_DATASET_ONLY = ("method", "parts", "opt", "memory_limit")
_IMPORT_ONLY = ("orig_nids", "orig_eids", "num_classes", "key")
_PARTITION_SOURCES: dict[str, Callable[[argparse.Namespace], int]] = {
    "dataset": _partition_dataset, "dgl": _import_dgl}


def _refuse_options(args: argparse.Namespace, names: Sequence[str], why: str) -> None:
    given = [f"--{n.replace('_', '-')}" for n in names if getattr(args, n) is not None]
    if given:
        raise InvalidValueError(f"dglx partition: {', '.join(given)} not accepted ({why})")


def _cmd_partition(args: argparse.Namespace) -> int:
    return _PARTITION_SOURCES[args.source](args)


def _cmd_demo(args: argparse.Namespace) -> int:
    from dglx_dist.demo import partition_demo, training_demo

    print(partition_demo(args.dataset, args.parts), flush=True)
    if args.no_train:
        return 0
    table, records = training_demo("distdgl", args.nproc, args.epochs, args.dataset)
    print(f"\n## distdgl training on {args.nproc} local processes (torchrun, gloo)\n")
    print(table)
    print(f"\ntest accuracy: {records[-1]['test_acc']:.4f}")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    import torch

    from dglx_dist.checkpoint import Checkpointing
    from dglx_dist.models import MODELS
    from dglx_dist.partition import PartitionDir
    from dglx_dist.prepare import check_partitions_of, ensure_partitions, resolve_dataset
    from dglx_dist.runtime import init
    from dglx_dist.runtime.env import read_env
    from dglx_dist.runtime.topology import Topology
    from dglx_dist.strategies import STRATEGIES
    from dglx_dist.trainer import Trainer

    # every refusal of the arguments comes before any process group or partitioning work
    strategy = STRATEGIES.build(args.strategy, **parse_key_values(args.strategy_opt,
                                                                  "--strategy-opt"))
    env = read_env()
    if args.partitions is not None:
        if args.data is not None:
            check_partitions_of(args.partitions, args.data)
        strategy.check_partitions(PartitionDir(args.partitions),
                                  Topology(env.num_servers, env.ranks_per_server))
    else:
        resolve_dataset(args.data or "cora")
    with init(backend=args.backend, env=env) as session:
        parts = args.partitions or ensure_partitions(args.data or "cora", strategy, session,
                                                     args.cache_dir)
        pdir = PartitionDir(parts)
        torch.manual_seed(args.seed)
        layers = strategy.num_layers() or args.layers
        model = MODELS[args.model](pdir.feat_dim, args.hidden, pdir.num_classes, layers,
                                  dropout=args.dropout, row_normalize=args.row_normalize)
        sink = _MetricsSink(sys.stdout, args.metrics_file if session.is_main else None)
        checkpoint = (Checkpointing(args.checkpoint_dir, every=args.checkpoint_every)
                      if args.checkpoint_dir else None)
        trainer = Trainer(model, pdir, strategy, session=session, lr=args.lr,
                          weight_decay=args.weight_decay, progress=not args.no_progress,
                          metrics=sink if session.is_main else None, checkpoint=checkpoint,
                          nonfinite_loss=args.nonfinite_loss,
                          measure_saved_bytes=args.measure_saved_bytes)
        try:
            trainer.resume_or_start(args.resume)
            trainer.fit(args.epochs, eval_every=args.eval_every)
        finally:  # e.g. dorylus's executor processes go with the trainer, also on failure
            trainer.close()
            sink.close()
    return 0


class _MetricsSink:
    """Writes metrics lines to stdout and, optionally, appends them to a file."""

    def __init__(self, stream, path: Path | None):
        self.stream = stream
        self.file = open(path, "a") if path is not None else None

    def write(self, text: str) -> None:
        self.stream.write(text)
        if self.file is not None:
            self.file.write(text)

    def flush(self) -> None:
        self.stream.flush()
        if self.file is not None:
            self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def _add_train(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strategy", default="distdgl", help="registered strategy (default distdgl)")
    p.add_argument("--strategy-opt", action="append", metavar="KEY=VALUE",
                   help="strategy option, repeatable (see docs/strategies)")
    p.add_argument("--data", help="dataset directory or built-in name (default: cora); with "
                   "--partitions, checked to be the dataset they were made from")
    p.add_argument("--partitions", type=Path, help="partition directory from `dglx partition` "
                   "(default: partition --data for the strategy, cached in --cache-dir)")
    p.add_argument("--cache-dir", type=Path, default=Path("dglx-partitions"))
    p.add_argument("--epochs", type=number(int, 1), default=50)
    p.add_argument("--eval-every", type=number(int, 0), default=10,
                   help="validate every N epochs (0: only after the last)")
    p.add_argument("--model", default="sage", choices=("sage", "gcn", "gat", "resgcn"),
                   help="reference model: GraphSAGE, GCN, GAT (4 heads of --hidden), or the "
                        "deep residual ResGCN+ (dglx_dist.models; default sage)")
    p.add_argument("--hidden", type=number(int, 1), default=16)
    p.add_argument("--layers", type=number(int, 1), default=2,
                   help="when the strategy does not imply it")
    p.add_argument("--dropout", type=number(float, 0, 1, high_open=True), default=0.5)
    p.add_argument("--lr", type=number(float, 0, low_open=True), default=0.01)
    p.add_argument("--weight-decay", type=number(float, 0), default=5e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default=None, help="gloo or nccl (default: nccl if CUDA)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--metrics-file", type=Path, help="also append the JSON lines to this file")
    p.add_argument("--checkpoint-dir", type=Path, help="save checkpoints here (a directory every "
                   "rank sees); a run restarted by torchrun --max-restarts resumes from it")
    p.add_argument("--checkpoint-every", type=number(int, 1), default=1, metavar="N",
                   help="save after every N epochs and after the last (default 1)")
    p.add_argument("--nonfinite-loss", choices=("raise", "warn"), default="raise",
                   help="an epoch whose loss is NaN or Inf stops the run with an error naming "
                        "the epoch and step (default), or is logged and training goes on")
    p.add_argument("--measure-saved-bytes", action="store_true",
                   help="report peak_saved_mb, the activation memory of a training forward "
                        "(a saved-tensor hook on every forward; off by default)")
    p.add_argument("--resume", action="store_true",
                   help="continue from the newest intact checkpoint in --checkpoint-dir")
    p.add_argument("--row-normalize", action="store_true",
                   help="divide each feature row by its sum (as DGL's Planetoid loaders do to "
                        "bag-of-words features; the shipped Cora is stored so already); "
                        "default: features as stored")


def _cmd_commcheck(args: argparse.Namespace) -> int:
    import time

    import torch

    from dglx_dist.runtime import init

    with init(backend=args.backend) as s:
        if s.rank == args.fail_rank:
            raise SystemExit(f"rank {s.rank}: failing on purpose (--fail-rank)")
        rows = [torch.full((s.rank + 1, 4), float(s.rank)) for _ in range(s.world_size)]
        got = s.world.all_to_all_v(rows)
        ok = all(bool((g == j).all()) and g.shape[0] == j + 1 for j, g in enumerate(got))
        total = s.world.all_reduce(torch.tensor([float(ok)]))
        seconds = None
        if args.payload_mb > 0:  # every rank sends payload_mb to each other rank, timed
            rows = int(args.payload_mb * 2**20 // 4)
            s.world.barrier()
            t0 = time.perf_counter()
            s.world.all_to_all_v([torch.ones(rows) for _ in range(s.world_size)])
            s.world.barrier()
            seconds = round(time.perf_counter() - t0, 4)
        counts = s.world.all_gather(torch.tensor(list(s.counter.snapshot().values())))
        if s.is_main:
            keys = list(s.counter.snapshot())
            print(json.dumps({"world_size": s.world_size, "servers": s.topology.num_servers,
                              "ranks_per_server": s.topology.ranks_per_server,
                              "backend": s.backend, "launcher": s.env.launcher,
                              "exchange_ok": int(total.item()) == s.world_size,
                              "payload_mb": args.payload_mb, "payload_seconds": seconds,
                              "bytes": [dict(zip(keys, c.tolist())) for c in counts]}))
    return 0


def _cmd_rdzvcheck(args: argparse.Namespace) -> int:
    from dglx_dist.runtime.preflight import check_rendezvous_endpoint

    print(check_rendezvous_endpoint(args.endpoint, args.timeout))
    return 0


def _add_rdzvcheck(p: argparse.ArgumentParser) -> None:
    p.add_argument("endpoint", metavar="HOST:PORT", help="the --rdzv-endpoint (or "
                   "--master-addr:--master-port) the job will use")
    p.add_argument("--timeout", type=number(float, 0, low_open=True), default=5.0,
                   help="seconds to wait for an answer (default 5)")


def _add_commcheck(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", default=None, help="gloo or nccl (default: nccl if CUDA)")
    p.add_argument("--fail-rank", type=int, default=-1,
                   help="this rank exits right after start-up (to see how a job fails)")
    p.add_argument("--payload-mb", type=float, default=0.0,
                   help="also time an exchange of this many MiB from every rank to every other")


def _cmd_emulate(args: argparse.Namespace) -> int:
    from dglx_dist.cluster.emulate import (PRESETS, EmulationUnavailable, LinkSpec,
                                           remove_leftovers, run_job)

    if args.remove_leftovers:
        print(json.dumps({"removed": remove_leftovers()}))
        return 0
    target = args.target[1:] if args.target[:1] == ["--"] else args.target
    if not target:
        raise InvalidValueError("dglx emulate: give what torchrun runs after --, e.g. "
                                "`dglx emulate -- -m dglx_dist commcheck`")
    base = PRESETS[args.preset]
    link = LinkSpec(args.rate or base.rate,
                    base.delay_ms if args.delay_ms is None else args.delay_ms)
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
    p.add_argument("--servers", type=int, default=2, help="emulated servers (torchrun nodes)")
    p.add_argument("--nproc-per-server", type=int, default=2, help="processes per server")
    p.add_argument("--preset", choices=("1g", "10g"), default="1g",
                   help="inter-server link: 1 or 10 Gbit/s (default 1g)")
    p.add_argument("--rate", help="link rate in tc's units, e.g. 500mbit (overrides --preset)")
    p.add_argument("--delay-ms", type=float, default=None,
                   help="one-way link delay (needs the kernel's netem qdisc)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds before the job is "
                   "killed")
    p.add_argument("--remove-leftovers", action="store_true",
                   help="delete namespaces and bridges left by emulations that were killed")
    p.add_argument("target", nargs=argparse.REMAINDER,
                   help="after --: what torchrun runs, e.g. -m dglx_dist train --strategy p3")


def _add_datagen(p: argparse.ArgumentParser) -> None:
    from dglx_dist.data.synthetic import SyntheticConfig

    p.add_argument("out", type=Path, help="dataset directory to create")
    add_dataclass_arguments(p, SyntheticConfig)
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")


def _add_partition(p: argparse.ArgumentParser) -> None:
    p.add_argument("data", type=Path, help="dataset directory (see docs/dataset_format.md); with "
                   "--from-dgl, the GRAPH_NAME.json written by dgl.distributed.partition_graph")
    p.add_argument("out", type=Path, help="partition directory to create")
    p.add_argument("--from-dgl", dest="source", action="store_const", const="dgl",
                   default="dataset", help="import DGL's partitions as they are (same parts, "
                   "same node ids; no repartitioning); see docs/partition_format.md")
    p.add_argument("--method", help="registered partitioner (default: metis)")
    p.add_argument("--parts", type=int, help="number of parts (default: 2)")
    p.add_argument("--opt", action="append", metavar="KEY=VALUE",
                   help="partitioner option, repeatable (see `dglx partitioners`)")
    p.add_argument("--overwrite", action="store_true", help="replace OUT once the new one is done")
    p.add_argument("--memory-limit", type=int, default=None, metavar="BYTES",
                   help="refuse when the estimated peak exceeds this (default: available memory)")
    p.add_argument("--nonfinite", choices=("reject", "warn"), default="reject",
                   help="NaN / Inf features: refuse the dataset (default) or warn and go on")
    g = p.add_argument_group("with --from-dgl")
    g.add_argument("--orig-nids", type=Path, metavar="FILE", help="the input graph's id of each "
                   "DGL node id: partition_graph(..., return_mapping=True)'s first result saved "
                   "with np.save (.npy) or torch.save (.pt); default: DGL's ids are kept as the "
                   "original ids")
    g.add_argument("--orig-eids", type=Path, metavar="FILE", help="the same for edge ids (its "
                   "second result)")
    g.add_argument("--num-classes", type=int, help="default: the largest label plus one")
    g.add_argument("--key", action="append", metavar="OURS=NAME", help="name of a node data "
                   "field in node_feat.dgl, without DGL's NTYPE/ prefix, repeatable; OURS is "
                   "feat, label, train, val or test (defaults: feat, label, train_mask, "
                   "val_mask, test_mask)")


def _add_demo(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="cora", help="built-in dataset (default: cora)")
    p.add_argument("--parts", type=int, default=4, help="parts for the partition reports")
    p.add_argument("--nproc", type=int, default=2, help="training processes (default: 2)")
    p.add_argument("--epochs", type=int, default=60, help="training epochs (default: 60)")
    p.add_argument("--no-train", action="store_true", help="partition reports only")


def _cmd_partitioners(args: argparse.Namespace) -> int:
    from dglx_dist.partition import PARTITIONERS

    print(PARTITIONERS.options_markdown())
    return 0


_COMMANDS: dict[str, tuple[str, Callable, Callable]] = {
    "datagen": ("write a synthetic community graph as a dataset directory", _add_datagen,
                _cmd_datagen),
    "partition": ("partition a dataset directory and print the quality report, or import the "
                  "partitions of DGL's partition_graph (--from-dgl)", _add_partition,
                  _cmd_partition),
    "partitioners": ("list registered partitioners and their options", lambda p: None,
                     _cmd_partitioners),
    "train": ("train a reference model under torchrun/srun with a strategy; JSON lines out",
              _add_train, _cmd_train),
    "demo": ("partition the built-in Cora with every partitioner, then train on 2 local "
             "processes", _add_demo, _cmd_demo),
    "commcheck": ("under torchrun/srun: exchange test tensors, print topology and bytes",
                  _add_commcheck, _cmd_commcheck),
    "rdzvcheck": ("before a launch: is HOST:PORT free, or a torch.distributed store, or held "
                  "by something else (on which torchrun would hang)?", _add_rdzvcheck,
                  _cmd_rdzvcheck),
    "emulate": ("root, Linux: run a torchrun job on servers emulated by network namespaces "
                "joined by rate-limited links", _add_emulate, _cmd_emulate),
}


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors rank 0 alone prints: under torchrun every rank parses the
    same command line, and N copies of one usage message help nobody."""

    def error(self, message: str):
        rank, _, error_file = launch_position()
        tell_launcher(error_file, f"{self.prog}: error: {message}")
        if rank == 0:
            self.print_usage(sys.stderr)
            self.exit(2, f"{self.prog}: error: {message}\n")
        self.exit(2)


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _add_logging(p: argparse.ArgumentParser, default) -> None:
    """The logging flags, on the command and on each subcommand (``dglx train --debug``)."""
    p.add_argument("-v", "--verbose", "--debug", dest="log_level", action="store_const",
                   const="DEBUG", default=default,
                   help="debug logging, with tracebacks of errors (= --log-level DEBUG)")
    p.add_argument("--log-level", choices=_LOG_LEVELS, type=str.upper, default=default,
                   help="logging level (default INFO)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dglx", description=__doc__.splitlines()[0])
    _add_logging(parser, "INFO")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, add_args, run) in _COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_args(p)
        _add_logging(p, argparse.SUPPRESS)  # a subcommand's flag overrides, its absence not
        p.set_defaults(run=run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one ``dglx`` command. Any error of dglx_dist's own is one ERROR line from one rank
    (:mod:`dglx_dist.runtime.failure`; the traceback too at ``--debug``) and exit status 2;
    the other ranks exit with 2 quietly."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.run(args)
    except DglxError as exc:
        rank, world_size, error_file = launch_position()
        line = report(exc, rank, world_size, error_file)
        debug = exc if args.log_level == "DEBUG" else None
        if line is not None:
            log.error("%s", line, exc_info=debug)
        else:
            log.debug("rank %d: %s", rank, one_line(exc), exc_info=debug)
        return 2


if __name__ == "__main__":
    sys.exit(main())
