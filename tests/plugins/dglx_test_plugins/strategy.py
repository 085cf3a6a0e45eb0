"""``range_distdgl``: DistDGL-style mini-batch training on ``range`` parts, written against the
strategy core alone (:class:`~dglx_dist.strategies.base.Strategy`, no optional ability).

It shows what a new strategy must think about: the partitions it needs (here another
plug-in's partitioner, by its registered name), what setup loads, how the model is wrapped,
and a loader's plan and steps. Everything else has the core's default: the full-graph form and
edge loaders are refused, features are read through the graph's KVStore, every parameter is
replicated, and the contract test runs it with its default options as exact.
"""
from __future__ import annotations

import dataclasses

import torch

from dglx_dist.sampling import PartitionSampler
from dglx_dist.strategies.abilities import Costed
from dglx_dist.strategies.base import PartitionSpec, Strategy, check_partitions, ddp
from dglx_dist.strategies.cost import Cost
from dglx_dist.strategies.cost.counts import allreduce, sampled, sampled_steps
from dglx_dist.strategies.steps import sampled_epoch, sampled_plan


class RangeDistDGLStrategy(Strategy):
    """Sampled blocks over one contiguous id range per server, rows from the KVStore, DDP."""

    @dataclasses.dataclass(frozen=True)
    class Config:
        """No options: the loader's sampler decides the fanouts."""

    def partition_spec(self, topology):
        return PartitionSpec("range", topology.num_servers, {}, feature_layout="rows")

    def setup(self, session, pdir, store, request):
        check_partitions(self, pdir, session.topology)
        self.session = session
        part = pdir.load_part(session.server_id, features=False)  # rows: the graph's store
        self.sampler = PartitionSampler(part, pdir.book, session.cross, session.server_id,
                                        pdir.edge_book())

    def wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        return ddp(model, self.session, self.compute_device(self.session))

    def loader_plan(self, ids, spec):
        return sampled_plan(self.session.world, ids, spec)

    def loader_epoch(self, plan, spec, epoch):
        return sampled_epoch(self.sampler, self.session.rank, plan, spec, epoch)


def range_epoch(graph, work, cluster):
    """An epoch of :class:`RangeDistDGLStrategy`: sampled blocks; a range part holds 1/S of
    the input rows, the others are pulled; DDP all-reduces the gradients."""
    steps = sampled_steps(graph, work, cluster)
    blocks, base = sampled(graph, work, steps)
    inter, intra = allreduce(graph, work, cluster, steps)
    pulled = steps * cluster.world * blocks[0].src * (1 - 1 / cluster.servers) * graph.row_bytes
    return dataclasses.replace(base, inter_bytes=inter + pulled, intra_bytes=intra,
                               pull_inter_bytes=pulled)


class CostedRangeStrategy(RangeDistDGLStrategy, Costed):
    """``range_distdgl`` with a cost: what a plug-in declares to be planned."""

    cost = Cost(law=range_epoch, overhead_s_per_step=0.01)
