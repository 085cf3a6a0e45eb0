"""``dglx train``: a reference model under torchrun/srun with a strategy. Rank 0 shows a
progress bar over the epochs (on a terminal) and writes the metrics records: as JSON lines to
stdout where it is not a terminal or with ``--json``, else the summary table at the end; and
to ``--metrics-out FILE`` (``--metrics-file``, its older name) as JSON lines."""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import json
import logging
import os
import sys
from pathlib import Path
from typing import Callable

from dglx_dist.cli_flags import add_flags, from_args
from dglx_dist.config import MODEL_NAMES, RunConfig, StrategyConfig
from dglx_dist.errors import DiskFullError, InvalidValueError

log = logging.getLogger("dglx_dist.train")

__all__ = ["COMMANDS", "dataset_size", "partition_size", "planned"]


def _cmd_train(args: argparse.Namespace) -> int:
    # every refusal of the arguments comes before any process group or partitioning work
    config = from_args(RunConfig, args)  # the strategy's options: checked by its registry
    if config.task.name == "link":
        return _cmd_train_link(config)
    from dglx_dist.checkpoint import Checkpointing
    from dglx_dist.partition import PartitionDir
    from dglx_dist.prepare import ensure_partitions
    from dglx_dist.runtime import init
    from dglx_dist.runtime.agree import on_every_rank
    from dglx_dist.runtime.env import read_env
    from dglx_dist.trainer import Trainer

    env = read_env()
    config = planned(config, env)  # --strategy auto: the plan's choice and options
    strategy, data, job = config.strategy.build(), config.data, config.job
    _check_before_start(config, strategy, env)
    with init(backend=job.backend, env=env, device=job.device) as session:
        parts = data.partitions or ensure_partitions(data.data or "cora", strategy, session,
                                                     data.cache_dir)
        pdir = PartitionDir(parts)
        model = (_typed_model(config, pdir) if pdir.types is not None else
                 _model(config, strategy, pdir.feat_dim, pdir.num_classes))
        sink = on_every_rank(session, "--metrics-out", lambda: _MetricsSink(
            job.metrics_file if session.is_main else None, job.json))
        checkpoint = (Checkpointing(job.checkpoint_dir, every=job.checkpoint_every)
                      if job.checkpoint_dir else None)
        trainer = Trainer(model, pdir, strategy, session=session, optim=config.optimizer,
                          progress=job.progress, metrics=sink if session.is_main else None,
                          checkpoint=checkpoint, nonfinite_loss=job.nonfinite_loss,
                          embed_dim=config.model.hidden,
                          measure_saved_bytes=job.measure_saved_bytes,
                          train_loader=job.train_loader())
        try:
            trainer.resume_or_start(job.resume)
            trainer.fit(config.loop.epochs, eval_every=config.loop.eval_every)
            if session.is_main:
                sink.summarize()
            _check_learned(trainer, config.loop.epochs, job.fail_on_collapse)
        except BaseException as exc:  # maybe this rank's alone: its peers are not closing
            session.ended_early = f"{type(exc).__name__} on rank {session.rank}"  # with it
            raise
        finally:  # e.g. dorylus's executor processes go with the trainer, also on failure
            trainer.close()
            sink.close()
    return 0


def planned(config: RunConfig, env) -> RunConfig:
    """``config`` with ``--strategy auto`` resolved (:func:`dglx_dist.planner.auto.resolve`;
    any other strategy as it is): planned for the run's task, the dataset or partitions, the
    launch's servers and ranks (sharing this machine's cores where all run on it), and a
    server's memory (``--memory-limit`` for this machine's ranks, else its total; every rank
    plans alike), for the ranks' device (a GPU's model at its speed-up: :class:`Launch`),
    among the strategies given partitions fit (and, for the link task, that train it); the
    plan's two lines logged by rank 0; its training loader on a worker thread, with sampler
    processes, where the plan says so (:func:`~dglx_dist.planner.auto.planned_loader`)."""
    from dglx_dist.planner.auto import (Launch, planned_loader, resolve, server_cores,
                                        server_memory, shared_cores)
    from dglx_dist.runtime.session import placement
    from dglx_dist.runtime.topology import Topology
    from dglx_dist.strategies.base import fits_partitions

    s, m, job = config.strategy, config.model, config.job
    pdir, topology = _partitions(config), Topology(env.num_servers, env.ranks_per_server)
    memory = server_memory(job.memory_limit, env.ranks_per_server, env.ranks_on_host)
    gpu = placement(env, job.backend or env.backend, job.device).device.type == "cuda"
    launch = Launch(env.num_servers, env.ranks_per_server, memory,
                    shared_cores=shared_cores(env.ranks_on_host, env.world_size), model=m.name,
                    hidden=m.hidden, layers=m.layers, task=config.task,
                    server_cores=server_cores(env.ranks_on_host, env.ranks_per_server), gpu=gpu)
    name, options, plan = resolve(
        s.name, s.values(), lambda: _plan_graph(config, pdir), launch,
        accept=None if pdir is None else lambda built: fits_partitions(built, pdir, topology),
        tell=env.rank == 0)
    return planned_loader(dataclasses.replace(config, strategy=StrategyConfig.of(name, **options)),
                          plan)


def _partitions(config: RunConfig):
    from dglx_dist.partition import PartitionDir

    return None if config.data.partitions is None else PartitionDir(config.data.partitions)


def _plan_graph(config: RunConfig, pdir):
    from dglx_dist.planner import graph_of_directory, graph_of_partitions
    from dglx_dist.prepare import resolve_dataset

    if pdir is not None:
        return graph_of_partitions(pdir, embed_dim=config.model.hidden)
    return graph_of_directory(resolve_dataset(config.data.data or "cora"),
                              embed_dim=config.model.hidden)


def _model(config: RunConfig, strategy, in_feats: int, out_feats: int):
    """The run's reference model, seeded (its depth: the strategy's, else ``--layers``)."""
    import torch

    from dglx_dist.models import MODELS
    from dglx_dist.strategies.base import implied_layers

    m = config.model
    implied = implied_layers(strategy)
    if implied and m.layers not in (implied, type(m)().layers):  # --layers given, and unused
        option = "fanouts" if hasattr(strategy.config, "fanouts") else "num_layers"
        log.warning("--layers %d is not used: strategy %r takes the depth from its option %s "
                    "(%d layers); give it there (--strategy-opt %s:%s=...)", m.layers,
                    strategy.registered_name, option, implied, strategy.registered_name, option)
    torch.manual_seed(config.loop.seed)
    return MODELS[m.name](in_feats, m.hidden, out_feats, implied or m.layers,
                          dropout=m.dropout, row_normalize=m.row_normalize, convs=m.convs)


def _typed_model(config: RunConfig, pdir):
    """The R-GCN of a dataset with node types (:class:`~dglx_dist.models.RGCN`), seeded:
    featured types projected to ``--hidden``, the others' learned rows that wide."""
    import torch

    from dglx_dist.models import RGCN

    m, types = config.model, pdir.types
    torch.manual_seed(config.loop.seed)  # no predicted type: the Trainer refuses the graph
    return RGCN({t: d for t, d in types.feat_dims.items() if d},
                [rel for _, rel, _ in types.canonical_etypes], m.hidden, pdir.num_classes,
                m.layers, dropout=m.dropout, category=types.predicted(), convs=m.convs)


def _check_learned(trainer, epochs: int, fail: bool) -> None:
    """Warns (or, with ``fail``, raises) when the run's test accuracy is at chance."""
    from dglx_dist.tasks.collapse import act_on, majority_rate, node_verdict

    test_acc = trainer.history[-1].get("test_acc") if trainer.history else None
    if test_acc is None:  # nothing trained in this run (a resumed, finished one)
        return
    inputs = trainer.inputs  # the labeled type's labels (``_N``'s without types)
    labels = trainer.graph.nodes[inputs.category].data["label"].full()[
        inputs.mask("test").full().bool()]
    act_on(node_verdict(test_acc, majority_rate(labels), epochs), fail)


def _check_before_start(config: RunConfig, strategy, env) -> None:
    """The refusals of a node-task run that need the strategy and the launch environment:
    the training loader's GPU flags where they cannot work (:func:`_check_gpu_flags`),
    partitions that do not fit them, and a job whose memory estimate does not fit this
    machine (:func:`~dglx_dist.strategies.footprint.check_job_memory`)."""
    from dglx_dist.partition import PartitionDir
    from dglx_dist.prepare import check_partitions_of, resolve_dataset
    from dglx_dist.runtime.topology import Topology
    from dglx_dist.strategies.base import check_partitions
    from dglx_dist.strategies.footprint import JobSize, ModelSize, check_job_memory

    data = config.data
    _check_roles(config)
    _check_gpu_flags(config, strategy, env)
    if data.partitions is not None:
        if data.data is not None:
            check_partitions_of(data.partitions, data.data)
        graph = PartitionDir(data.partitions)
        size = partition_size(graph, config.model.hidden)
    else:
        size = dataset_size(resolve_dataset(data.data or "cora"), config.model.hidden)
    if size.typed and config.model.name != MODEL_NAMES[0]:
        raise InvalidValueError(f"--model {config.model.name}: a dataset with node types trains "
                                "the R-GCN of dglx_dist.models.RGCN (--hidden, --layers, "
                                "--dropout); leave --model out")
    if data.partitions is not None:
        check_partitions(strategy, graph, Topology(env.num_servers, env.ranks_per_server))
    job = JobSize(size, env.world_size, env.ranks_on_host,
                  ModelSize(hidden=config.model.hidden), env.ranks_per_server)
    check_job_memory(strategy, job, config.job.memory_limit, override="--memory-limit BYTES")


def _check_gpu_flags(config: RunConfig, strategy, env) -> None:
    """Refuses the training loader's GPU options where they cannot work, before the job
    starts (the loader refuses them too, but only once the strategy has set up, on every
    rank): ``--gpu-cache`` under a strategy that holds its feature rows itself (p3's columns,
    granndis's preload), and ``--use-uva`` or ``--gpu-cache`` where the ranks run on the CPU
    (the device :func:`~dglx_dist.runtime.session.placement` gives them, as ``init`` will)."""
    from dglx_dist.errors import NotSupportedError
    from dglx_dist.runtime.session import placement
    from dglx_dist.strategies.abilities import HoldsRows

    job = config.job
    if job.gpu_cache and isinstance(strategy, HoldsRows) and "feat" in strategy.held_rows:
        raise NotSupportedError(f"--gpu-cache: strategy {strategy.registered_name!r} holds its "
                                "feature rows itself; expected no --gpu-cache with it")
    asked = [flag for flag, on in (("--use-uva", job.use_uva), ("--gpu-cache", job.gpu_cache))
             if on]
    if asked and placement(env, job.backend or env.backend, job.device).device.type == "cpu":
        why = "--device cpu" if (job.device or env.device) == "cpu" else "no CUDA device here"
        verb = "puts" if len(asked) == 1 else "put"
        raise InvalidValueError(f"{' and '.join(asked)} {verb} the training loader's work on the "
                                f"rank's GPU, but the ranks run on the CPU ({why}); expected "
                                "a GPU job, or no GPU loader flags")


def _check_roles(config: RunConfig) -> None:
    """Refuses a path given inside ``--checkpoint-dir``, which holds checkpoints alone (the
    job refused the directory it had just put its cache or metrics file in, asking for the
    empty directory the user had given)."""
    from dglx_dist.data.atomic import holds

    root, data = config.job.checkpoint_dir, config.data
    if root is None:
        return
    for flag, path in (("--cache-dir", data.cache_dir), ("--metrics-out", config.job.metrics_file),
                       ("--partitions", data.partitions), ("--data", data.data)):
        if path is None or (flag == "--data" and not Path(path).exists()):
            continue  # --data: a built-in name is no path
        if holds(root, path):
            raise InvalidValueError(f"{flag} {path} is inside --checkpoint-dir {root}, which "
                                    f"holds checkpoints alone (old ones are pruned there); "
                                    f"choose another place for one of them")


def dataset_size(path: Path, embed_dim: int):
    """The :class:`~dglx_dist.strategies.cost.shapes.GraphShape` the memory check sizes for a
    dataset directory, from its meta.json alone (cut by
    :data:`~dglx_dist.strategies.holdings.CHECK_CUTS`): a typed one per node type (learned
    rows ``embed_dim`` wide for the featureless types, as the Trainer makes them), else its
    nodes, edges and feature width."""
    from dglx_dist.data import read_meta
    from dglx_dist.data.format import is_hetero, read_hetero_meta
    from dglx_dist.strategies.cost.shapes import GraphShape
    from dglx_dist.strategies.holdings import CHECK_CUTS

    if not is_hetero(path):
        meta = read_meta(path)
        return GraphShape(meta.num_nodes, meta.num_edges, meta.feat_dim,
                          max(meta.num_classes, 1), edge_cuts=CHECK_CUTS)
    meta = read_hetero_meta(path)
    return GraphShape.of_types([(t, s["num_nodes"], s["feat_dim"])
                                for t, s in meta.ntypes.items()], sum(meta.num_edges),
                               embed_dim, num_classes=max(meta.num_classes, 1),
                               edge_cuts=CHECK_CUTS)


def partition_size(pdir, embed_dim: int):
    """The same (:func:`dataset_size`) for a partition directory, from its manifest."""
    from dglx_dist.strategies.cost.shapes import GraphShape
    from dglx_dist.strategies.holdings import CHECK_CUTS

    types = pdir.types
    if types is None:
        return GraphShape(pdir.num_nodes, pdir.num_edges, pdir.feat_dim,
                          max(pdir.num_classes, 1), edge_cuts=CHECK_CUTS)
    counts = [int(n) for n in types.ntype_offsets[1:] - types.ntype_offsets[:-1]]
    return GraphShape.of_types([(t, n, types.feat_dims.get(t, 0))
                                for t, n in zip(types.ntypes, counts)], types.num_edges,
                               embed_dim, num_classes=max(pdir.num_classes, 1),
                               edge_cuts=CHECK_CUTS)


def _cmd_train_link(config: RunConfig) -> int:
    """``--task link``: dglx_dist.tasks.link on the dataset's edges."""
    from dglx_dist.data import read_meta
    from dglx_dist.prepare import resolve_dataset
    from dglx_dist.runtime import init
    from dglx_dist.runtime.agree import on_every_rank
    from dglx_dist.runtime.env import read_env
    from dglx_dist.tasks.collapse import act_on, link_verdict
    from dglx_dist.tasks.link import train_link

    job = config.job
    for flag, value, why in (
            ("--partitions", config.data.partitions, "it partitions the training graph it "
                                                     "splits off --data"),
            ("--checkpoint-dir", job.checkpoint_dir, "it keeps no checkpoints"),
            ("--memory-limit", job.memory_limit, "its memory is not estimated: the strategies' "
                                                 "memory fits were measured on node training")):
        if value not in (None, False):
            raise InvalidValueError(f"{flag} is not supported with --task link ({why})")
    env = read_env()
    config = planned(config, env)  # --strategy auto: the plan's choice for the link task
    strategy = config.strategy.build()
    data = resolve_dataset(config.data.data or "cora")
    with init(backend=job.backend, env=env, device=job.device) as session:
        hidden = config.model.hidden  # embeddings as wide as the hidden layers
        model = _model(config, strategy, read_meta(data).feat_dim, hidden)
        sink = on_every_rank(session, "--metrics-out", lambda: _MetricsSink(
            job.metrics_file, job.json) if session.is_main else None)
        try:
            test = train_link(data, strategy, model, config, sink, session)
            if sink is not None:
                sink.summarize()
            act_on(link_verdict(test.get("auc"), config.loop.epochs), job.fail_on_collapse)
        finally:
            if sink is not None:
                sink.close()
    return 0


class _MetricsSink:
    """Where rank 0's metrics records go: appended to ``path`` (``--metrics-out``) as JSON
    lines, and to stdout as JSON lines where it is not a terminal or with ``json_stdout``
    (``--json``); a terminal gets the summary table instead (:meth:`summarize`)."""

    def __init__(self, path: Path | None, json_stdout: bool = False, stream=None):
        self.stream = sys.stdout if stream is None else stream
        self.json = json_stdout or not _is_terminal(self.stream)
        self.records: list[dict] = []
        self.path = path
        try:  # opened before the first epoch: a bad path is refused before any training
            self.file = _open_appending(path) if path is not None else None
        except OSError as exc:
            why = "a named pipe nobody reads" if exc.errno == errno.ENXIO else \
                exc.strerror or exc
            raise InvalidValueError(f"--metrics-out {path}: cannot be opened for appending "
                                    f"({why}); expected a file in an existing, "
                                    f"writable directory") from None

    def write(self, text: str) -> None:
        if self.json:
            self.stream.write(text)
        else:  # the records, for the table (the lines are the package's own JSON)
            self.records += [json.loads(line) for line in text.splitlines() if line.strip()]
        self._to_file(lambda file: file.write(text))

    def flush(self) -> None:
        self.stream.flush()
        self._to_file(lambda file: file.flush())

    def summarize(self) -> None:
        """The run's summary table and test result, where stdout takes no JSON lines."""
        from dglx_dist.report import epoch_table, result_line

        if self.json or not self.records:
            return
        result = result_line(self.records)
        self.stream.write(epoch_table(self.records) + (f"\n\n{result}\n" if result else "\n"))
        self.stream.flush()

    def close(self) -> None:
        self._to_file(lambda file: file.close())
        self.file = None

    def _to_file(self, act: Callable) -> None:
        """``act(file)`` where there is a file; a write the file refuses (its disk is full, the
        pipe's reader left) is one line, and the file is given up (nothing more goes there)."""
        if self.file is None:
            return
        try:
            act(self.file)
        except OSError as exc:
            file, self.file = self.file, None
            with contextlib.suppress(OSError):
                file.close()  # its descriptor goes too, whatever was left unwritten
            kind = DiskFullError if exc.errno in (errno.ENOSPC, errno.EDQUOT) else \
                InvalidValueError
            raise kind(f"--metrics-out {self.path}: the metrics records could not be written "
                       f"({exc.strerror or exc}); those written before are kept: free space "
                       f"there or choose another file") from None


def _open_appending(path: Path):
    """``path`` opened for appending, as ``open(path, "a")``, without waiting for a reader
    where it is a named pipe (no reader: ENXIO, instead of blocking rank 0 for good)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC,
                 0o666)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a")


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


# name: (help, add the arguments, run)
COMMANDS: dict[str, tuple[str, Callable, Callable]] = {
    "train": ("train a reference model under torchrun/srun with a strategy; metrics records "
              "as JSON lines (--metrics-out FILE, --json) and a summary table",
              lambda p: add_flags(p, RunConfig), _cmd_train),  # every section's flags
}
