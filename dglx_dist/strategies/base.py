"""The core every distributed strategy implements (:class:`Strategy`), the registry
:data:`STRATEGIES` (entry-point group ``dglx_dist.strategies``), and the helpers the drop-in
API uses to drive any strategy through that core and the optional abilities of
:mod:`dglx_dist.strategies.abilities`, checked with ``isinstance``: no code outside the
registry compares strategy names. Writing one: docs/architecture.md, "A strategy".
"""
from __future__ import annotations

import abc
import dataclasses
from typing import Any, ClassVar, Iterator, Sequence

import torch
from torch.nn.parallel import DistributedDataParallel

from dglx_dist.errors import DglxError, InvalidValueError, NotSupportedError, PartitionError
from dglx_dist.kvstore import DistKVStore, RowPolicy
from dglx_dist.partition.load import PartitionDir
from dglx_dist.registry import Registry
from dglx_dist.runtime.autograd import scale_grad
from dglx_dist.runtime.health import DDP_GROUP
from dglx_dist.runtime.session import Session
from dglx_dist.runtime.topology import Topology
from dglx_dist.sampling import even_chunk
from dglx_dist.strategies.abilities import Capabilities, OwnSplit, ShapedByOptions
from dglx_dist.strategies.steps import (LoaderPlan, LoaderSpec, Step, StepState,
                                        full_graph_loaders)

__all__ = ["Strategy", "PartitionSpec", "SetupRequest", "STRATEGIES", "check_partitions",
           "fits_partitions",
           "build_strategy", "check_typed_store",
           "implied_layers", "trainer_loaders", "split_ids", "with_depth",
           "ddp", "pull_features_once"]

STRATEGIES: Registry["Strategy"] = Registry("strategy", entry_point_group="dglx_dist.strategies")
"""The strategy registry: ``STRATEGIES.names()``, ``STRATEGIES.build(name, **options)``."""


@dataclasses.dataclass(frozen=True)
class PartitionSpec:
    """How a strategy wants the dataset partitioned for a given topology."""

    method: str
    num_parts: int
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    feature_layout: str | None = None
    """"rows" (a part holds its nodes' whole rows) or "columns" (a column slice of every
    node) when the strategy needs one of them; checked against the partition directory."""


@dataclasses.dataclass(frozen=True)
class SetupRequest:
    """What a strategy is set up for, and which call of the drop-in API asked: the first of
    ``DataLoader``, ``parallelize`` and the full-graph reads (a strategy whose structures
    depend on the request refuses a later call that needs others, naming both).

    Attributes:
        num_layers: graph convs of the model.
        by: the call that asked, for messages (e.g. "DataLoader(batch_size=1000)").
    """

    num_layers: int
    by: str = "setup"


def step_rows(out: torch.Tensor, state: StepState) -> torch.Tensor:
    """The step's rows of a model's output, with the gradient weight of this rank's loss
    applied (see :class:`~dglx_dist.strategies.steps.StepState`)."""
    if state.rows is not None:
        out = out.index_select(0, state.rows.to(out.device))
    if state.weight is not None and torch.is_grad_enabled():
        out = scale_grad(out, state.weight)
    return out


class Strategy(abc.ABC):
    """The core every strategy implements (optional abilities:
    :mod:`dglx_dist.strategies.abilities`).

    Attributes:
        Config: its options, a frozen dataclass (the registry validates them).
        config: this instance's options.
        registered_name: the name it was built under (one class may sit behind several).
        capabilities: its yes-or-no abilities (:class:`~dglx_dist.strategies.abilities.
            Capabilities`; none unless its class declares them).
    """

    Config: type
    capabilities: ClassVar[Capabilities] = Capabilities()

    def __init__(self, config: Any, name: str = ""):
        self.config, self.registered_name = config, name

    @abc.abstractmethod
    def partition_spec(self, topology: Topology) -> PartitionSpec:
        """The partitioning this strategy needs on ``topology``."""

    @abc.abstractmethod
    def setup(self, session: Session, pdir: PartitionDir, store, request: SetupRequest) -> None:
        """Loads this rank's share of the partitions for ``request`` (collective).

        Args:
            store: a distributed KVStore already holding the node data by rows ("feat" when
                the partitions store rows, "label", the masks; see
                :func:`dglx_dist.api.store.node_data_store`), to be used instead of building
                one; None: the strategy builds what it needs.
        """

    @abc.abstractmethod
    def wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model as trained (e.g. in DDP; see :func:`ddp`)."""

    @abc.abstractmethod
    def loader_plan(self, ids: torch.Tensor, spec: LoaderSpec) -> LoaderPlan | None:
        """What a loader over this rank's ``ids`` keeps between epochs (collective: every rank
        builds its loaders in the same order), or None when the strategy does not build this
        loader's steps itself (e.g. a layer-wise inference's one-layer sampler under a
        full-graph strategy): then plain sampled blocks are drawn through the graph."""

    @abc.abstractmethod
    def loader_epoch(self, plan: LoaderPlan, spec: LoaderSpec, epoch: int) -> Iterator[Step]:
        """One epoch of a loader's steps; every rank yields the same number (collective)."""

    def loader_epoch_start(self, spec: LoaderSpec) -> None:
        """Called on the loop's thread as an epoch of one of its own loaders begins, before
        its first step is drawn, on every rank at the same point (collectives allowed); by
        default nothing."""

    def loader_epoch_done(self, spec: LoaderSpec) -> None:
        """Called on the loop's thread once it has taken every step of an epoch of its own
        loader's (:meth:`loader_epoch`), on every rank at the same point (collectives allowed:
        a worker thread that drew the steps has finished); by default nothing."""

    def step_forward(self, model: torch.nn.Module, blocks, x) -> torch.Tensor:
        """The model's output rows of one step: the step's rows, with the gradient weight of
        this rank's loss applied (see :class:`~dglx_dist.strategies.steps.StepState`)."""
        out = model(blocks, x)
        state = getattr(blocks, "state", None)
        return out if state is None else step_rows(out, state)

    def after_backward(self, steps: Sequence[StepState]) -> None:
        """Called after every backward pass (e.g. to account traffic done by DDP), with the
        states of the steps whose outputs it reached."""

    def check_typed(self, graph: str) -> None:
        """Refuses options that do not apply to a typed graph (``graph`` names it), before
        any collective where possible (``distribute`` of a heterograph, and
        :func:`check_partitions`); by default none."""

    def compute_device(self, session: Session) -> torch.device:
        """Where its model, blocks and input rows live: the session's device (a GPU; see
        :mod:`dglx_dist.runtime.device`) unless it computes on the host."""
        return session.device

    def close(self) -> None:
        """Releases what setup acquired."""


def build_strategy(strategy: "str | Strategy", options: dict[str, Any]) -> "Strategy":
    """The strategy a user named (built with ``options``) or gave built (then with none)."""
    if isinstance(strategy, Strategy):
        if options:
            raise InvalidValueError(f"options {sorted(options)} given with a built strategy; "
                                    "pass them to STRATEGIES.build instead")
        return strategy
    return STRATEGIES.build(strategy, **options)


def fits_partitions(strategy: Strategy, pdir: PartitionDir, topology: Topology) -> bool:
    """Whether :func:`check_partitions` lets ``strategy`` train ``pdir`` on ``topology``."""
    try:
        check_partitions(strategy, pdir, topology)
    except DglxError:
        return False
    return True


def check_partitions(strategy: Strategy, pdir: PartitionDir, topology: Topology) -> None:
    """Refuses a partition directory that does not fit ``strategy`` on ``topology`` (the
    graph checks it once, as it is built: :class:`~dglx_dist.api.graph.DistGraph`; and
    ``dglx train`` before it launches)."""
    spec, name = strategy.partition_spec(topology), strategy.registered_name
    redo = f"`dglx partition --method {spec.method} --parts {spec.num_parts}`"
    if pdir.num_parts != spec.num_parts:
        raise PartitionError(f"{pdir.path} has {pdir.num_parts} parts; strategy {name!r} on "
                             f"{topology.num_servers} servers x {topology.ranks_per_server} "
                             f"ranks needs {spec.num_parts} (partition with {redo})")
    if pdir.types is not None and not strategy.capabilities.typed_graphs:
        typed = [n for n in STRATEGIES.names() if STRATEGIES.get(n).capabilities.typed_graphs]
        raise NotSupportedError(f"{pdir.path} holds a graph with node types "
                                f"{list(pdir.types.ntypes)}; strategy {name!r} trains graphs without "
                                f"types only so far ({', '.join(typed)} train typed graphs)")
    if pdir.types is not None:
        strategy.check_typed(str(pdir.path))
    if spec.feature_layout and pdir.feature_layout != spec.feature_layout:
        raise PartitionError(f"{pdir.path} stores features as {pdir.feature_layout} "
                             f"(partitioner {pdir.partitioner!r}); strategy {name!r} needs "
                             f"{spec.feature_layout}: {redo}")


def check_typed_store(pdir: PartitionDir, store, who: str) -> None:
    """Refuses a typed partition directory without the graph's KVStore ``store``: a typed
    graph's rows live there (``who``: the strategy, for the message)."""
    if pdir.types is not None and store is None:
        raise NotSupportedError(f"{pdir.path} holds a graph with node types; {who} trains it "
                                "through dglx_dist.DistGraph")


def implied_layers(strategy: Strategy) -> int | None:
    """The depth ``strategy``'s options imply, or None."""
    return strategy.num_layers() if isinstance(strategy, ShapedByOptions) else None


def trainer_loaders(strategy: Strategy, num_layers: int,
                    num_nodes: int) -> tuple[LoaderSpec, LoaderSpec]:
    """The loaders the Trainer uses under ``strategy`` (its own, or full-graph ones)."""
    if isinstance(strategy, ShapedByOptions):
        return strategy.trainer_loaders(num_layers, num_nodes)
    return full_graph_loaders(num_layers, num_nodes, int(getattr(strategy.config, "seed", 0)))


def split_ids(strategy: Strategy, ids: torch.Tensor, pdir: PartitionDir,
              session: Session) -> torch.Tensor:
    """This rank's share of ``ids`` (sorted, unique, the same on every rank), as DGL's
    ``node_split``: the strategy's own, else DistDGL's two-level split (contiguous chunks of
    the partitioned ids, sizes within one of each other, mostly on the rank's own server)."""
    if isinstance(strategy, OwnSplit):
        return strategy.split_ids(ids, pdir, session)
    return even_chunk(ids, session.world_size, session.rank)


def with_depth(strategy: Strategy, num_layers: int) -> Any:
    """``strategy``'s config for a model of ``num_layers`` graph convs, where its options
    leave the depth at its default (``num_layers`` option).

    Raises:
        ValueError: the options asked for another depth.
    """
    config = strategy.config
    if config.num_layers == num_layers:
        return config
    default = {f.name: f.default for f in dataclasses.fields(config)}["num_layers"]
    if config.num_layers != default:  # asked for explicitly
        raise InvalidValueError(f"strategy {strategy.registered_name!r} was built for "
                                f"num_layers={config.num_layers}; the model has {num_layers} "
                                f"graph convs: pass num_layers={num_layers} (or leave it out)")
    return dataclasses.replace(config, num_layers=num_layers)


def ddp(model: torch.nn.Module, session: Session, device: torch.device,
        find_unused: bool = False) -> torch.nn.Module:
    """``model`` in DDP on ``device`` (DDP's ``device_ids`` on a GPU). Each training forward
    counts, in the job's health record, the gradient all-reduce its backward joins
    (:data:`DDP_GROUP`), so a peer that never reaches it is named. ``find_unused``: a step
    may leave parameters unused (a relation's weights when no edge of that relation is in
    the step's blocks, as in a heterograph's last layer), so DDP looks for them."""
    wrapped = DistributedDataParallel(model, device_ids=[device.index]
                                      if device.type == "cuda" else None,
                                      find_unused_parameters=find_unused)
    seqs = session.health.op_seqs

    def count(module, args):
        if module.training and torch.is_grad_enabled():
            seqs[DDP_GROUP] = seqs.get(DDP_GROUP, 0) + 1

    wrapped.register_forward_pre_hook(count)
    return wrapped


def pull_features_once(session: Session, store, pdir: PartitionDir, part,
                       ids: torch.Tensor, name: str = "feat") -> torch.Tensor:
    """Rows of ``ids`` of node data ``name`` (a store name), pulled once (layer 0's rows
    never change): through the graph's KVStore ``store`` when there is one, else (features
    of a graph without types) through a store that lives for this pull alone (collective)."""
    if store is not None:
        return store.pull(name, ids, dedup=False)
    own = DistKVStore(session)
    try:
        own.init_data(name, RowPolicy(pdir.book), {part.part: torch.from_numpy(part.feat)})
        return own.pull(name, ids, dedup=False)
    finally:
        own.close()

