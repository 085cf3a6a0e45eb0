"""The Strategy interface every distributed strategy implements, and the strategy registry.

A strategy decides how the graph is partitioned, what a batch holds, how the model is wrapped
and what happens between its layers; the user's ``forward(blocks, x)`` stays theirs. The
:class:`~dglx_dist.trainer.Trainer` drives any strategy through this interface only: no code
outside the registry compares strategy names. Differences are methods and capability flags.

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

from dglx_dist.partition.load import PartitionDir
from dglx_dist.registry import Registry
from dglx_dist.runtime.session import Session
from dglx_dist.runtime.topology import Topology

__all__ = ["Strategy", "Batch", "PartitionSpec", "STRATEGIES"]

STRATEGIES: Registry["Strategy"] = Registry("strategy", entry_point_group="dglx_dist.strategies")
"""The strategy registry: ``STRATEGIES.names()``, ``STRATEGIES.build(name, **options)``."""


@dataclasses.dataclass(frozen=True, eq=False)
class Batch:
    """What one training step sees.

    Attributes:
        blocks: DGL blocks (message flow graphs), input layer first.
        x: input features of ``blocks[0]``'s source nodes.
        y: labels of the output nodes.
        seeds: global ids of the output nodes.
    """

    blocks: list
    x: torch.Tensor
    y: torch.Tensor
    seeds: torch.Tensor


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
        collective_forward: the model's forward exchanges data between ranks, so every rank
            runs it at every step, even on an empty batch.
        conv_types: the dgl.nn conv classes the strategy can run (None: any).
        owns_training: ``Trainer.fit`` hands the epochs to :meth:`fit_epochs` (a pipeline in
            which epochs overlap) instead of stepping through :meth:`batches`.
    """

    Config: type
    registered_name: str = ""
    feature_layout: str | None = None
    full_graph: bool = False
    collective_forward: bool = False
    owns_training: bool = False
    conv_types: tuple[str, ...] | None = None

    def __init__(self, config: Any):
        self.config = config

    @abc.abstractmethod
    def partition_spec(self, topology: Topology) -> PartitionSpec:
        """The partitioning this strategy needs on ``topology``."""

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
            raise ValueError(f"{pdir.path} has {pdir.num_parts} parts; strategy "
                             f"{self.registered_name!r} on {topology.num_servers} servers x "
                             f"{topology.ranks_per_server} ranks needs {spec.num_parts} "
                             f"(partition with `dglx partition --method {spec.method} --parts "
                             f"{spec.num_parts}`)")
        if self.feature_layout and pdir.feature_layout != self.feature_layout:
            raise ValueError(f"{pdir.path} stores features as {pdir.feature_layout} (partitioner "
                             f"{pdir.partitioner!r}); strategy {self.registered_name!r} needs "
                             f"{self.feature_layout}: `dglx partition --method {spec.method} "
                             f"--parts {spec.num_parts}`")

    @abc.abstractmethod
    def setup(self, session: Session, pdir: PartitionDir) -> None:
        """Loads this rank's share of the partitions (collective)."""

    @abc.abstractmethod
    def wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model as trained (e.g. in DDP)."""

    @abc.abstractmethod
    def batches(self, epoch: int) -> Iterator[Batch]:
        """One epoch of batches; every rank yields the same number (collective)."""

    def fit_epochs(self, optimizer: torch.optim.Optimizer, first: int, epochs: int,
                   on_epoch) -> None:
        """Trains epochs ``first .. first+epochs-1`` (strategies with ``owns_training``);
        ``on_epoch(epoch, info)`` is called on every rank once an epoch's update is applied,
        with ``info`` holding at least ``wall`` (seconds) and ``loss``."""
        raise NotImplementedError(f"strategy {self.registered_name!r} trains through batches()")

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint must hold of this rank's strategy between epochs besides the model
        and optimizer (tensors, numbers, strings, lists and dicts only)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`'s result (on a strategy set up and wrapped as before)."""
        if state:
            raise ValueError(f"strategy {self.registered_name!r} keeps no state between epochs; "
                             f"the checkpoint holds {sorted(state)}")

    def after_backward(self) -> None:
        """Called after every backward pass (e.g. to account traffic done by DDP)."""

    def forward(self, model: torch.nn.Module, batch: Batch) -> torch.Tensor:
        """Logits of ``batch``'s output nodes."""
        return model(batch.blocks, batch.x)

    @abc.abstractmethod
    def evaluate(self, model: torch.nn.Module, split: str) -> float:
        """Accuracy on ``split`` ("val" or "test") over all partitions (collective)."""

    def close(self) -> None:
        """Releases what setup acquired."""
