"""``dglx train``: a reference model under torchrun/srun with a strategy, JSON lines out."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

from dglx_dist.cli_flags import (add_config_flags, config_from_args, number,
                                 parse_key_values)
from dglx_dist.errors import InvalidValueError
from dglx_dist.train_config import TrainConfig

__all__ = ["COMMANDS"]


def _cmd_train(args: argparse.Namespace) -> int:
    config = config_from_args(TrainConfig, args)
    if config.task == "link":
        return _cmd_train_link(args, config)
    import torch

    from dglx_dist.api.agree import on_every_rank
    from dglx_dist.checkpoint import Checkpointing
    from dglx_dist.models import MODELS
    from dglx_dist.partition import PartitionDir
    from dglx_dist.prepare import ensure_partitions
    from dglx_dist.runtime import init
    from dglx_dist.runtime.env import read_env
    from dglx_dist.strategies import STRATEGIES
    from dglx_dist.strategies.base import implied_layers
    from dglx_dist.trainer import Trainer

    # every refusal of the arguments comes before any process group or partitioning work
    strategy = STRATEGIES.build(args.strategy, **parse_key_values(args.strategy_opt,
                                                                  "--strategy-opt"))
    env = read_env()
    _check_before_start(args, strategy, env)
    with init(backend=args.backend, env=env, device=args.device) as session:
        parts = args.partitions or ensure_partitions(args.data or "cora", strategy, session,
                                                     args.cache_dir)
        pdir = PartitionDir(parts)
        torch.manual_seed(config.seed)
        layers = implied_layers(strategy) or config.layers
        model = MODELS[config.model](pdir.feat_dim, config.hidden, pdir.num_classes, layers,
                                    dropout=config.dropout, row_normalize=config.row_normalize)
        sink = on_every_rank(session, "--metrics-file", lambda: _MetricsSink(
            sys.stdout, args.metrics_file if session.is_main else None))
        checkpoint = (Checkpointing(args.checkpoint_dir, every=args.checkpoint_every)
                      if args.checkpoint_dir else None)
        trainer = Trainer(model, pdir, strategy, session=session, lr=config.lr,
                          weight_decay=config.weight_decay, progress=not args.no_progress,
                          metrics=sink if session.is_main else None, checkpoint=checkpoint,
                          nonfinite_loss=args.nonfinite_loss,
                          measure_saved_bytes=args.measure_saved_bytes)
        try:
            trainer.resume_or_start(args.resume)
            trainer.fit(config.epochs, eval_every=config.eval_every)
            _check_learned(trainer, config.epochs, args.fail_on_collapse)
        finally:  # e.g. dorylus's executor processes go with the trainer, also on failure
            trainer.close()
            sink.close()
    return 0


def _check_learned(trainer, epochs: int, fail: bool) -> None:
    """Warns (or, with ``fail``, raises) when the run's test accuracy is at chance."""
    from dglx_dist.tasks.collapse import act_on, majority_rate, node_verdict

    test_acc = trainer.history[-1].get("test_acc") if trainer.history else None
    if test_acc is None:  # nothing trained in this run (a resumed, finished one)
        return
    ndata = trainer.graph.ndata
    labels = ndata["label"].full()[ndata["test_mask"].full().bool()]
    act_on(node_verdict(test_acc, majority_rate(labels), epochs), fail)


def _check_before_start(args: argparse.Namespace, strategy, env) -> None:
    """The refusals of a node-task run that need the strategy and the launch environment:
    partitions that do not fit them, and a job whose memory estimate does not fit this
    machine (:func:`~dglx_dist.strategies.footprint.check_job_memory`)."""
    from dglx_dist.data import read_meta
    from dglx_dist.partition import PartitionDir
    from dglx_dist.prepare import check_partitions_of, resolve_dataset
    from dglx_dist.runtime.topology import Topology
    from dglx_dist.strategies.base import check_partitions
    from dglx_dist.strategies.footprint import JobSize, check_job_memory

    if args.partitions is not None:
        if args.data is not None:
            check_partitions_of(args.partitions, args.data)
        graph = PartitionDir(args.partitions)
        check_partitions(strategy, graph, Topology(env.num_servers, env.ranks_per_server))
    else:
        graph = read_meta(resolve_dataset(args.data or "cora"))
    check_job_memory(strategy, JobSize(graph.num_nodes, graph.num_edges, env.world_size,
                                       env.ranks_on_host),
                     args.memory_limit, override="--memory-limit BYTES")


def _cmd_train_link(args: argparse.Namespace, train: TrainConfig) -> int:
    """``--task link``: dglx_dist.tasks.link on the dataset's edges."""
    import torch

    from dglx_dist.data import read_dataset, to_dgl
    from dglx_dist.api.agree import on_every_rank
    from dglx_dist.models import MODELS
    from dglx_dist.prepare import resolve_dataset
    from dglx_dist.runtime import init
    from dglx_dist.strategies import STRATEGIES
    from dglx_dist.strategies.base import implied_layers
    from dglx_dist.tasks.collapse import act_on, link_verdict
    from dglx_dist.tasks.link import LinkConfig, train_link

    for flag, value, why in (
            ("--partitions", args.partitions, "it partitions the training graph it splits off "
                                              "--data"),
            ("--checkpoint-dir", args.checkpoint_dir, "it keeps no checkpoints"),
            ("--memory-limit", args.memory_limit, "its memory is not estimated: the strategies' "
                                                  "memory fits were measured on node training")):
        if value is not None:
            raise InvalidValueError(f"{flag} is not supported with --task link ({why})")
    strategy = STRATEGIES.build(args.strategy, **parse_key_values(args.strategy_opt,
                                                                  "--strategy-opt"))
    graph = to_dgl(read_dataset(resolve_dataset(args.data or "cora")))
    config = LinkConfig.of(train, progress=not args.no_progress)
    with init(backend=args.backend, device=args.device) as session:
        torch.manual_seed(train.seed)
        layers = implied_layers(strategy) or train.layers
        model = MODELS[train.model](graph.ndata["feat"].shape[1], train.hidden, train.hidden,
                                    layers, dropout=train.dropout,
                                    row_normalize=train.row_normalize)
        sink = on_every_rank(session, "--metrics-file", lambda: _MetricsSink(
            sys.stdout, args.metrics_file) if session.is_main else None)
        try:
            test = train_link(graph, strategy, model, config, sink, args.cache_dir)
            act_on(link_verdict(test.get("auc"), train.epochs), args.fail_on_collapse)
        finally:
            if sink is not None:
                sink.close()
    return 0


class _MetricsSink:
    """Writes metrics lines to stdout and, optionally, appends them to a file."""

    def __init__(self, stream, path: Path | None):
        self.stream = stream
        try:  # opened before the first epoch: a bad path is refused before any training
            self.file = open(path, "a") if path is not None else None
        except OSError as exc:
            raise InvalidValueError(f"--metrics-file {path}: cannot be opened for appending "
                                    f"({exc.strerror or exc}); expected a file in an existing, "
                                    f"writable directory") from None

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
    add_config_flags(p, TrainConfig)
    p.add_argument("--strategy", default="distdgl", help="registered strategy (default distdgl)")
    p.add_argument("--strategy-opt", action="append", metavar="KEY=VALUE",
                   help="strategy option, repeatable (see docs/strategies)")
    p.add_argument("--data", help="dataset directory or built-in name (default: cora); with "
                   "--partitions, checked to be the dataset they were made from")
    p.add_argument("--partitions", type=Path, help="partition directory from `dglx partition` "
                   "(default: partition --data for the strategy, cached in --cache-dir)")
    p.add_argument("--cache-dir", type=Path, default=Path("dglx-partitions"))
    p.add_argument("--backend", default=None, help="gloo or nccl, the backend of the device "
                   "collectives (default: nccl on GPUs; host traffic is always gloo's)")
    p.add_argument("--device", default=None, help="auto, cpu, cuda or cuda:N (default auto: "
                   "local rank i on GPU i when CUDA is available, else the CPU)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--metrics-file", type=Path, help="also append the JSON lines to this file")
    p.add_argument("--checkpoint-dir", type=Path, help="save checkpoints here (a directory every "
                   "rank sees); a run restarted by torchrun --max-restarts resumes from it")
    p.add_argument("--checkpoint-every", type=number(int, 1), default=1, metavar="N",
                   help="save after every N epochs and after the last (default 1)")
    p.add_argument("--nonfinite-loss", choices=("raise", "warn"), default="raise",
                   help="an epoch whose loss is NaN or Inf stops the run with an error naming "
                        "the epoch and step (default), or is logged and training goes on")
    p.add_argument("--fail-on-collapse", action="store_true",
                   help="exit 2 when the test accuracy (AUC for --task link) ends at chance "
                        "level, instead of the warning")
    p.add_argument("--measure-saved-bytes", action="store_true",
                   help="report peak_saved_mb, the activation memory of a training forward "
                        "(a saved-tensor hook on every forward; off by default)")
    p.add_argument("--resume", action="store_true",
                   help="continue from the newest intact checkpoint in --checkpoint-dir")
    p.add_argument("--memory-limit", type=number(int, 1), default=None, metavar="BYTES",
                   help="refuse before starting when the strategy's estimated peak for this "
                        "machine's ranks exceeds this (default: the memory available now; "
                        "node task only)")


# name: (help, add the arguments, run)
COMMANDS: dict[str, tuple[str, Callable, Callable]] = {
    "train": ("train a reference model under torchrun/srun with a strategy; JSON lines out",
              _add_train, _cmd_train),
}
