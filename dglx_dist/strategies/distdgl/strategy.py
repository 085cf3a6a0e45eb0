"""``distdgl``: DistDGL's mini-batch training (METIS parts with HALO nodes, one per server;
owner-compute sampling, :class:`~dglx_dist.sampling.PartitionSampler`; features pulled from
the KVStore; DDP), with four options DistDGL lacks: ``reuse_mb``
(:mod:`dglx_dist.kvstore.recent`), ``server_pulls`` (:mod:`dglx_dist.kvstore.coalesce`),
``cache_mb`` (:mod:`dglx_dist.kvstore.cache`) and ``seed_mixing`` (:func:`traded_seeds`). What each does and what it costs:
docs/strategies/distdgl.md; what lives on a GPU: docs/launching.md; its cost: :mod:`.cost`.
"""
from __future__ import annotations

import dataclasses
from typing import Iterator

import torch

from dglx_dist.kvstore import DistKVStore, RowPolicy
from dglx_dist.partition.load import PartitionDir
from dglx_dist.registry import Bounds
from dglx_dist.runtime.session import Session
from dglx_dist.runtime.topology import Topology
from dglx_dist.sampling import PartitionSampler
from dglx_dist.strategies.abilities import Costed
from dglx_dist.strategies.base import (STRATEGIES, PartitionSpec, SetupRequest,
                                       check_typed_store)
from dglx_dist.strategies.distdgl.cost import COST, REUSE_MB
from dglx_dist.strategies.minibatch import MiniBatchConfig, MiniBatchStrategy
from dglx_dist.strategies.steps import LoaderPlan, LoaderSpec, Step

__all__ = ["DistDGLStrategy", "traded_seeds"]


@STRATEGIES.register("distdgl")
class DistDGLStrategy(MiniBatchStrategy, Costed):
    """METIS partitions + HALO, distributed sampling, KVStore features, DDP."""

    capabilities = dataclasses.replace(MiniBatchStrategy.capabilities, typed_graphs=True,
                                       draws_subgraphs=True, foreign_convs=True)

    cost = COST

    @dataclasses.dataclass(frozen=True)
    class Config(MiniBatchConfig):
        balance: tuple[str, ...] = dataclasses.field(
            default=("train", "val", "test", "edges"),
            metadata={"help": "METIS constraints when dglx partitions for this strategy."})
        cache_mb: float = dataclasses.field(
            default=0.0, metadata={"help": "Per-server memory (MiB) for copies of other "
                                           "servers' rows: those its ranks pulled most often "
                                           "in the first epoch, then others while it lasts; "
                                           "0: no cache.",
                                   "bounds": Bounds(0)})
        reuse_mb: float = dataclasses.field(
            default=REUSE_MB, metadata={"help": "Per-rank memory (MiB) for copies of the "
                                                "other servers' rows the last steps pulled, "
                                                "which the next steps read instead of pulling "
                                                "them again (the oldest give way); 0: every "
                                                "step pulls all its remote rows, as DistDGL's "
                                                "trainers do.",
                                        "bounds": Bounds(0)})
        server_pulls: bool = dataclasses.field(
            default=False, metadata={"help": "The ranks of a server pull other servers' rows "
                                             "together, each row once (fewer bytes, two more "
                                             "exchanges within the server per step); false: "
                                             "each rank asks alone, as DistDGL's trainers do."})
        seed_mixing: float = dataclasses.field(
            default=0.0, metadata={"help": "Share of every rank's training seeds pooled and "
                                           "dealt at random over all ranks each epoch (1: "
                                           "batches drawn from the whole training set, as "
                                           "one process draws them); 0: DistDGL's split.",
                                   "bounds": Bounds(0, 1)})

    def partition_spec(self, topology: Topology) -> PartitionSpec:
        return PartitionSpec("metis", topology.num_servers, {"balance": list(self.config.balance)},
                             feature_layout="rows")

    def setup(self, session: Session, pdir: PartitionDir, store: DistKVStore | None,
              request: SetupRequest) -> None:
        self.session, self.pdir, self.num_nodes = session, pdir, pdir.num_nodes
        self._fill_for: LoaderSpec | None = None  # the loader whose next epoch fills the cache
        server = session.server_id
        self._own_store = store is None
        check_typed_store(pdir, store, "distdgl")
        part = pdir.load_part(server, features=self._own_store)  # else the store has them
        self.store = store if store is not None else DistKVStore(session)
        if self._own_store:
            policy = RowPolicy(pdir.book)
            self.store.init_data("feat", policy, {server: torch.from_numpy(part.feat)})
            self.store.init_data("label", policy, {server: torch.from_numpy(part.label)},
                                 dtype=torch.int64)
        if self.config.server_pulls:
            self.store.pull_per_server()
        if self.config.cache_mb and self.store.cache is None:
            self.store.start_cache(int(self.config.cache_mb * 2**20))
        if self.config.reuse_mb and session.topology.num_servers > 1:  # (else none is remote)
            self.store.keep_recent(int(self.config.reuse_mb * 2**20))
        # (with types, DGL's heterogeneous blocks in per-type ids)
        self.sampler = PartitionSampler.of(pdir, part, session.cross, store)

    def loader_plan(self, ids: torch.Tensor, spec: LoaderSpec) -> LoaderPlan:
        plan = super().loader_plan(ids, spec)
        if not self._mixes(spec):
            return plan
        return LoaderPlan(plan.steps, self.session.world.all_gather_v(ids))  # every rank's

    def _mixes(self, spec: LoaderSpec) -> bool:
        """Whether a loader's seeds are traded: a shuffled node loader's, with mixing on."""
        return bool(self.config.seed_mixing) and spec.shuffle and spec.pairs is None

    def loader_epoch(self, plan: LoaderPlan, spec: LoaderSpec, epoch: int,
                     sampler=None) -> Iterator[Step]:
        if self._mixes(spec):
            mine = traded_seeds(plan.data, self.session.rank, self.config.seed_mixing,
                                spec.seed * 1_000_003 + epoch)
            plan = LoaderPlan(plan.steps, mine)
        yield from super().loader_epoch(plan, spec, epoch, sampler)

    def loader_epoch_done(self, spec: LoaderSpec) -> None:
        """Every rank has taken the epoch's steps and has their rows: while the cache
        (``cache_mb``) counts, the epoch's counts are set aside for a fill as this loader's
        next epoch starts (an evaluation's pulls in between are not counted)."""
        if self.config.cache_mb and self.store.set_aside_counts():
            self._fill_for = spec

    def loader_epoch_start(self, spec: LoaderSpec) -> None:
        """The cache's fill (collective, on the loop's thread), as the loader whose epoch
        counted starts its next one (or one asked for the same: a script may build its
        loader anew each epoch; an evaluation's differs): it costs the epoch that the cache
        serves, and a run that stops after that epoch (its accuracy reached) never pays it."""
        if spec == self._fill_for:  # (never equal to None)
            self._fill_for = None
            self.store.fill_cache()

    def close(self) -> None:
        if self._own_store:
            self.store.close()

    def _input_rows(self, ids: torch.Tensor) -> torch.Tensor:
        return self.store.pull("feat", ids, dedup=False)  # unique ids


def traded_seeds(everyone: list[torch.Tensor], rank: int, share: float,
                 seed: int) -> torch.Tensor:
    """Rank ``rank``'s seeds for an epoch when ``share`` of every rank's seeds (``everyone``,
    in rank order) is traded: each rank gives a random ``share`` of its seeds to a pool, the
    pool is shuffled and each rank takes back as many as it gave, so every rank keeps its
    count (and the loader its steps). Every rank draws the same with the same ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    kept, given = [], []
    for ids in everyone:
        order = ids[torch.randperm(ids.numel(), generator=gen)]
        k = round(share * ids.numel())
        given.append(order[:k])
        kept.append(order[k:])
    pool = torch.cat(given)
    pool = pool[torch.randperm(pool.numel(), generator=gen)]
    back = torch.split(pool, [g.numel() for g in given])
    return torch.cat([kept[rank], back[rank]]).sort().values
