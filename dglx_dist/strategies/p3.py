"""``p3``: P3's push-pull parallelism over hash-partitioned structure and sliced features.

* Partitioning (``feature_dim`` over ``hash``, one part per rank): rank ``r`` owns the nodes
  the hash gives it, with their in-edges (HALO sources included), and holds column slice ``r``
  of *every* node's features. No feature row ever crosses the network.
* Each rank's seeds are its own training nodes (balanced so every rank takes the same number
  of steps); it samples their k-hop blocks, pulling structure only (remote frontier nodes are
  sampled by their owners, :class:`~dglx_dist.sampling.PartitionSampler`).
* Layer 1, model parallel ("1M"): every rank's first block is pushed to every rank; each rank
  computes, from its own column slice, the partial layer-1 result of every rank's batch with its
  slice of the layer-1 input weights (:mod:`dglx_dist.models.layers` says how for SAGEConv,
  GraphConv and GATConv); the partials are summed at the batch's owner
  (:func:`~dglx_dist.runtime.autograd.reduce_to_owners`).
* The owner finishes layer 1 (bias, attention, activation, normalisation: "1D") and runs
  layers 2..k data parallel under DDP. Backward mirrors it: the layer-1 output gradient is
  pushed to every rank, which updates only its weight slice (no all-reduce for those); DDP
  all-reduces the rest. Slice gradients are divided by the world size, as DDP averages.
* Evaluation: every rank's share of the val/test nodes, full neighbourhoods by default.

The model keeps its ``forward(blocks, x)``: its first dgl.nn conv is replaced by
:class:`P3FirstLayer`, which ignores the ``x`` it is given (the batch's ``x`` is this rank's
column slice of its input rows) and computes from the column slices held by each rank, so
nothing may transform the input features before the first conv. A model attribute
``row_normalize = True`` (as in :class:`~dglx_dist.models.SAGE`) is honoured by normalising
the stored slices with the global row sums once at setup.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Iterator

import dgl
import torch
from torch.nn.parallel import DistributedDataParallel

from dglx_dist.kvstore.policy import rows_at
from dglx_dist.models.layers import adapter_for, first_conv
from dglx_dist.partition.load import PartitionDir
from dglx_dist.runtime.session import Session
from dglx_dist.runtime.topology import Topology
from dglx_dist.sampling import PartitionSampler, owner_balanced_chunks
from dglx_dist.strategies.p3_layer import P3FirstLayer
from dglx_dist.strategies.base import STRATEGIES, Batch, PartitionSpec
from dglx_dist.strategies.minibatch import MiniBatchConfig, MiniBatchStrategy

__all__ = ["P3Strategy"]


@STRATEGIES.register("p3")
class P3Strategy(MiniBatchStrategy):
    """Hash structure + feature-dimension slices; layer 1 model parallel, the rest DDP."""

    collective_forward = True

    @dataclasses.dataclass(frozen=True)
    class Config(MiniBatchConfig):
        pipeline: bool = dataclasses.field(
            default=False, metadata={"help": "P3's pipeline: layer 1 of the next two batches "
                                             "runs and travels while one trains (3 in flight); "
                                             "layer-1 weight slices see gradients 3 steps "
                                             "stale, stashed per batch."})

    def partition_spec(self, topology: Topology) -> PartitionSpec:
        return PartitionSpec("feature_dim", topology.world_size, {"structure": "hash"})

    def check_partitions(self, pdir: PartitionDir, topology: Topology) -> None:
        super().check_partitions(pdir, topology)
        if pdir.feature_layout != "columns":
            raise ValueError(f"{pdir.path} holds whole feature rows (partitioner "
                             f"{pdir.partitioner!r}); p3 needs feature columns sliced per rank: "
                             f"`dglx partition --method feature_dim --parts {topology.world_size}`")

    def setup(self, session: Session, pdir: PartitionDir) -> None:
        self.check_partitions(pdir, session.topology)
        self.session, rank = session, session.rank
        part = pdir.load_part(rank)
        self.cols = slice(*part.feat_cols)
        self.feat = torch.from_numpy(part.feat)
        self.num_nodes = pdir.num_nodes
        self.sampler = PartitionSampler(part, pdir.book, session.world, rank)
        self.ids, self.labels = {}, {}
        for split in ("train", "val", "test"):
            mask = getattr(part, split)
            owned = torch.from_numpy(part.core_gid[mask])
            labels = torch.from_numpy(part.label[mask].astype("int64"))
            every_id = session.world.all_gather_v(owned)
            every_label = torch.cat(session.world.all_gather_v(labels))
            chunk = owner_balanced_chunks(every_id)[rank]
            lookup = torch.cat(every_id)
            order = torch.argsort(lookup)
            where = order[torch.searchsorted(lookup[order], chunk)]
            self.ids[split] = (chunk, int(lookup.numel()))
            self.labels[split] = every_label[where]

    def wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        conv, name = first_conv(model)
        adapter = adapter_for(conv)
        adapter.check_column_split(conv)
        for lin in adapter.input_linears(conv):  # slices must come from one model: rank 0's
            self.session.world.broadcast(conv.get_parameter(lin.path).data)
        if getattr(model, "row_normalize", False):
            self._row_normalize()
        # layer-1 exchanges use the server and cross groups, never DDP's (the world group)
        layer = P3FirstLayer(conv, adapter, self.cols, self.feat, self.session.server,
                             self.session.cross)
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, layer)
        self._layer, self._slices = layer, list(layer.weights)
        ignored = [f"{name}.weights.{i}" for i in range(len(self._slices))]
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, ignored)
        self._grad_bytes = sum(p.numel() * p.element_size() for n, p in model.named_parameters()
                               if p.requires_grad and n not in ignored)
        return DistributedDataParallel(model)

    def _row_normalize(self) -> None:
        """Divides every row by its sum over all columns (rows summing to <= 0 stay)."""
        total = self.feat.sum(1, dtype=torch.float64)
        self.session.world.all_reduce(total)
        scale = torch.where(total > 0, 1.0 / total.clamp(min=1e-12), torch.ones_like(total))
        self.feat = (self.feat * scale.to(self.feat.dtype).unsqueeze(1)).contiguous()

    def after_backward(self) -> None:
        self._layer.after_backward()  # pipelined slice gradients that arrived
        for p in self._slices:  # DDP averages the other gradients over the ranks
            if p.grad is not None:
                p.grad.div_(self.session.world_size)
        self.session.world.account_all_reduce(self._grad_bytes)

    def batches(self, epoch: int) -> Iterator[Batch]:
        if not self.config.pipeline:
            yield from super().batches(epoch)
            return
        window: collections.deque[Batch] = collections.deque()
        for batch in super().batches(epoch):  # sampled in order, launched 2 steps ahead
            self._layer.launch(batch.blocks[0])
            window.append(batch)
            if len(window) == 3:
                yield window.popleft()
        while window:
            yield window.popleft()
        self._layer.drain()  # the last gradients arrive before anything else runs

    def _batch(self, seeds: torch.Tensor, fanouts, split: str) -> Batch:
        blocks = self.sampler.sample_blocks(seeds, fanouts)
        x = rows_at(self.feat, blocks[0].srcdata[dgl.NID])  # this rank's columns only
        y = self._labels_of(seeds, split)
        return Batch(blocks, x, y, seeds)
