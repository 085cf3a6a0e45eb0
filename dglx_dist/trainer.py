"""The front door: one ``Trainer`` for every strategy.

A DGL training script changes by a handful of lines::

    session = dglx_dist.init()                                   # from torchrun / srun
    trainer = Trainer(model, "cora-parts", strategy="distdgl", fanouts=(10, 25))
    for epoch in range(epochs):
        for batch in trainer.batches(epoch):                     # the strategy's batches
            loss = F.cross_entropy(trainer.forward(batch), batch.y)
            trainer.step(loss)
    test_acc = trainer.evaluate("test")

or, without a loop of one's own, ``trainer.fit(epochs)`` which also returns the per-epoch
metrics records (wall time, steps, samples, bytes intra/inter-server, peak memory, loss,
accuracy) and writes them as JSON lines.
"""
from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable, Iterator, TextIO

import torch
from tqdm.auto import tqdm

from dglx_dist.measure import SavedBytes, peak_rss_bytes
from dglx_dist.partition.load import PartitionDir
from dglx_dist.runtime.session import Session, current_session
from dglx_dist.strategies.base import STRATEGIES, Batch, Strategy

__all__ = ["Trainer"]

log = logging.getLogger(__name__)
_BYTES = ("sent_intra", "sent_inter", "recv_intra", "recv_inter")


class Trainer:
    """Trains ``model`` on a partition directory with a registered strategy.

    Args:
        model: the user's module; ``forward(blocks, x)`` returns logits.
        partitions: a partition directory (path or :class:`PartitionDir`).
        strategy: a registered strategy name (``dglx_dist.STRATEGIES.names()``) or a strategy
            built with ``STRATEGIES.build`` (then ``options`` must be empty).
        session: the job's session (default: the current one, see ``dglx_dist.init``).
        optimizer: builds the optimizer from the wrapped model's parameters; default Adam.
        lr: learning rate of the default optimizer.
        weight_decay: weight decay of the default optimizer.
        metrics: a stream receiving one JSON line per epoch on rank 0 (e.g. ``sys.stdout``).
        progress: tqdm progress bars on rank 0.
        **options: the strategy's options (validated against its Config).
    """

    def __init__(self, model: torch.nn.Module, partitions, strategy: str | Strategy = "distdgl", *,
                 session: Session | None = None,
                 optimizer: Callable[[Any], torch.optim.Optimizer] | None = None,
                 lr: float = 0.01, weight_decay: float = 0.0, metrics: TextIO | None = None,
                 progress: bool = True, **options: Any):
        if isinstance(strategy, Strategy):
            if options:
                raise ValueError(f"options {sorted(options)} given with a built strategy; "
                                 f"pass them to STRATEGIES.build instead")
            self.strategy = strategy
        else:
            self.strategy = STRATEGIES.build(strategy, **options)
        self.session = session or current_session()
        pdir = partitions if isinstance(partitions, PartitionDir) else PartitionDir(partitions)
        self.strategy.setup(self.session, pdir)
        self.model = self.strategy.wrap_model(model)
        params = self.model.parameters()
        self.optimizer = (optimizer(params) if optimizer is not None else
                          torch.optim.Adam(params, lr=lr, weight_decay=weight_decay))
        self.metrics, self.progress = metrics, progress
        self.epoch = 0
        self.saved = SavedBytes()  # activation memory of the training forwards
        self.history: list[dict[str, Any]] = []

    def batches(self, epoch: int | None = None) -> Iterator[Batch]:
        """One epoch of the strategy's batches (every rank gets the same number)."""
        epoch = self.epoch if epoch is None else epoch
        it = self.strategy.batches(epoch)
        if self.progress and self.session.is_main:
            it = tqdm(it, desc=f"epoch {epoch}", unit="step", leave=False)
        self.model.train()
        yield from it

    def forward(self, batch: Batch) -> torch.Tensor:
        """Logits for ``batch`` (what the strategy does between layers included)."""
        self.saved.start()
        with torch.autograd.graph.saved_tensors_hooks(self.saved.pack, lambda t: t):
            return self.strategy.forward(self.model, batch)

    def step(self, loss: torch.Tensor) -> None:
        """Backward and optimizer step (gradients are synchronised by the strategy)."""
        self.optimizer.zero_grad(set_to_none=True)
        try:
            loss.backward()
        except RuntimeError as exc:  # a gradient all-reduce failed: name the peer
            failure = self.session.world.peer_failure("all_reduce (gradients)", exc)
            if failure is None:
                raise
            raise failure from exc
        self.strategy.after_backward()
        self.optimizer.step()

    def evaluate(self, split: str = "test") -> float:
        """Accuracy on ``split`` over all partitions (collective)."""
        return self.strategy.evaluate(self.model, split)

    def close(self) -> None:
        """Releases what the strategy holds (KVStore memory); the session stays up."""
        self.strategy.close()

    def fit(self, epochs: int, eval_every: int = 1,
            loss_fn: Callable = torch.nn.functional.cross_entropy) -> list[dict[str, Any]]:
        """Trains ``epochs`` epochs; returns (and writes) one metrics record per epoch.

        Validation accuracy is measured every ``eval_every`` epochs and test accuracy after the
        last epoch (``test_acc`` in the last record).
        """
        if self.strategy.owns_training:
            return self._fit_owned(epochs, eval_every)
        for i in range(epochs):
            before = self.session.counter.snapshot()
            self.saved.reset()
            t0 = time.perf_counter()
            losses, steps, samples = 0.0, 0, 0
            for batch in self.batches():
                logits = self.forward(batch)
                # a rank with no labelled rows in this step still runs backward (the strategy's
                # exchanges are collective) with a loss of zero
                loss = loss_fn(logits, batch.y) if batch.y.numel() else logits.sum() * 0.0
                self.step(loss)
                losses += float(loss.detach())
                steps += 1
                samples += batch.seeds.numel()
            wall = time.perf_counter() - t0
            after = self.session.counter.snapshot()
            record = self._record(wall, steps, samples, losses, before, after)
            last = i == epochs - 1
            if last or (eval_every and (i + 1) % eval_every == 0):
                record["val_acc"] = round(self.evaluate("val"), 4)
            if last:
                record["test_acc"] = round(self.evaluate("test"), 4)
            self._emit(record)
            self.epoch += 1
        return self.history

    def _fit_owned(self, epochs: int, eval_every: int) -> list[dict[str, Any]]:
        """``fit`` for a strategy that runs its own training pipeline (epochs may overlap):
        the strategy calls back once per epoch, when that epoch's update is applied."""
        first, before = self.epoch, [self.session.counter.snapshot()]
        bar = tqdm(total=epochs, desc="epochs", unit="epoch", leave=False,
                   disable=not (self.progress and self.session.is_main))

        def on_epoch(epoch: int, info: dict[str, Any]) -> None:
            after = self.session.counter.snapshot()
            record = self._record(info.pop("wall"), 1, info.pop("samples", 0),
                                  info.pop("loss"), before[0], after)
            record.update(info)
            i = epoch - first
            if i == epochs - 1 or (eval_every and (i + 1) % eval_every == 0):
                record["val_acc"] = round(self.evaluate("val"), 4)
            if i == epochs - 1:
                record["test_acc"] = round(self.evaluate("test"), 4)
            self._emit(record)
            self.epoch = epoch + 1
            before[0] = self.session.counter.snapshot()
            bar.update(1)

        try:
            self.strategy.fit_epochs(self.optimizer, first, epochs, on_epoch)
        finally:
            bar.close()
        return self.history

    def _record(self, wall: float, steps: int, samples: int, losses: float,
                before: dict[str, int], after: dict[str, int]) -> dict[str, Any]:
        """The epoch's numbers summed (bytes, samples) or maxed (time, memory) over ranks."""
        world = self.session.world
        sums = torch.tensor([after[k] - before[k] for k in _BYTES] + [samples, losses],
                            dtype=torch.float64)
        world.all_reduce(sums)
        maxes = torch.tensor([wall, float(peak_rss_bytes()), float(self.saved.peak)],
                             dtype=torch.float64)
        world.all_reduce(maxes, op="max")
        topo = self.session.topology
        record = {"epoch": self.epoch, "strategy": self.strategy.registered_name,
                  "world_size": self.session.world_size, "servers": topo.num_servers,
                  "epoch_time": round(float(maxes[0]), 4), "steps": steps,
                  "samples": int(sums[4]), "loss": round(float(sums[5]) / max(steps, 1)
                                                         / self.session.world_size, 5)}
        record.update({f"bytes_{k}": int(v) for k, v in zip(_BYTES, sums[:4])})
        record["peak_mem_mb"] = round(float(maxes[1]) / (1 << 20), 1)
        record["peak_saved_mb"] = round(float(maxes[2]) / (1 << 20), 2)
        return record

    def _emit(self, record: dict[str, Any]) -> None:
        self.history.append(record)
        if self.session.is_main:
            log.info("epoch %d: %s", record["epoch"], record)
            if self.metrics is not None:
                self.metrics.write(json.dumps(record) + "\n")
                self.metrics.flush()
