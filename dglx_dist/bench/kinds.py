"""Which systems ``dglx bench`` runs, by the kind of dataset (:data:`KINDS`): a graph without
types (``graph``) or one with node and edge types (``typed``), read from a dataset directory
(:func:`kind_of`) or a preset's ``kind``; each is data for the one harness
(:func:`~dglx_dist.bench.harness.systems`).
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any, Callable

from dglx_dist.bench.harness import Options, Target, dropin_target, systems, train_target
from dglx_dist.bench.presets import bench_run
from dglx_dist.bench.shared import Setup
from dglx_dist.errors import InvalidValueError

__all__ = ["DataKind", "KINDS", "kind_of"]

Runner = Callable[[Setup], dict[str, Any]]
Refusal = tuple[Callable[[argparse.Namespace], bool], str]


@dataclasses.dataclass(frozen=True)
class DataKind:
    """How ``dglx bench`` runs one kind of dataset."""

    name: str
    """What the refusals call it."""
    baselines: tuple[str, ...] = ("dgl", "dgl-distdgl")
    """The DGL systems that run it (:data:`~dglx_dist.bench.harness.BASELINES`)."""
    needs: tuple[str, ...] = ()
    """The capabilities a strategy needs to run it."""
    target: Target = train_target
    """How a strategy's run starts (``dglx train``, or DGL's loop through the drop-in API)."""
    loaders: bool = False
    """Its runs train under the drop-in API's DataLoaders, where a full-graph strategy takes
    a co-batch per batch (what ``auto`` plans)."""
    refusals: tuple[Refusal, ...] = ()
    """The options it cannot run: ``(refused(args), why)``, ``why`` formatted with
    ``args``; refused before any work."""
    model: str | None = None
    """The model every system trains where it is not ``--model``'s (the setup's ``model``)."""
    table: str | None = None
    """The report's table (:data:`dglx_dist.bench.report.TABLES`); None: the task's."""

    def systems(self, extra: Options, task: str = "node") -> dict[str, Runner]:
        """The systems by name that run ``task`` (``extra``: strategy options by name)."""
        return systems(extra, task, self.baselines, self.needs, self.target, self.loaders)

    def check(self, args: argparse.Namespace) -> None:
        """Refuses, in one line, an option this kind cannot run (before any work)."""
        for refused, why in self.refusals:
            if refused(args):
                raise InvalidValueError(f"dglx bench on a {self.name}: {why.format(args=args)}")


TYPED_REFUSALS: tuple[Refusal, ...] = (
    (lambda args: bench_run(args).task.name != "node", "--task link: link prediction on a "
     "typed graph is not supported yet; leave --task out"),
    (lambda args: getattr(args, "model", None) is not None, "--model {args.model}: on a "
     "typed dataset every system trains the R-GCN (dglx_dist.models.RGCN); leave --model out"),
    (lambda args: args.row_normalize == "on", "--row-normalize on: the R-GCN projects the "
     "typed dataset's features as stored; leave it out"),
    (lambda args: args.memory_limit is not None, "--memory-limit: the typed runs are not "
     "checked for memory; leave it out"),
    (lambda args: args.eval_fanouts is not None, "--eval-fanouts: the typed runs evaluate "
     "with full neighbourhoods; leave it out"))
"""What ``dglx bench`` cannot run on a typed dataset."""

KINDS: dict[str, DataKind] = {
    "graph": DataKind("graph without types"),
    "typed": DataKind("typed dataset", ("dgl-distdgl",), ("typed_graphs",), dropin_target,
                      True, TYPED_REFUSALS, model="rgcn", table="typed"),
}
"""The kinds of dataset by name."""


def kind_of(data: Path) -> str:
    """The kind of the dataset directory ``data``: ``typed`` when its meta.json names node
    types, else ``graph``."""
    from dglx_dist.data.format import is_hetero

    return "typed" if is_hetero(data) else "graph"
