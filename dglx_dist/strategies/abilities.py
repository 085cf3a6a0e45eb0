"""What a strategy can do beyond the core: abilities that carry methods (or data), each its
own small ABC checked with ``isinstance``, and one frozen record, :class:`Capabilities`, of
the yes-or-no ones a strategy declares (``capabilities = Capabilities(...)`` on its class).

A strategy implements :class:`~dglx_dist.strategies.base.Strategy`'s core and inherits the
abilities it has (as Lightning's fabric strategies add theirs): the drop-in API, the Trainer
and ``dglx bench`` ask ``isinstance(strategy, Ability)`` or read ``strategy.capabilities``,
never a name. A strategy without an ability gets the documented default of each row:

======================  =====================================================  ===============
ability                 what it adds                                           without it
======================  =====================================================  ===============
:class:`FullGraphForm`  ``model(g, g.ndata["feat"])``: the full-graph form     refused
:class:`OwnEpochs`      ``Trainer.fit``'s epochs from a pipeline of its own    the loader's
:class:`ShardedParams`  parameters sharded over ranks (``clip_grad_norm_``)    all replicated
:class:`Stateful`       state between epochs in checkpoints                    none kept
:class:`Costed`         its cost: planned, its memory checked before a run     neither
:class:`HoldsRows`      rows of node data it holds without the KVStore         KVStore reads
:class:`ConvTypes`      the conv classes it can run (by name)                  any conv
:class:`Approximate`    options that turn its approximations off (contract)    exact defaults
:class:`OverlapsBackward`  a hook when backward reaches the model's output      none
:class:`OwnSplit`       its own ``node_split`` of ids among ranks              DistDGL's split
:class:`ShapedByOptions`  depth and the Trainer's loaders from its options     the model's; full
:class:`DrawsOffThread`  its loaders' steps drawn on a worker thread            drawn in turn
======================  =====================================================  ===============
"""
from __future__ import annotations

import abc
import dataclasses
from typing import Any, Iterator

import torch

from dglx_dist.errors import CheckpointError
from dglx_dist.partition.load import PartitionDir
from dglx_dist.runtime.session import Session
from dglx_dist.strategies.cost import Cost
from dglx_dist.strategies.epochs import EpochResult, TrainHooks
from dglx_dist.strategies.holdings import Holdings, JobSize, feature_bytes, param_bytes
from dglx_dist.strategies.steps import Blocks, LoaderSpec, full_graph_loaders

__all__ = ["Capabilities", "FullGraphForm", "OwnEpochs", "ShardedParams", "Stateful",
           "Costed", "HoldsRows", "ConvTypes", "Approximate", "OverlapsBackward",
           "OwnSplit", "ShapedByOptions", "DrawsOffThread", "exact_options", "epochs_of", "StrategyState"]


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """The yes-or-no abilities of a strategy, declared once on its class (a subclass widens
    its parent's with ``dataclasses.replace``); a field left False is refused or, where the
    text says so, done the default way.

    Attributes:
        link_prediction: edge loaders (``as_edge_prediction_sampler``) run under it: its
            ``loader_plan`` takes a spec with ``pairs``.
        typed_graphs: it trains graphs with node and edge types (a typed partitioning); its
            loaders yield DGL's heterogeneous blocks, with node ids by type (options that do
            not apply to one are refused by ``Strategy.check_typed``).
        draws_blocks: its loaders' steps are sampled blocks, drawn as the loader asks: with
            ``NeighborSampler``'s ``prob``, ``mask`` and ``replace`` (``LoaderSpec.sampling``)
            or by a user's own ``BlockSampler`` (``LoaderSpec.draw``).
        draws_subgraphs: its loaders' steps may be one subgraph instead of blocks (DGL's
            ``ShaDowKHopSampler``): the model runs over it as over a whole graph.
        steps_in_turn: each step must be trained before the loader asks for the next (P3's
            pipeline launches its own work ahead), so loaders never sample ahead.
        float32_only: its math runs in float32 alone (dorylus: tensor tasks travel as
            float32 arrays): ``parallelize`` refuses other floating parameters, the forward
            refuses autocast.
        foreign_convs: it runs a model of other libraries' convs (PyG's ``MessagePassing``,
            :func:`~dglx_dist.convs.base.is_foreign_conv`) as it is: no adapter, no wrapper
            around a conv; the model reads each block itself (``block.edge_index``).
    """

    link_prediction: bool = False
    typed_graphs: bool = False
    draws_blocks: bool = False
    draws_subgraphs: bool = False
    steps_in_turn: bool = False
    float32_only: bool = False
    foreign_convs: bool = False


class FullGraphForm(abc.ABC):
    """The full-graph form ``model(g, features)``: every layer's full neighbourhood of this
    rank's nodes in one step."""

    @abc.abstractmethod
    def local_nodes(self) -> torch.Tensor:
        """Global ids of the nodes whose outputs :meth:`full_graph_step` gives, in that order
        (this rank's share of the graph)."""

    @abc.abstractmethod
    def full_graph_step(self, num_layers: int, index: int) -> tuple[Blocks, Any]:
        """Blocks and input rows of the full-graph form (collective); ``index``: how many
        training full-graph forwards the model took before this one (seeds what varies per
        step, e.g. dropout computed off the model)."""


class OwnEpochs(abc.ABC):
    """``Trainer.fit``'s epochs come from a pipeline of the strategy's own (epochs that
    overlap; see :mod:`dglx_dist.strategies.epochs`)."""

    @abc.abstractmethod
    def train_epochs(self, epochs: range, hooks: TrainHooks) -> Iterator[EpochResult]:
        """The epochs ``epochs``, one :class:`EpochResult` each, in order, yielded on every rank
        once the epoch's update is applied (the trainer records, evaluates and checkpoints
        before asking for the next)."""


class ShardedParams(abc.ABC):
    """Some parameters are held as a different shard on each rank."""

    @abc.abstractmethod
    def sharded_params(self) -> tuple[list[torch.Tensor], Any]:
        """The sharded parameters and the communicator over whose ranks the shards add up to
        the whole."""


class Costed(abc.ABC):
    """Its cost (:class:`~dglx_dist.strategies.cost.Cost`, declared in its folder's
    ``cost.py``): the plan counts its epochs and chooses its options; ``dglx train`` checks
    its measured peak memory per rank before it starts
    (:func:`~dglx_dist.strategies.footprint.check_job_memory`) and the plan counts it, with
    what it holds at the job's widths (:meth:`holdings`)."""

    cost: Cost

    def holdings(self, job: JobSize) -> Holdings:
        """What a rank holds at ``job``'s widths (:mod:`dglx_dist.strategies.holdings`), which
        :func:`~dglx_dist.strategies.footprint.peak_per_rank` adds to the fit beyond what it
        held at the fit's widths. By default its share of the feature rows and the
        parameters; a strategy counts what it holds (a halo, a preload, a batch, a cache)."""
        layers = self.num_layers() if isinstance(self, ShapedByOptions) else 2
        return Holdings(features=feature_bytes(job, job.nodes / job.world),
                        params=param_bytes(job, layers))


class HoldsRows(abc.ABC):
    """Rows of some node data the strategy holds itself (e.g. preloaded features).

    Attributes:
        held_rows: the node-data names :meth:`local_rows` may give.
    """

    held_rows: frozenset[str]

    @abc.abstractmethod
    def local_rows(self, name: str, ids: torch.Tensor) -> Any:
        """Rows of ``name`` for ``ids`` this rank holds, or None (then read from the KVStore)."""

    def source_rows(self, name: str, block) -> torch.Tensor | None:
        """Every source row of ``name`` for a first block of one of its loader's steps (the
        loader's ``prefetch_node_feats``; collective: every rank at the same step), or None
        (then read as any rows)."""
        return None


class DrawsOffThread(abc.ABC):
    """Its loaders' steps may be drawn off the calling thread: a loader's worker thread
    draws the next steps (``prefetch_factor`` deep) with :meth:`thread_sampler`'s sampler,
    whose exchanges run on communicators of the loader's own, through
    ``loader_epoch(plan, spec, epoch, sampler=...)``, while the model computes."""

    @abc.abstractmethod
    def thread_sampler(self, spec: LoaderSpec, twin) -> Any | None:
        """Its sampler for the epochs of a loader of ``spec`` on a worker thread: the one it
        draws with, exchanging on ``twin(comm)`` where that exchanges on ``comm``
        (collective: every rank builds the loader), or None: this loader's steps are drawn in
        turn on the calling thread (its epochs run collectives of their own, or touch state
        the calling thread touches)."""


class ConvTypes(abc.ABC):
    """It runs only some conv classes (``dglx_dist.nn``'s or ``dgl.nn``'s, by name).

    Attributes:
        conv_types: their class names (readable on the class: ``dglx bench`` checks a model
            before it builds the strategy).
    """

    conv_types: tuple[str, ...]


class Approximate(abc.ABC):
    """Its default options approximate the full-graph math (sampling, staleness)."""

    @classmethod
    @abc.abstractmethod
    def exact_options(cls, num_layers: int) -> dict[str, Any]:
        """Options under which it does single-process full-graph DGL's math for a model of
        ``num_layers`` graph convs (tests/dist/test_contract.py builds it with them)."""


class OverlapsBackward(abc.ABC):
    """Work that starts when backward reaches the model's output (e.g. a gradient exchange
    started early; see :class:`~dglx_dist.runtime.autograd.GradientSync`)."""

    @abc.abstractmethod
    def before_backward(self) -> None:
        """Called when a backward pass reaches the model's output."""


class OwnSplit(abc.ABC):
    """Its own share of ids per rank (DGL's ``node_split``), e.g. a node's loss where its rows
    are."""

    def split_ids(self, ids: torch.Tensor, pdir: PartitionDir, session: Session) -> torch.Tensor:
        """This rank's share of ``ids`` (sorted, unique, the same on every rank): by default
        the ids its part owns (their outputs are computed there)."""
        return ids[torch.as_tensor(pdir.book.owner(ids)) == session.rank]


class ShapedByOptions(abc.ABC):
    """Its options imply the model's depth, and may say the loaders the Trainer uses."""

    def num_layers(self) -> int:
        """Graph convs its options imply: by default its ``num_layers`` option (a mini-batch
        strategy's: one fanout per layer)."""
        return self.config.num_layers

    def trainer_loaders(self, num_layers: int, num_nodes: int) -> tuple[LoaderSpec, LoaderSpec]:
        """The loaders the :class:`~dglx_dist.trainer.Trainer` trains and evaluates with: by
        default full-graph ones (:func:`~dglx_dist.strategies.steps.full_graph_loaders`)."""
        return full_graph_loaders(num_layers, num_nodes, int(getattr(self.config, "seed", 0)))


def exact_options(cls: type, num_layers: int) -> dict[str, Any]:
    """The options under which strategy class ``cls`` does full-graph DGL's math (its
    defaults, unless it is :class:`Approximate`)."""
    return cls.exact_options(num_layers) if issubclass(cls, Approximate) else {}


def epochs_of(strategy: object, epochs: range, hooks: TrainHooks) -> Iterator[EpochResult]:
    """The strategy's own epochs, or the trainer's loader steps epoch by epoch."""
    if isinstance(strategy, OwnEpochs):
        return strategy.train_epochs(epochs, hooks)
    return (hooks.loader_epoch(epoch) for epoch in epochs)


def _stateful() -> type:
    """torch's ``Stateful``, imported when a checkpoint first needs it: importing
    torch.distributed.checkpoint takes about 0.6 s of CPU (sympy among it), in every rank of a
    run that may never checkpoint."""
    from torch.distributed.checkpoint.stateful import Stateful

    return Stateful


def __getattr__(name: str) -> Any:  # the export ``Stateful``, as the module had it
    if name == "Stateful":
        return _stateful()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class StrategyState:
    """A strategy's state between epochs as a checkpoint part (torch's ``Stateful``): its own
    when it is :class:`Stateful`, else nothing (and a checkpoint holding some is refused)."""

    def __init__(self, strategy: object):
        self.strategy = strategy

    def state_dict(self) -> dict[str, Any]:
        return self.strategy.state_dict() if isinstance(self.strategy, _stateful()) else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if isinstance(self.strategy, _stateful()):
            self.strategy.load_state_dict(state)
        elif state:
            name = getattr(self.strategy, "registered_name", "")
            raise CheckpointError(f"strategy {name!r} keeps no state between epochs; the "
                                  f"checkpoint holds {sorted(state)}")
