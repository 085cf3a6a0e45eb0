"""``dglx train``: a reference model under torchrun/srun with a strategy, JSON lines out."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

from dglx_dist.cli_flags import number, parse_key_values

__all__ = ["COMMANDS"]


def _cmd_train(args: argparse.Namespace) -> int:
    if args.task == "link":
        return _cmd_train_link(args)
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


def _cmd_train_link(args: argparse.Namespace) -> int:
    """``--task link``: dglx_dist.tasks.link on the dataset's edges."""
    import torch

    from dglx_dist.data import read_dataset, to_dgl
    from dglx_dist.errors import InvalidValueError
    from dglx_dist.models import MODELS
    from dglx_dist.prepare import resolve_dataset
    from dglx_dist.runtime import init
    from dglx_dist.strategies import STRATEGIES
    from dglx_dist.tasks.link import LinkConfig, train_link

    for flag, value in (("--partitions", args.partitions), ("--checkpoint-dir",
                                                             args.checkpoint_dir)):
        if value is not None:
            raise InvalidValueError(f"{flag} is not supported with --task link (it partitions "
                                    "the training graph it splits off --data, and keeps no "
                                    "checkpoints)")
    strategy = STRATEGIES.build(args.strategy, **parse_key_values(args.strategy_opt,
                                                                  "--strategy-opt"))
    graph = to_dgl(read_dataset(resolve_dataset(args.data or "cora")))
    config = LinkConfig(args.epochs, args.edge_batch_size, args.lr, args.weight_decay,
                        args.negatives, eval_every=args.eval_every, seed=args.seed,
                        progress=not args.no_progress, train_edges=args.train_edges)
    with init(backend=args.backend) as session:
        torch.manual_seed(args.seed)
        layers = strategy.num_layers() or args.layers
        model = MODELS[args.model](graph.ndata["feat"].shape[1], args.hidden, args.hidden,
                                   layers, dropout=args.dropout,
                                   row_normalize=args.row_normalize)
        sink = _MetricsSink(sys.stdout, args.metrics_file) if session.is_main else None
        try:
            train_link(graph, strategy, model, config, sink, args.cache_dir)
        finally:
            if sink is not None:
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
    p.add_argument("--task", choices=("node", "link"), default="node",
                   help="node classification (the Trainer), or link prediction on the "
                        "dataset's edges (docs/link_prediction.md)")
    p.add_argument("--edge-batch-size", type=number(int, 1), default=1024,
                   help="--task link: training edges per rank per step")
    p.add_argument("--negatives", type=number(int, 1), default=1,
                   help="--task link: uniform negatives per training edge")
    p.add_argument("--train-edges", type=number(int, 1), metavar="N",
                   help="--task link: train on N of the training edges (a seeded random "
                        "choice, the same every epoch; default all)")
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


# name: (help, add the arguments, run)
COMMANDS: dict[str, tuple[str, Callable, Callable]] = {
    "train": ("train a reference model under torchrun/srun with a strategy; JSON lines out",
              _add_train, _cmd_train),
}
