"""Runs that learned nothing: a final test metric at chance level is named in a warning, or
raised (``--fail-on-collapse``), instead of a run that exits 0 looking like success.

Chance is what a model that ignores its input scores: for node classification the share of
the largest class among the test nodes (always predicting it), for link prediction an AUC of
0.5 (scores that do not order edges above non-edges). A metric within :data:`MARGIN` of it
counts as chance.
"""
from __future__ import annotations

import logging

import torch

from dglx_dist.errors import LearnedNothingError
from dglx_dist.runtime.failure import same_on_every_rank

__all__ = ["MARGIN", "majority_rate", "node_verdict", "link_verdict", "act_on"]

log = logging.getLogger(__name__)

MARGIN = 0.02


def majority_rate(labels: torch.Tensor) -> float:
    """The share of the most frequent label (0 for no labels)."""
    if labels.numel() == 0:
        return 0.0
    return float(torch.bincount(labels.long()).max()) / labels.numel()


def node_verdict(test_acc: float | None, chance: float, epochs: int) -> str | None:
    """Why a node-classification run learned nothing, or None when it did (or has no test
    accuracy)."""
    if test_acc is None or test_acc > chance + MARGIN:
        return None
    return (f"after {epochs} epochs the test accuracy {test_acc:.3f} is at chance "
            f"({chance:.3f}, the largest class's share of the test nodes): the model learned "
            f"nothing from these features and edges; check the features (--row-normalize for "
            f"bag-of-words rows), the labels and the learning rate")


def link_verdict(test_auc: float | None, epochs: int) -> str | None:
    """Why a link-prediction run learned nothing, or None when it did."""
    if test_auc is None or test_auc > 0.5 + MARGIN:
        return None
    return (f"after {epochs} epochs the test AUC {test_auc:.3f} is at chance (0.5): the "
            f"scores do not tell edges from non-edges; check the features (--row-normalize "
            f"for bag-of-words rows, or --model gcn) and the learning rate")


def act_on(verdict: str | None, fail: bool) -> None:
    """Logs ``verdict`` as a warning, or raises it (every rank alike) when ``fail``.

    Raises:
        LearnedNothingError: ``fail`` and a verdict."""
    if verdict is None:
        return
    if fail:
        raise same_on_every_rank(LearnedNothingError(f"{verdict} (--fail-on-collapse)"))
    log.warning("%s", verdict)
