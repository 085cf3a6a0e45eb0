"""The Strategy interface every distributed strategy implements, and the strategy registry.

A strategy decides how the graph is partitioned, what a batch holds, how the model is wrapped
and what happens between its layers; the user's ``forward(blocks, x)`` stays theirs. The
drop-in API (:mod:`dglx_dist.api`, and the :class:`~dglx_dist.trainer.Trainer` built on it)
drives any strategy through this interface only: no code outside the registry compares
strategy names. Differences are methods and capability flags.

Register your own (or list it under the ``dglx_dist.strategies`` entry-point group)::

    @STRATEGIES.register("mine")
    class Mine(Strategy):
        @dataclasses.dataclass(frozen=True)
        class Config:
            batch_size: int = dataclasses.field(default=1000, metadata={"help": "..."})

        @classmethod
        def exact_options(cls, num_layers):  # tests/dist/test_contract.py uses these
            return {"fanouts": (-1,) * num_layers}
        ...

Every registered strategy is run by ``tests/dist/test_contract.py`` with its exact options
against single-process full-graph DGL.
"""
from __future__ import annotations

import abc
import dataclasses
from typing import Any, Iterator

import torch
from torch.nn.parallel import DistributedDataParallel

from dglx_dist.errors import InvalidValueError, NotSupportedError, PartitionError
from dglx_dist.kvstore import DistKVStore, RowPolicy
from dglx_dist.memory import MemoryModel
from dglx_dist.partition.load import PartitionDir
from dglx_dist.registry import Registry
from dglx_dist.runtime.autograd import scale_grad
from dglx_dist.runtime.health import DDP_GROUP
from dglx_dist.runtime.session import Session
from dglx_dist.runtime.topology import Topology
from dglx_dist.sampling import even_chunk
from dglx_dist.strategies.epochs import EpochResult, TrainHooks
from dglx_dist.strategies.steps import Blocks, LoaderPlan, LoaderSpec, Step

__all__ = ["Strategy", "PartitionSpec", "STRATEGIES"]

STRATEGIES: Registry["Strategy"] = Registry("strategy", entry_point_group="dglx_dist.strategies")
"""The strategy registry: ``STRATEGIES.names()``, ``STRATEGIES.build(name, **options)``."""


@dataclasses.dataclass(frozen=True)
class PartitionSpec:
    """How a strategy wants the dataset partitioned for a given topology."""

    method: str
    num_parts: int
    options: dict[str, Any] = dataclasses.field(default_factory=dict)


class Strategy(abc.ABC):
    """Base class of the distributed strategies.

    Capability flags:
        feature_layout: "rows" (a part holds its nodes' whole rows) or "columns" (a column
            slice of every node) when the strategy needs one of them; checked against the
            partition directory.
        full_graph: an epoch is one batch over the whole graph (no sampling).
        conv_types: the dgl.nn conv classes the strategy can run (None: any).
        held_rows: node-data names whose rows :meth:`local_rows` may give (rows of other
            names always come from the KVStore).
        link_prediction: edge loaders (link prediction) run under it.
        runs_on_device: its batches, model and exchanges of model tensors may live on the
            session's device (a GPU; :mod:`dglx_dist.runtime.device`); False: the strategy
            computes on the host even when the job has GPUs (dorylus by design: its tensor
            work goes to serverless workers), see :meth:`compute_device`.
        float32_only: its math runs in float32 alone (dorylus: its tensor tasks travel to
            serverless workers as float32 arrays); ``parallelize`` refuses a model with
            parameters of another floating dtype and the forward refuses ``torch.autocast``.
            The others run bfloat16 models and autocast.
        lookahead: its loaders may sample the next step and start pulling its rows before
            handing over a step (False: each step must be trained before the next is asked
            for, e.g. P3's pipeline, which launches its own work ahead).
        memory_model: its measured peak resident memory per rank as the graph grows
            (:class:`~dglx_dist.memory.MemoryModel`), which ``dglx train`` checks before it
            starts (:func:`~dglx_dist.strategies.footprint.check_job_memory`); None: not
            measured, not checked. The built-in strategies' fits were measured at F = 128
            features, a 2-layer GCN of hidden 64 and the strategy's default options (see
            docs/cluster_model.md, "Memory per rank"): estimates, which one graph size up
            were from 8% under to 41% over the measured peaks.
            An instance may choose it from its options (granndis with ``scope='world'``
            takes fullgraph's).
    """

    Config: type
    registered_name: str = ""
    feature_layout: str | None = None
    full_graph: bool = False
    conv_types: tuple[str, ...] | None = None
    held_rows: frozenset[str] = frozenset()
    link_prediction: bool = False
    runs_on_device: bool = False
    float32_only: bool = False
    lookahead: bool = True
    memory_model: MemoryModel | None = None

    def __init__(self, config: Any):
        self.config = config

    @abc.abstractmethod
    def partition_spec(self, topology: Topology) -> PartitionSpec:
        """The partitioning this strategy needs on ``topology``."""

    def compute_device(self, session: Session) -> torch.device:
        """Where this strategy's model, blocks and input rows live on ``session``: the
        session's device when :attr:`runs_on_device`, else the CPU."""
        return session.device if self.runs_on_device else torch.device("cpu")

    def ddp(self, model: torch.nn.Module, session: Session) -> torch.nn.Module:
        """``model`` in DDP on this strategy's device (DDP's ``device_ids`` on a GPU). Each
        training forward counts, in the job's health record, the gradient all-reduce its
        backward joins (:data:`DDP_GROUP`), so a peer that never reaches it is named."""
        device = self.compute_device(session)
        wrapped = DistributedDataParallel(model, device_ids=[device.index]
                                          if device.type == "cuda" else None)
        seqs = session.health.op_seqs

        def count(module, args):
            if module.training and torch.is_grad_enabled():
                seqs[DDP_GROUP] = seqs.get(DDP_GROUP, 0) + 1

        wrapped.register_forward_pre_hook(count)
        return wrapped

    def num_layers(self) -> int | None:
        """GNN layers the strategy's options imply (e.g. one fanout per layer), or None."""
        return None

    @classmethod
    @abc.abstractmethod
    def exact_options(cls, num_layers: int) -> dict[str, Any]:
        """Options under which the strategy does the math of single-process full-graph DGL
        for a model of ``num_layers`` graph layers (full neighbourhoods, nothing stale or
        sampled): the contract test over every registered strategy builds it with them."""

    def check_partitions(self, pdir: PartitionDir, topology: Topology) -> None:
        """Refuses a partition directory that does not fit this strategy and topology."""
        spec = self.partition_spec(topology)
        if pdir.num_parts != spec.num_parts:
            raise PartitionError(f"{pdir.path} has {pdir.num_parts} parts; strategy "
                                 f"{self.registered_name!r} on {topology.num_servers} servers x "
                                 f"{topology.ranks_per_server} ranks needs {spec.num_parts} "
                                 f"(partition with `dglx partition --method {spec.method} "
                                 f"--parts {spec.num_parts}`)")
        if self.feature_layout and pdir.feature_layout != self.feature_layout:
            raise PartitionError(f"{pdir.path} stores features as {pdir.feature_layout} "
                                 f"(partitioner {pdir.partitioner!r}); strategy "
                                 f"{self.registered_name!r} needs {self.feature_layout}: `dglx "
                                 f"partition --method {spec.method} --parts {spec.num_parts}`")

    @abc.abstractmethod
    def setup(self, session: Session, pdir: PartitionDir, store=None) -> None:
        """Loads this rank's share of the partitions (collective).

        Args:
            store: a distributed KVStore already holding the node data by rows ("feat" when
                the partitions store rows, "label", the masks; see
                :func:`dglx_dist.api.graph.node_data_store`), to be used instead of building
                one; None: the strategy builds what it needs.
        """

    @abc.abstractmethod
    def wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model as trained (e.g. in DDP)."""

    def train_epochs(self, epochs: range, hooks: TrainHooks) -> Iterator[EpochResult]:
        """The epochs ``epochs`` of ``Trainer.fit``, one :class:`EpochResult` each, in order,
        yielded on every rank once the epoch's update is applied; the trainer records,
        evaluates and checkpoints before asking for the next (collectives allowed). By
        default each epoch is ``hooks.loader_epoch``: the trainer's loader steps. A strategy
        whose epochs overlap in a pipeline of its own overrides it (see
        :mod:`dglx_dist.strategies.epochs`)."""
        for epoch in epochs:
            yield hooks.loader_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint must hold of this rank's strategy between epochs besides the model
        and optimizer (tensors, numbers, strings, lists and dicts only)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`'s result (on a strategy set up and wrapped as before)."""
        if state:
            raise InvalidValueError(f"strategy {self.registered_name!r} keeps no state between "
                                    f"epochs; the checkpoint holds {sorted(state)}")

    def sharded_params(self) -> tuple[list[torch.Tensor], Any]:
        """Parameters each rank holds a different shard of, and the communicator over whose
        ranks the shards add up to the whole (``([], None)``: every parameter is replicated)."""
        return [], None

    def before_backward(self) -> None:
        """Called when a backward pass reaches the model's output (parameters after it, a
        scorer's, may have their gradients already: see
        :class:`~dglx_dist.runtime.autograd.GradientSync`)."""

    def after_backward(self) -> None:
        """Called after every backward pass (e.g. to account traffic done by DDP)."""

    # -- the drop-in API (dglx_dist.api) ---------------------------------------------------------
    def with_layers(self, num_layers: int, batches: int | None = None) -> "Strategy":
        """This strategy for a model of ``num_layers`` graph convs: a copy with that depth when
        its options left the depth at its default (called before :meth:`setup`); ``batches``:
        the first loader's batches per rank, for options that default to it.

        Raises:
            ValueError: the options asked for another depth.
        """
        if not hasattr(self.config, "num_layers") or self.config.num_layers == num_layers:
            return self
        default = {f.name: f.default for f in dataclasses.fields(self.config)}["num_layers"]
        if self.config.num_layers != default:  # asked for explicitly
            raise InvalidValueError(f"strategy {self.registered_name!r} was built for num_layers="
                                    f"{self.config.num_layers}; the model has {num_layers} graph "
                                    f"convs: pass num_layers={num_layers} (or leave it out)")
        clone = type(self)(dataclasses.replace(self.config, num_layers=num_layers))
        clone.registered_name = self.registered_name
        return clone

    def trainer_loaders(self, num_layers: int, num_nodes: int) -> tuple[LoaderSpec, LoaderSpec]:
        """The loaders :class:`~dglx_dist.trainer.Trainer` trains and evaluates with, from
        this strategy's options: by default full neighbourhoods and one batch of every rank's
        ids (full-graph training; a strategy with co-batches steps through them)."""
        full = (-1,) * num_layers
        seed = int(getattr(self.config, "seed", 0))
        return (LoaderSpec(full, num_nodes, shuffle=True, seed=seed),
                LoaderSpec(full, num_nodes, seed=seed))

    def split_ids(self, ids: torch.Tensor, pdir: PartitionDir, session: Session) -> torch.Tensor:
        """This rank's share of ``ids`` (sorted, unique, the same on every rank), as DGL's
        ``node_split``: by default DistDGL's two-level split (contiguous chunks of the
        partitioned ids, sizes within one of each other, mostly on the rank's own server)."""
        return even_chunk(ids, session.world_size, session.rank)

    def serves(self, spec: LoaderSpec) -> bool:
        """Whether :meth:`loader_plan` / :meth:`loader_epoch` build this strategy's own steps
        for ``spec``; a loader it does not serve (a strategy without loader support, or a
        layer-wise inference's one-layer sampler under a full-graph strategy) samples plain
        blocks through the graph instead."""
        return False

    def loader_plan(self, ids: torch.Tensor, spec: LoaderSpec) -> LoaderPlan:
        """What a loader over this rank's ``ids`` keeps between epochs (collective: every rank
        builds its loaders in the same order); called only when :meth:`serves` says so."""
        raise NotSupportedError(f"strategy {self.registered_name!r} has no DataLoader support")

    def loader_epoch(self, plan: LoaderPlan, spec: LoaderSpec, epoch: int) -> Iterator[Step]:
        """One epoch of a loader's steps; every rank yields the same number (collective)."""
        raise NotSupportedError(f"strategy {self.registered_name!r} has no DataLoader support")

    def local_nodes(self) -> torch.Tensor:
        """Global ids of the nodes whose outputs :meth:`full_graph_step` gives, in that order
        (this rank's share of the graph)."""
        raise NotSupportedError(f"strategy {self.registered_name!r} has no full-graph form")

    def full_graph_step(self, num_layers: int) -> tuple[Blocks, Any]:
        """Blocks and input rows of the full-graph form ``model(g, features)``: every layer's
        full neighbourhood of :meth:`local_nodes` (collective)."""
        raise NotSupportedError(f"strategy {self.registered_name!r} has no full-graph form")

    def local_rows(self, name: str, ids: torch.Tensor) -> Any:
        """Rows of node data ``name`` (one of :attr:`held_rows`) that this rank holds without
        asking the KVStore (e.g. preloaded features), or None."""
        return None

    def step_forward(self, model: torch.nn.Module, blocks, x) -> torch.Tensor:
        """The model's output rows of one step: the step's rows, with the gradient weight of
        this rank's loss applied (see :class:`~dglx_dist.strategies.steps.StepState`)."""
        out = model(blocks, x)
        state = getattr(blocks, "state", None)
        if state is None:
            return out
        if state.rows is not None:
            out = out.index_select(0, state.rows.to(out.device))
        if state.weight is not None and torch.is_grad_enabled():
            out = scale_grad(out, state.weight)
        return out

    def close(self) -> None:
        """Releases what setup acquired."""


def pull_features_once(session: Session, store, pdir: PartitionDir, part,
                       ids: torch.Tensor) -> torch.Tensor:
    """Feature rows of ``ids``, pulled once at setup (layer 0's rows never change): through
    the graph's KVStore ``store`` when there is one, else through a store that lives for this
    pull alone (collective)."""
    if store is not None:
        return store.pull("feat", ids, dedup=False)
    own = DistKVStore(session)
    try:
        own.init_data("feat", RowPolicy(pdir.book), {part.part: torch.from_numpy(part.feat)})
        return own.pull("feat", ids, dedup=False)
    finally:
        own.close()

