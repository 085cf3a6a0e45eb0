"""What the sampled mini-batch strategies share: options, loaders, the full-graph form.

A subclass sets ``self.sampler`` (its distributed sampler), ``self.session``, ``self.pdir`` and
``self.num_nodes`` in ``setup`` and says what the first layer gets for a step's input nodes in
:meth:`MiniBatchStrategy._input_rows`.
"""
from __future__ import annotations

import abc
import dataclasses
import functools
from typing import Iterator, Sequence

import torch
from torch.nn.parallel import DistributedDataParallel

from dglx_dist.errors import InvalidValueError
from dglx_dist.graphcore.frames import NID
from dglx_dist.strategies.abilities import (Approximate, Capabilities, DrawsOffThread,
                                            FullGraphForm, ShapedByOptions)
from dglx_dist.strategies.base import Strategy, ddp, split_ids
from dglx_dist.strategies.holdings import (Holdings, JobSize, feature_bytes,
                                           minibatch_step_bytes, param_bytes)
from dglx_dist.strategies.steps import (OUT_DEGREE, Blocks, LoaderPlan, LoaderSpec, Step,
                                        sampled_epoch, sampled_plan)

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
            raise InvalidValueError(f"fanouts {self.fanouts}: need one entry per layer, each a "
                                    f"positive count or -1")
        if self.eval_fanouts and len(self.eval_fanouts) != len(self.fanouts):
            raise InvalidValueError(f"eval_fanouts {self.eval_fanouts} must have one entry per "
                                    f"layer ({len(self.fanouts)})")
        if self.batch_size < 1 or self.eval_batch_size < 1:
            raise InvalidValueError("batch_size and eval_batch_size must be >= 1")


class MiniBatchStrategy(Strategy, FullGraphForm, Approximate, ShapedByOptions, DrawsOffThread):
    """Base of the strategies that train on sampled mini-batches of seed nodes (an edge
    loader's batches are sampled like node batches)."""

    capabilities = Capabilities(link_prediction=True, draws_blocks=True)

    def num_layers(self) -> int:
        return len(self.config.fanouts)

    @classmethod
    def exact_options(cls, num_layers: int) -> dict:
        return {"fanouts": (-1,) * num_layers}

    @abc.abstractmethod
    def _input_rows(self, ids: torch.Tensor):
        """What the model's first layer gets for input nodes ``ids`` (unique)."""

    def trainer_loaders(self, num_layers: int, num_nodes: int) -> tuple[LoaderSpec, LoaderSpec]:
        cfg = self.config
        full = tuple(-1 for _ in cfg.fanouts)
        return (LoaderSpec(tuple(cfg.fanouts), cfg.batch_size, shuffle=True, seed=cfg.seed),
                LoaderSpec(tuple(cfg.eval_fanouts) or full, cfg.eval_batch_size, seed=cfg.seed,
                           whole_degrees=True))

    def loader_plan(self, ids: torch.Tensor, spec: LoaderSpec) -> LoaderPlan:
        if spec.whole_degrees:
            self.out_degree  # collective the first time: every rank builds the loader
        return sampled_plan(self.session.world, ids, spec)

    def thread_sampler(self, spec: LoaderSpec, twin):
        """Its sampler on the loader's communicators; None for a user's own sampler (seeded
        through torch's global generator, which the model's dropout draws from too). An edge
        loader's pairs are made on the calling thread (``api.pipeline.FedPairs``)."""
        if spec.draw is not None:
            return None
        return self.sampler.on(twin)

    def loader_epoch(self, plan: LoaderPlan, spec: LoaderSpec, epoch: int,
                     sampler=None) -> Iterator[Step]:
        """(``sampler``: a :meth:`thread_sampler`'s, drawing on a loader's worker thread.)"""
        steps = sampled_epoch(sampler or self.sampler, self.session.rank, plan, spec, epoch)
        if not spec.whole_degrees:
            return steps
        full = [i for i, fanout in enumerate(spec.fanouts) if fanout == -1]

        def stamped() -> Iterator[Step]:
            for step in steps:  # every in-edge of a full block's destinations is in it:
                self._stamp_degrees(step.blocks, full)  # the whole degrees are exact
                yield step

        return stamped()

    def holdings(self, job: JobSize) -> Holdings:
        """(A :class:`~dglx_dist.strategies.abilities.Costed` one's.) Its share of the feature
        rows, the larger sampled step's input rows and activations, the parameters, and its
        share of the server's ``cache_mb`` (where it has that option)."""
        c = self.config
        batch, activations = minibatch_step_bytes(job, c)
        return Holdings(feature_bytes(job, job.nodes / job.world) + batch, activations,
                        param_bytes(job, len(c.fanouts)),
                        getattr(c, "cache_mb", 0.0) * 2**20 / job.group)

    def wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        return self._ddp(model)

    def _ddp(self, model: torch.nn.Module, ignored: Sequence[str] = ()) -> torch.nn.Module:
        """``model`` in DDP (:func:`~dglx_dist.strategies.base.ddp`: its own C++ all-reduce,
        overlapped with backward, bounded by the group's timeout), but for the parameters
        named ``ignored``; the bytes it all-reduces are accounted to the comm layer after each
        backward (:meth:`after_backward`). On a graph with types a step may leave a relation's
        weights unused, so DDP looks for them."""
        if ignored:
            DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, ignored)
        self._grad_bytes = sum(p.numel() * p.element_size() for n, p in model.named_parameters()
                               if p.requires_grad and n not in ignored)
        return ddp(model, self.session, self.compute_device(self.session),
                   find_unused=self.pdir.types is not None)

    def after_backward(self, steps) -> None:
        self.session.world.account_all_reduce(self._grad_bytes)

    def local_nodes(self) -> torch.Tensor:
        return split_ids(self, torch.arange(self.num_nodes), self.pdir, self.session)

    def full_graph_step(self, num_layers: int, index: int) -> tuple[Blocks, object]:
        cached = getattr(self, "_full_graph", None)
        if cached is None or len(cached) != num_layers:
            cached = Blocks(self.sampler.draw_blocks(self.local_nodes(), (-1,) * num_layers))
            self._stamp_degrees(cached, range(num_layers))  # they hold a share of the edges
            self._full_graph = cached
        return cached, self._input_rows(cached[0].srcdata[NID])

    def _stamp_degrees(self, blocks, layers) -> None:
        """Gives ``blocks[i]`` for ``i`` in ``layers`` their sources' out-degrees in the whole
        graph (``srcdata[OUT_DEGREE]``: ``parallelize`` rescales the rows a conv normalises)."""
        for i in layers:  # (the degrees are on the host; a device sampler's blocks are not)
            ids = blocks[i].srcdata[NID]
            blocks[i].srcdata[OUT_DEGREE] = self.out_degree.index_select(
                0, ids.cpu()).to(ids.device)

    @functools.cached_property
    def out_degree(self) -> torch.Tensor:
        """Every node's out-degree in the whole graph, by partitioned id (collective, on first
        use): each part's edges, which are the in-edges of its own nodes, counted once."""
        session, per_rank = self.session, self.pdir.num_parts == self.session.world_size
        part = self.pdir.load_part(session.rank if per_rank else session.server_id,
                                   features=False)  # the structure is what is counted
        deg = torch.from_numpy(part.source_counts(self.num_nodes)).double()
        return (session.world if per_rank else session.cross).all_reduce(deg)
