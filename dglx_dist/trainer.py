"""The front door without a loop of one's own: ``Trainer`` over the drop-in pieces.

A ``Trainer`` is the drop-in API driven for you: it opens the partitions as a
:class:`~dglx_dist.api.DistGraph`, iterates :class:`~dglx_dist.api.DataLoader` s over the
training and evaluation masks (fanouts and batch sizes from the strategy's options:
:func:`~dglx_dist.strategies.base.trainer_loaders`) and trains the
:func:`~dglx_dist.api.parallelize` d model; there is no second code path::

    session = dglx_dist.init()                                   # from torchrun / srun
    trainer = Trainer(model, "cora-parts", strategy="distdgl", fanouts=(10, 25))
    for epoch in range(epochs):
        for batch in trainer.batches(epoch):                     # the loader's steps
            loss = F.cross_entropy(trainer.forward(batch), batch.y)
            trainer.step(loss)
    test_acc = trainer.evaluate("test")

On a graph with node types the steps' ``x`` is a dict by node type, with learnable rows for
the featureless types (``embed_dim`` wide, trained by ``SparseAdam``; :mod:`dglx_dist.inputs`),
and the labels are the category's: an R-GCN such as :class:`~dglx_dist.models.RGCN` trains
unchanged.

Or ``trainer.fit(epochs)``, which also returns (and writes as JSON lines) the per-epoch metrics
records (docs/metrics.md); its epochs are the loader's steps, or a pipeline of the strategy's
own (:class:`~dglx_dist.strategies.abilities.OwnEpochs`: dorylus).

Checkpoints (collective): ``trainer.save(dir)`` / ``trainer.resume(dir)``, or
``Trainer(..., checkpoint=Checkpointing(dir, every=1))`` to save during ``fit``; what one
holds and how a run resumes: docs/reliability.md.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import math
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence, TextIO

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from dglx_dist.api import DataLoader, DistGraph, NeighborSampler, parallelize
from dglx_dist.api.metrics import PhaseTimer, accuracy, epoch_record
from dglx_dist.checkpoint import Checkpointing
from dglx_dist.checkpoint.manager import CheckpointManager, RandomState
from dglx_dist.config import TRAINER_OPTIMIZER, OptimizerConfig
from dglx_dist.console import EpochBar, bar_disable
from dglx_dist.convs import graph_convs
from dglx_dist.errors import DatasetFormatError, InvalidValueError, NonFiniteLossError
from dglx_dist.inputs import StepInputs
from dglx_dist.kvstore.embedding import DistEmbedding
from dglx_dist.memory import SavedBytes
from dglx_dist.report import json_record, key_values
from dglx_dist.runtime.failure import same_on_every_rank
from dglx_dist.runtime.session import Session
from dglx_dist.strategies.abilities import HoldsRows, StrategyState, epochs_of
from dglx_dist.strategies.base import Strategy
from dglx_dist.strategies.epochs import EpochResult, TrainHooks
from dglx_dist.strategies.steps import LoaderSpec

__all__ = ["Trainer", "Batch"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, eq=False)
class Batch:
    """What one training step sees (a :class:`~dglx_dist.api.DataLoader` step with its rows).

    Attributes:
        blocks: the step's blocks, input layer first (the strategy's state on them).
        x: input features of ``blocks[0]``'s source nodes (under ``p3`` a handle the first
            conv consumes; on a graph with node types a dict by type).
        y: labels of the output nodes.
        seeds: the output nodes' ids (the dataset's; of the category on a typed graph).
    """

    blocks: list
    x: Any
    y: torch.Tensor
    seeds: torch.Tensor


def _loader(graph: DistGraph, seeds, split: str, spec: LoaderSpec,
            options: Mapping[str, Any] | None = None) -> DataLoader:
    """The loader of ``split``'s nodes. Training looks ahead (its rows travel while the
    previous batch computes; on a GPU a worker thread draws, as DGL's default; ``options``:
    its other DGL options); evaluation, whose full neighbourhoods can reach most of the
    graph in one batch, pulls one batch at a time, so its peak memory is one batch's, and
    its full layers normalise by the whole graph's degrees where the strategy says so
    (``LoaderSpec.whole_degrees``): a GCN is scored as it computes on the whole graph."""
    held = isinstance(graph.strategy, HoldsRows) and "feat" in graph.strategy.held_rows
    featured = any("feat" in graph.nodes[t].data for t in graph.ntypes)
    sampler = NeighborSampler(list(spec.fanouts), prefetch_labels=["label"],
                              prefetch_node_feats=["feat"] if featured and not held else [])
    return DataLoader(graph, seeds, sampler, batch_size=spec.batch_size,
                      shuffle=spec.shuffle, drop_last=spec.drop_last, seed=spec.seed,
                      whole_degrees=spec.whole_degrees and not graph.is_typed,
                      **(dict(options or {}) if split == "train" else
                         {"use_prefetch_thread": False}))


class Trainer:
    """Trains ``model`` on a partition directory with a registered strategy.

    Args:
        model: the user's module; ``forward(blocks, x)`` returns logits. It gets the
            package's blocks; one of ``dgl.nn`` convs gets DGL's, made at its edge
            (:func:`~dglx_dist.convs.base.at_the_edge`).
        partitions: a partition directory (path or :class:`PartitionDir`).
        strategy: a registered strategy name (``dglx_dist.STRATEGIES.names()``) or a strategy
            built with ``STRATEGIES.build`` (then ``options`` must be empty).
        session: the job's session (default: the current one, see ``dglx_dist.init``).
        optimizer: builds the optimizer from the wrapped model's parameters; default Adam.
        optim: Adam's settings (default :data:`~dglx_dist.config.TRAINER_OPTIMIZER`).
        lr: replaces ``optim``'s learning rate (a DGL-style keyword).
        weight_decay: replaces ``optim``'s weight decay (a DGL-style keyword).
        metrics: a stream receiving one JSON line per epoch on rank 0 (e.g. ``sys.stdout``).
        progress: tqdm progress bars on rank 0 where stderr is a terminal (over the epochs,
            with the loss, the last validation accuracy and the epoch's time; over each
            epoch's steps while it runs).
        checkpoint: when ``fit`` saves checkpoints (None: never).
        embeddings: sparse embeddings trained alongside the model; checkpoints include their
            rows and optimizer state.
        embed_dim: on a graph with node types, the width of the rows the trainer learns for
            each node type without features (the model's input width for them).
        nonfinite_loss: when an epoch's loss is NaN or infinite, "raise" (after its record:
            :class:`~dglx_dist.errors.NonFiniteLossError`) or "warn" (log it and go on).
        measure_saved_bytes: count the bytes every training forward keeps for its backward
            (a saved-tensor hook on each of them) and report the largest as ``peak_saved_mb``.
        train_loader: the training loader's other options, DGL's ``DataLoader`` keywords
            (``use_prefetch_thread``, ``prefetch_factor``, ``use_uva``, ``gpu_cache``...;
            :meth:`~dglx_dist.config.JobConfig.train_loader` makes them of ``dglx train``'s
            flags).
        **options: the strategy's options (validated against its Config).
    """

    def __init__(self, model: torch.nn.Module, partitions, strategy: str | Strategy = "distdgl", *,
                 session: Session | None = None, optim: OptimizerConfig | None = None,
                 optimizer: Callable[[Any], torch.optim.Optimizer] | None = None,
                 lr: float | None = None, weight_decay: float | None = None,
                 metrics: TextIO | None = None, progress: bool = True,
                 checkpoint: Checkpointing | None = None, embeddings: Sequence[DistEmbedding] = (),
                 embed_dim: int | None = None, nonfinite_loss: str = "raise",
                 measure_saved_bytes: bool = False,
                 train_loader: Mapping[str, Any] | None = None, **options: Any):
        if nonfinite_loss not in ("raise", "warn"):
            raise InvalidValueError(f"nonfinite_loss={nonfinite_loss!r}; expected 'raise' or "
                                    "'warn'")
        self.graph = DistGraph(partitions, strategy, session=session, **options)
        self.session, self.nonfinite_loss = self.graph.session, nonfinite_loss
        self.optim = (optim or TRAINER_OPTIMIZER).with_changes(lr, weight_decay)
        try:
            self.inputs = StepInputs(self.graph, embed_dim, self.optim.lr)
        except (DatasetFormatError, InvalidValueError) as exc:
            raise same_on_every_rank(exc) from None
        if not bool(self.inputs.mask("train").full().any()):
            raise same_on_every_rank(DatasetFormatError(
                f"{self.graph.pdir.path}: no training nodes (train is false for every node); "
                "nothing to train on (a link-prediction dataset, such as `dglx data import "
                "ogbl-*` writes, trains with --task link)"))
        num_layers = len(graph_convs(model)) or None
        train, self._eval_spec = self.graph.trainer_loaders(num_layers)
        self.loader = _loader(self.graph, self.inputs.seeds("train"), "train", train,
                              train_loader)
        # the strategy's device (the rank's GPU in a GPU job), as Lightning's Trainer places it
        self.device = self.graph.strategy.compute_device(self.session)
        self.model = parallelize(model.to(self.device), self.graph)
        self.strategy = self.graph.strategy
        self._eval_loaders: dict[str, DataLoader] = {}
        self.optimizer = (optimizer(self.model.parameters()) if optimizer is not None else
                          self.optim.adam(self.model.parameters()))
        self.metrics, self.progress = metrics, progress
        self.checkpoint = checkpoint
        self.epoch, self.steps = 0, 0  # epochs completed, optimizer steps taken
        # activation memory of the training forwards: a hook on every tensor autograd saves
        self.saved = SavedBytes() if measure_saved_bytes else None
        self.history: list[dict[str, Any]] = []
        self._checkpoints = CheckpointManager(
            self.session, {"model": self.model, "optimizer": self.optimizer,
                           "strategy": StrategyState(self.strategy), "rng": RandomState()},
            progress=self, embeddings=[*embeddings, *self.inputs.embeddings],
            identity={"world_size": self.session.world_size,
                      "strategy": self.strategy.registered_name,
                      "data": self.graph.pdir.fingerprint()},
            meta={"servers": self.session.topology.num_servers})

    def _batches(self, loader: DataLoader, epoch: int, desc: str,
                 timer: PhaseTimer | None = None) -> Iterator[Batch]:
        """The loader's steps with their rows; ``timer`` laps ``sample`` when the loader hands
        a step over and ``pull`` once its rows are read, and is given the loader's times at
        the end (:meth:`~dglx_dist.api.metrics.PhaseTimer.loader_epoch`)."""
        timer = timer or PhaseTimer()
        loader.set_epoch(epoch)
        steps = iter(loader)
        if self.progress and self.session.is_main:
            steps = tqdm(steps, desc=desc, unit="step", leave=False, total=len(loader),
                         disable=bar_disable(True))
        for input_nodes, output_nodes, blocks in steps:
            timer.lap("sample")
            x, y, seeds = self.inputs.x_y(input_nodes, output_nodes, blocks)
            if isinstance(x, dict):  # rows read through g.ndata are on the host
                x = {nt: v.to(self.device) for nt, v in x.items()}
            elif isinstance(x, torch.Tensor):
                x = x.to(self.device)
            batch = Batch(blocks, x, y.to(self.device), seeds)
            timer.lap("pull")
            yield batch
        timer.loader_epoch(loader.times)

    def batches(self, epoch: int | None = None,
                timer: PhaseTimer | None = None) -> Iterator[Batch]:
        """One epoch of the training loader's steps (every rank gets the same number); once
        they are all consumed, ``self.epoch`` is ``epoch + 1``. ``timer`` laps ``sample`` and
        ``pull`` of each step (``fit`` times its phases)."""
        epoch = self.epoch if epoch is None else epoch
        self.model.train()
        yield from self._batches(self.loader, epoch, f"epoch {epoch}", timer)
        self.epoch = epoch + 1

    def forward(self, batch: Batch) -> torch.Tensor:
        """Logits of ``batch``'s output nodes (what the strategy does between layers
        included); with ``measure_saved_bytes``, the bytes autograd keeps for its backward
        are counted."""
        if self.saved is None:
            return self.model(batch.blocks, batch.x)
        self.saved.start()
        with torch.autograd.graph.saved_tensors_hooks(self.saved.pack, lambda t: t):
            return self.model(batch.blocks, batch.x)

    def step(self, loss: torch.Tensor) -> None:
        """Backward (the strategy's gradient exchange runs at its end) and optimizer step."""
        self._backward(loss)
        self.optimizer_step()

    def _backward(self, loss: torch.Tensor) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.inputs.zero_grad()
        with self.session.peer_errors("all_reduce (gradients)"):
            loss.backward()

    def optimizer_step(self) -> None:
        """Steps the optimizer (and the sparse one of a typed graph's embeddings) on the
        gradients they hold and counts the step (the hook a strategy that computes the
        gradients itself calls)."""
        self.optimizer.step()
        self.inputs.step()
        self.steps += 1

    @torch.no_grad()
    def evaluate(self, split: str = "test") -> float:
        """Accuracy on ``split`` ("train", "val" or "test") over all partitions (collective):
        a loader over the split's mask with the strategy's evaluation fanouts."""
        if split not in ("train", "val", "test"):
            raise InvalidValueError(f"split {split!r}; expected 'train', 'val' or 'test'")
        if split not in self._eval_loaders:
            self._eval_loaders[split] = _loader(self.graph, self.inputs.seeds(split), split,
                                                self._eval_spec)
        was_training = self.model.training
        self.model.eval()
        preds, labels = [], []
        for batch in self._batches(self._eval_loaders[split], 0, f"eval {split}"):
            preds.append(self.forward(batch).argmax(1))  # every rank: forwards may exchange
            labels.append(batch.y)
        self.model.train(was_training)
        return float(accuracy(torch.cat(preds), torch.cat(labels), session=self.session))

    def close(self) -> None:
        """Releases what the graph and its strategy hold (KVStore memory) and the checkpoint
        directories this run holds (their locks); the session stays up."""
        self._checkpoints.close()
        self.graph.close()

    def fit(self, epochs: int, eval_every: int = 1,
            loss_fn: Callable = F.cross_entropy) -> list[dict[str, Any]]:
        """Trains until ``epochs`` epochs are complete (after :meth:`resume`, the remaining
        ones); returns (and writes) one metrics record per epoch, the resumed run's included.
        Validation accuracy is measured every ``eval_every`` epochs and test accuracy after the last epoch (``test_acc`` in the
        last record). With ``checkpoint`` set, a checkpoint is saved every
        ``checkpoint.every`` epochs and after the last one.

        Raises:
            ValueError: a ``loss_fn`` the strategy's own pipeline cannot honour (it computes
                cross-entropy itself).
        """
        hooks = TrainHooks(functools.partial(self._loader_epoch, loss_fn=loss_fn),
                           self.optimizer_step, loss_fn)
        if self.epoch >= epochs and self.epoch and self.session.is_main:  # said, not silent
            log.warning("nothing to train: the run resumed after epoch %d, and fit was asked "
                        "for %d epoch(s) in all (--epochs counts the resumed ones too)",
                        self.epoch, epochs)
        with EpochBar(max(epochs, self.epoch), self.progress and self.session.is_main,
                      initial=self.epoch) as bar:
            before = self.session.counter.snapshot()
            for result in epochs_of(self.strategy, range(self.epoch, epochs), hooks):
                peak = self.saved.peak if self.saved is not None else None
                record = epoch_record(result, before, self.session.counter.snapshot(),
                                      self.strategy.registered_name, peak, self.session)
                self.epoch = result.epoch + 1
                self._epoch_done(record, epochs, eval_every)
                before = self.session.counter.snapshot()
                bar.update(record)
        return self.history

    def _loader_epoch(self, epoch: int, loss_fn: Callable) -> EpochResult:
        """One epoch of :meth:`batches`: forward, ``loss_fn``, :meth:`step`; each phase of
        the step timed (:data:`~dglx_dist.api.metrics.STEP_PHASES`: the record's
        ``phases_max``). On a GPU the host's clock times what it waited for: a phase's
        kernels may finish in a later one's."""
        if self.saved is not None:
            self.saved.reset()
        t0 = time.perf_counter()
        losses, steps, samples, bad_step = 0.0, 0, 0, None
        timer = PhaseTimer()
        for batch in self.batches(epoch, timer):
            logits = self.forward(batch)
            # a rank with no labelled rows in this step still runs backward (the strategy's
            # exchanges are collective) with a loss of zero
            loss = loss_fn(logits, batch.y) if batch.y.numel() else logits.sum() * 0.0
            timer.lap("forward")
            self._backward(loss)
            timer.lap("backward+allreduce")
            self.optimizer_step()
            timer.lap("optimizer")
            losses += float(loss.detach())
            if bad_step is None and not math.isfinite(losses):
                bad_step = steps
            steps += 1
            samples += batch.seeds.numel()
            timer.restart()
        wall = time.perf_counter() - t0
        return EpochResult(epoch, wall, steps, samples, losses, bad_step,
                           phases=timer.finish(wall))

    def _epoch_done(self, record: dict[str, Any], epochs: int, eval_every: int) -> None:
        """Evaluates as due, emits the epoch's record, then saves a checkpoint as due; stops
        the run (every rank: the record is the same everywhere) on a non-finite loss."""
        if not math.isfinite(record["loss"]):
            step = record.pop("first_nonfinite_step", None)
            message = (f"epoch {record['epoch']}: the loss is {record['loss']} (first non-finite "
                       f"at step {'?' if step is None else step} of the epoch, on some rank)")
            if self.nonfinite_loss == "raise":
                self._emit(record)
                raise NonFiniteLossError(f"{message}; lower the learning rate, check the "
                                         f"features for NaN/Inf, or pass nonfinite_loss='warn'")
            if self.session.is_main:  # the record is the same on every rank
                log.warning("%s; going on (nonfinite_loss='warn')", message)
        record.pop("first_nonfinite_step", None)
        done, last = record["epoch"] + 1, record["epoch"] + 1 == epochs
        if last or (eval_every and done % eval_every == 0):
            record["val_acc"] = round(self.evaluate("val"), 4)
        if last:
            record["test_acc"] = round(self.evaluate("test"), 4)
        self._emit(record)
        if self.checkpoint is not None and (last or done % self.checkpoint.every == 0):
            self.save(self.checkpoint.dir, keep=self.checkpoint.keep)

    # -- checkpoints (dglx_dist.checkpoint.manager names the files) ------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The run's progress: epochs completed, optimizer steps, the metrics history."""
        return {"epoch": self.epoch, "steps": self.steps, "history": list(self.history)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.steps = int(state["epoch"]), int(state["steps"])
        self.history = list(state["history"])

    def save(self, directory: str | Path, keep: int = 2) -> Path:
        """Writes a checkpoint of the run as it stands (collective; docs/reliability.md)
        into ``directory/epoch-NNNNNN`` and keeps the newest ``keep``. Call it between epochs:
        a resumed run starts at the epoch after ``self.epoch``'s last completed one."""
        return self._checkpoints.save(directory, keep)

    def resume(self, directory: str | Path) -> bool:
        """Loads the newest intact checkpoint under ``directory`` (collective); False when there
        is none. Raises :class:`~dglx_dist.errors.CheckpointError` on every rank when the
        checkpoint is from another job shape or a rank cannot load its share."""
        return self._checkpoints.resume(directory)

    def resume_or_start(self, resume: bool = False) -> bool:
        """Resumes from ``checkpoint.dir`` when ``resume`` is set or the launcher restarted the
        job (torchrun ``--max-restarts``); True when a checkpoint was loaded (collective; see
        :meth:`CheckpointManager.resume_or_start
        <dglx_dist.checkpoint.manager.CheckpointManager.resume_or_start>`)."""
        return self._checkpoints.resume_or_start(self.checkpoint, resume)

    def _emit(self, record: dict[str, Any]) -> None:
        self.history.append(record)
        if self.session.is_main:  # the detail with -v; the console has the bar
            log.debug("epoch %d: %s", record["epoch"], key_values(record))
            if self.metrics is not None:
                self.metrics.write(json_record(record) + "\n")
                self.metrics.flush()


