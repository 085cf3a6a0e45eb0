"""What a training run is, declared once: :class:`TrainConfig`.

The model, its optimisation and the task of a run, as one typed, frozen config. Its fields are
the flags: ``dglx train``, ``examples/train_node_classification.py``, plain DGL's reference
run (:mod:`dglx_dist.bench.single`) and ``dglx bench`` declare them with
:func:`~dglx_dist.cli_flags.add_config_flags` and read them back with
:func:`~dglx_dist.cli_flags.config_from_args`; the benchmark harness holds a ``TrainConfig``
per run and starts ``dglx train`` with :func:`~dglx_dist.cli_flags.config_argv` of it. What
is not about the math (which strategy and its options, where the data and partitions are,
checkpoints, the backend, logging) stays with each command.

Imports neither torch nor DGL, so a script parses its flags before either loads.
"""
from __future__ import annotations

import dataclasses

from dglx_dist.cli_flags import flag_field
from dglx_dist.registry import Bounds

__all__ = ["MODEL_NAMES", "TrainConfig"]

MODEL_NAMES = ("sage", "gcn", "gat", "resgcn")
"""The reference models of :data:`dglx_dist.models.MODELS` (a test keeps the two equal)."""

_POSITIVE = Bounds(1)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """One training run's model, optimisation and task (the defaults are ``dglx train``'s)."""

    task: str = flag_field("node", "node classification (the Trainer), or link prediction on "
                                   "the dataset's edges (docs/link_prediction.md)",
                           choices=("node", "link"))
    model: str = flag_field("sage", "reference model: GraphSAGE, GCN, GAT (4 heads of "
                                    "--hidden), or the deep residual ResGCN+ (dglx_dist.models)",
                            choices=MODEL_NAMES)
    hidden: int = flag_field(16, "hidden width", bounds=_POSITIVE)
    layers: int = flag_field(2, "layers, when the strategy does not imply them",
                             bounds=_POSITIVE)
    dropout: float = flag_field(0.5, "dropout between layers", bounds=Bounds(0, 1,
                                                                             high_open=True))
    lr: float = flag_field(0.01, "Adam's learning rate", bounds=Bounds(0, low_open=True))
    weight_decay: float = flag_field(5e-4, "Adam's weight decay", bounds=Bounds(0))
    epochs: int = flag_field(50, "epochs", bounds=_POSITIVE)
    eval_every: int = flag_field(10, "validate every N epochs (0: only after the last)",
                                 bounds=Bounds(0))
    seed: int = flag_field(0, "torch's (and the link task's numpy) seed", bounds=Bounds())
    row_normalize: bool = flag_field(False, "divide each feature row by its sum (as DGL's "
                                            "Planetoid loaders do to bag-of-words features; "
                                            "the shipped Cora is stored so already); default: "
                                            "features as stored")
    edge_batch_size: int = flag_field(1024, "--task link: training edges per rank per step",
                                      bounds=_POSITIVE)
    negatives: int = flag_field(1, "--task link: uniform negatives per training edge",
                                bounds=_POSITIVE)
    train_edges: int | None = flag_field(None, "--task link: train on N of the training "
                                               "edges (a seeded random choice, the same every "
                                               "epoch; default all)", bounds=_POSITIVE)
