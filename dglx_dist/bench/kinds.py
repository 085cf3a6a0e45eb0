"""Which systems ``dglx bench`` runs, by the kind of dataset: a graph without types (``graph``)
or one with node and edge types (``typed``). A dataset directory's kind is read from it
(:func:`kind_of`); a preset's is its :attr:`~dglx_dist.bench.presets.Preset.kind`. Each
kind in :data:`KINDS` says its systems, what it refuses, the model and the report's table.
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any, Callable

from dglx_dist.bench.harness import Options, systems
from dglx_dist.bench.shared import Setup
from dglx_dist.bench.typed import MODEL, check_typed, typed_systems

__all__ = ["DataKind", "KINDS", "kind_of"]

Runner = Callable[[Setup], dict[str, Any]]


def _accept(args: argparse.Namespace) -> None:
    """Refuses nothing."""


@dataclasses.dataclass(frozen=True)
class DataKind:
    """How ``dglx bench`` runs one kind of dataset."""

    systems: Callable[[Options, str], dict[str, Runner]]
    """The systems by name that run a task (``systems(strategy_options, task)``)."""
    check: Callable[[argparse.Namespace], None] = _accept
    """Refuses the options this kind cannot run, in one line, before any work."""
    model: str | None = None
    """The model every system trains where it is not ``--model``'s (the setup's ``model``)."""
    table: str | None = None
    """The report's table (:data:`dglx_dist.bench.report.TABLES`); None: the task's."""


KINDS: dict[str, DataKind] = {
    "graph": DataKind(systems),
    "typed": DataKind(typed_systems, check_typed, model=MODEL, table="typed"),
}
"""The kinds of dataset by name."""


def kind_of(data: Path) -> str:
    """The kind of the dataset directory ``data``: ``typed`` when its meta.json names node
    types, else ``graph``."""
    from dglx_dist.data.format import is_hetero

    return "typed" if is_hetero(data) else "graph"
