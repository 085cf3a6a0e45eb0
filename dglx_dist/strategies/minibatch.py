"""What the sampled mini-batch strategies share: options, seeds per rank, epochs, evaluation.

A subclass fills ``self.ids[split] = (chunk, total)`` (this rank's seed ids, increasing, and
the split's size over all ranks) and ``self.labels[split]`` (the chunk's labels, in chunk order) in
``setup``, and builds a step's :class:`~dglx_dist.strategies.base.Batch` in :meth:`_batch`.
"""
from __future__ import annotations

import abc
import dataclasses
from typing import Iterator

import dgl
import torch
from torch.nn.parallel import DistributedDataParallel

from dglx_dist.sampling import epoch_batches, steps_per_epoch
from dglx_dist.strategies.base import Batch, Strategy
from dglx_dist.strategies.steps import (Blocks, LoaderPlan, LoaderSpec, Step, sampled_epoch,
                                        sampled_plan)

__all__ = ["MiniBatchConfig", "MiniBatchStrategy"]


@dataclasses.dataclass(frozen=True)
class MiniBatchConfig:
    """Options of every sampled mini-batch strategy (a strategy's Config extends it)."""

    fanouts: tuple[int, ...] = dataclasses.field(
        default=(10, 25), metadata={"help": "Neighbors sampled per layer, input layer first "
                                            "(-1: all); one entry per GNN layer."})
    batch_size: int = dataclasses.field(
        default=1000, metadata={"help": "Seed nodes per rank per step."})
    eval_fanouts: tuple[int, ...] = dataclasses.field(
        default=(), metadata={"help": "Fanouts for evaluation; empty: full neighborhoods."})
    eval_batch_size: int = dataclasses.field(
        default=4096, metadata={"help": "Seed nodes per rank per evaluation step."})
    seed: int = dataclasses.field(default=0, metadata={"help": "Shuffling/sampling seed."})

    def __post_init__(self):
        if not self.fanouts or any(f == 0 or f < -1 for f in self.fanouts):
            raise ValueError(f"fanouts {self.fanouts}: need one entry per layer, each a "
                             f"positive count or -1")
        if self.eval_fanouts and len(self.eval_fanouts) != len(self.fanouts):
            raise ValueError(f"eval_fanouts {self.eval_fanouts} must have one entry per "
                             f"layer ({len(self.fanouts)})")
        if self.batch_size < 1 or self.eval_batch_size < 1:
            raise ValueError("batch_size and eval_batch_size must be >= 1")


class MiniBatchStrategy(Strategy):
    """Base of the strategies that train on sampled mini-batches of seed nodes."""

    ids: dict[str, tuple[torch.Tensor, int]]
    labels: dict[str, torch.Tensor]

    def num_layers(self) -> int:
        return len(self.config.fanouts)

    @classmethod
    def exact_options(cls, num_layers: int) -> dict:
        return {"fanouts": (-1,) * num_layers}

    @abc.abstractmethod
    def _batch(self, seeds: torch.Tensor, fanouts, split: str) -> Batch:
        """The batch of ``seeds`` (from this rank's ``split`` chunk), sampled with ``fanouts``."""

    @abc.abstractmethod
    def _input_rows(self, ids: torch.Tensor):
        """What the model's first layer gets for input nodes ``ids`` (unique)."""

    def _sampling_comm(self):
        """The communicator whose ranks sample together."""
        return self.session.world

    def serves(self, spec: LoaderSpec) -> bool:
        return True  # any fanouts: every step is sampled

    def loader_plan(self, ids: torch.Tensor, spec: LoaderSpec) -> LoaderPlan:
        return sampled_plan(self.session.world, ids, spec)

    def loader_epoch(self, plan: LoaderPlan, spec: LoaderSpec, epoch: int) -> Iterator[Step]:
        return sampled_epoch(self.sampler, self.session.rank, plan, spec, epoch)

    def local_nodes(self) -> torch.Tensor:
        return self.split_ids(torch.arange(self.num_nodes), self.pdir, self.session)

    def full_graph_step(self, num_layers: int) -> tuple[Blocks, object]:
        cached = getattr(self, "_full_graph", None)
        if cached is None or len(cached) != num_layers:
            cached = self.sampler.sample_blocks(self.local_nodes(), (-1,) * num_layers)
            self._full_graph = cached
        return Blocks(cached), self._input_rows(cached[0].srcdata[dgl.NID])

    def _labels_of(self, seeds: torch.Tensor, split: str) -> torch.Tensor:
        return self.labels[split][torch.searchsorted(self.ids[split][0], seeds)]

    def batches(self, epoch: int) -> Iterator[Batch]:
        chunk, total = self.ids["train"]
        steps = steps_per_epoch(total, self.session.world_size, self.config.batch_size)
        seed = self.config.seed * 1_000_003 + epoch * 7919 + self.session.rank
        gen = torch.Generator().manual_seed(seed)
        dgl.seed(seed)  # each epoch's sampling is reproducible on its own
        for seeds in epoch_batches(chunk, steps, self.config.batch_size, gen):
            yield self._batch(seeds, self.config.fanouts, "train")

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, split: str) -> float:
        if split not in self.ids:
            raise ValueError(f"split {split!r}; expected one of {sorted(self.ids)}")
        module = model.module if isinstance(model, DistributedDataParallel) else model
        chunk, total = self.ids[split]
        size = self.config.eval_batch_size
        steps = steps_per_epoch(total, self.session.world_size, size)
        fanouts = self.config.eval_fanouts or tuple(-1 for _ in self.config.fanouts)
        was_training = module.training
        module.eval()
        correct = torch.zeros(2, dtype=torch.float64)
        for i in range(steps):  # every rank takes every step: sampling is collective
            batch = self._batch(chunk[i * size:(i + 1) * size], fanouts, split)
            if batch.seeds.numel() or self.collective_forward:
                pred = self.forward(module, batch).argmax(dim=1)
                correct[0] += (pred == batch.y).sum().item()
                correct[1] += batch.seeds.numel()
        module.train(was_training)
        self.session.world.all_reduce(correct)
        return float(correct[0] / correct[1]) if correct[1] > 0 else 0.0
