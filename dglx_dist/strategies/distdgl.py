"""``distdgl``: DistDGL's mini-batch training.

* Partitioning: METIS with multi-constraint balancing (train/val/test nodes and edges), one
  part per server, HALO nodes in each part's structure (``metis`` partitioner).
* Owner-compute sampling: seeds come from the two-level training-set split (equal steps for
  every rank; a rank's chunk lies mostly in its server's part); 1-hop sampling of owned nodes is
  local thanks to HALO nodes, deeper hops of remote nodes are sampled by their owners
  (:class:`~dglx_dist.sampling.PartitionSampler`).
* Features are pulled from the KVStore: rows of the own server from shared memory, the rest
  through the comm layer. Labels are pulled once at setup for the rank's own seed chunks (seeds
  never leave them and labels never change), so steps pull features only.
* Synchronous SGD: the model is wrapped in DDP (its C++ all-reduce overlaps with backward and
  waits at most the job's timeout); its bytes are accounted to the comm layer's counters.
* Evaluation: every partition's val/test nodes, with full neighborhoods (or ``eval_fanouts``).
"""
from __future__ import annotations

import dataclasses
from typing import Iterator

import dgl
import torch
from torch.nn.parallel import DistributedDataParallel

from dglx_dist.kvstore import DistKVStore, RowPolicy
from dglx_dist.partition.load import PartitionDir
from dglx_dist.runtime.session import Session
from dglx_dist.runtime.topology import Topology
from dglx_dist.sampling import PartitionSampler, epoch_batches, even_chunk, steps_per_epoch
from dglx_dist.strategies.base import STRATEGIES, Batch, PartitionSpec, Strategy

__all__ = ["DistDGLStrategy"]


@STRATEGIES.register("distdgl")
class DistDGLStrategy(Strategy):
    """METIS partitions + HALO, distributed sampling, KVStore features, DDP."""

    @dataclasses.dataclass(frozen=True)
    class Config:
        fanouts: tuple[int, ...] = dataclasses.field(
            default=(10, 25), metadata={"help": "Neighbors sampled per layer, input layer first "
                                                "(-1: all); one entry per GNN layer."})
        batch_size: int = dataclasses.field(
            default=1000, metadata={"help": "Seed nodes per rank per step."})
        eval_fanouts: tuple[int, ...] = dataclasses.field(
            default=(), metadata={"help": "Fanouts for evaluation; empty: full neighborhoods."})
        eval_batch_size: int = dataclasses.field(
            default=4096, metadata={"help": "Seed nodes per rank per evaluation step."})
        balance: tuple[str, ...] = dataclasses.field(
            default=("train", "val", "test", "edges"),
            metadata={"help": "METIS constraints when dglx partitions for this strategy."})
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

    def num_layers(self) -> int:
        return len(self.config.fanouts)

    def partition_spec(self, topology: Topology) -> PartitionSpec:
        return PartitionSpec("metis", topology.num_servers, {"balance": list(self.config.balance)})

    def setup(self, session: Session, pdir: PartitionDir) -> None:
        self.check_partitions(pdir, session.topology)
        self.session = session
        server = session.server_id
        part = pdir.load_part(server)
        self.store = DistKVStore(session)
        policy = RowPolicy(pdir.book)
        self.store.init_data("feat", policy, {server: torch.from_numpy(part.feat)})
        self.store.init_data("label", policy, {server: torch.from_numpy(part.label)},
                             dtype=torch.int64)
        self.sampler = PartitionSampler(part, pdir.book, session.cross, server)
        self.ids, self.labels = {}, {}
        for split in ("train", "val", "test"):
            owned = torch.from_numpy(part.core_gid[getattr(part, split)])
            everyone = torch.cat(session.cross.all_gather_v(owned)).sort().values
            chunk = even_chunk(everyone, session.world_size, session.rank)
            self.ids[split] = (chunk, everyone.numel())
            # seeds always come from this rank's chunk and labels never change: fetch once
            self.labels[split] = self.store.pull("label", chunk)

    def wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        # DDP's own C++ all-reduce (overlapped with backward, bounded by the group's timeout);
        # its bytes are accounted to the comm layer after each backward
        self._grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters()
                               if p.requires_grad)
        return DistributedDataParallel(model)

    def after_backward(self) -> None:
        self.session.world.account_all_reduce(self._grad_bytes)

    def close(self) -> None:
        self.store.close()

    def _batch(self, seeds: torch.Tensor, fanouts, split: str) -> Batch:
        blocks = self.sampler.sample_blocks(seeds, fanouts)
        x = self.store.pull("feat", blocks[0].srcdata[dgl.NID], dedup=False)  # unique ids
        chunk = self.ids[split][0]
        y = self.labels[split][torch.searchsorted(chunk, seeds)]
        return Batch(blocks, x, y, seeds)

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
        for i in range(steps):
            batch = self._batch(chunk[i * size:(i + 1) * size], fanouts, split)
            if batch.seeds.numel():
                pred = self.forward(module, batch).argmax(dim=1)
                correct[0] += (pred == batch.y).sum().item()
                correct[1] += batch.seeds.numel()
        module.train(was_training)
        self.session.world.all_reduce(correct)
        return float(correct[0] / correct[1]) if correct[1] > 0 else 0.0
