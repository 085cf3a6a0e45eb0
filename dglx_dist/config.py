"""What a run is, declared once: :class:`RunConfig`, one nested, frozen, typed config.

::

    RunConfig
      model      ModelConfig      --model --hidden --layers --dropout --row-normalize --convs
      optimizer  OptimizerConfig  --lr --weight-decay
      loop       LoopConfig       --epochs --eval-every --seed
      task       TaskConfig       --task --edge-batch-size --negatives --train-edges
      strategy   StrategyConfig   --strategy --strategy-opt KEY=VALUE (the strategy's own Config)
      data       DataConfig       --data --partitions --cache-dir
      job        JobConfig        --backend --device --no-progress --metrics-out --json --checkpoint-*
                                  --resume --nonfinite-loss --fail-on-collapse
                                  --measure-saved-bytes --memory-limit

Every default lives here, once. The fields are the flags (:func:`~dglx_dist.cli_flags.option`;
:func:`~dglx_dist.cli_flags.add_flags` / :func:`~dglx_dist.cli_flags.from_args` /
:func:`~dglx_dist.cli_flags.to_argv`): ``dglx train`` takes all of them; ``dglx bench``, the
single-process baseline and DGL's DistDGL worker take the :data:`TRAINING` sections; the
example script takes what it uses. The :class:`~dglx_dist.trainer.Trainer` takes an
:class:`OptimizerConfig`, the link task (:mod:`dglx_dist.tasks.link`) reads a whole
``RunConfig``, and the benchmark harness holds one per run (``Setup.run``).

Imports neither torch nor DGL, so a script parses its flags before either loads; a strategy's
typed options are made by the strategy registry (:meth:`StrategyConfig.of`), which loads
them when they are first needed.
"""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, NoReturn

from dglx_dist.cli_flags import check_fields, option, parse_key_values
from dglx_dist.errors import StateError
from dglx_dist.registry import Bounds, RegistryError
from dglx_dist.strategies.cost.shapes import TASK_NAMES

__all__ = ["AUTO", "CONV_LIBRARY_NAMES", "MODEL_NAMES", "TASK_NAMES", "TRAINING",
           "TRAINER_OPTIMIZER", "DataConfig", "JobConfig", "LoopConfig", "ModelConfig",
           "OptimizerConfig", "RunConfig", "StrategyConfig", "TaskConfig"]

MODEL_NAMES = ("sage", "gcn", "gat", "resgcn")
"""The reference models of :data:`dglx_dist.models.MODELS` (a test keeps the two equal)."""
CONV_LIBRARY_NAMES = ("dglx", "dgl")
"""The libraries their convs may come from (:data:`dglx_dist.models.library.CONV_LIBRARIES`;
a test keeps the two equal)."""

TRAINING = ("model", "optimizer", "loop", "task")
"""The sections that say what is computed (not where, nor by which strategy): what the
benchmark's baselines take as flags, and what ``dglx bench`` passes to every system."""

_POSITIVE = Bounds(1)


class _Section:
    """A section refuses a field outside its bounds or choices, from Python too."""

    def __post_init__(self) -> None:
        check_fields(self)


@dataclasses.dataclass(frozen=True)
class ModelConfig(_Section):
    """The reference model (:data:`dglx_dist.models.MODELS`)."""

    name: str = option("sage", "reference model: GraphSAGE, GCN, GAT (4 heads of --hidden), "
                               "or the deep residual ResGCN+ (dglx_dist.models); a dataset "
                               "with node types trains an R-GCN instead",
                       flag="--model", choices=MODEL_NAMES)
    hidden: int = option(16, "hidden width", bounds=_POSITIVE)
    layers: int = option(2, "layers, when the strategy does not imply them", bounds=_POSITIVE)
    dropout: float = option(0.5, "dropout between layers", bounds=Bounds(0, 1, high_open=True))
    row_normalize: bool = option(False, "divide each feature row by its sum (as DGL's "
                                        "Planetoid loaders do to bag-of-words features; the "
                                        "shipped Cora is stored so already); default: "
                                        "features as stored")
    convs: str = option("dglx", "the reference model's convs: the package's (dglx_dist.nn, "
                                "no DGL needed) or DGL's dgl.nn (to compare them; needs DGL), "
                                "the R-GCN's of a typed graph too",
                        choices=CONV_LIBRARY_NAMES)


@dataclasses.dataclass(frozen=True)
class OptimizerConfig(_Section):
    """Adam's settings."""

    lr: float = option(0.01, "Adam's learning rate", bounds=Bounds(0, low_open=True))
    weight_decay: float = option(5e-4, "Adam's weight decay", bounds=Bounds(0))

    def with_changes(self, lr: float | None = None,
                     weight_decay: float | None = None) -> OptimizerConfig:
        """This config with the keyword arguments that were given (not None) in place."""
        given = {k: v for k, v in (("lr", lr), ("weight_decay", weight_decay)) if v is not None}
        return dataclasses.replace(self, **given) if given else self

    def adam(self, params):
        """``torch.optim.Adam`` over ``params`` with these settings."""
        import torch

        return torch.optim.Adam(params, lr=self.lr, weight_decay=self.weight_decay)


TRAINER_OPTIMIZER = OptimizerConfig(weight_decay=0.0)
"""What a :class:`~dglx_dist.trainer.Trainer` given no optimizer settings uses: Adam without
weight decay, as torch's Adam and the Trainer always have (a run's recipe, ``dglx train``'s,
is :class:`OptimizerConfig`'s own defaults)."""


@dataclasses.dataclass(frozen=True)
class LoopConfig(_Section):
    """How long to train and when to evaluate."""

    epochs: int = option(50, "epochs", bounds=_POSITIVE)
    eval_every: int = option(10, "validate every N epochs (0: only after the last)",
                             bounds=Bounds(0))
    seed: int = option(0, "torch's (and the link task's numpy) seed", bounds=Bounds())


@dataclasses.dataclass(frozen=True)
class TaskConfig(_Section):
    """What is learnt: node classification, or link prediction on the dataset's edges."""

    name: str = option("node", "node classification (the Trainer), or link prediction on the "
                               "dataset's edges (docs/link_prediction.md)",
                       flag="--task", choices=TASK_NAMES)
    edge_batch_size: int = option(1024, "--task link: training edges per rank per step",
                                  bounds=_POSITIVE)
    negatives: int = option(1, "--task link: uniform negatives per training edge",
                            bounds=_POSITIVE)
    train_edges: int | None = option(None, "--task link: train on N of the training edges (a "
                                           "seeded random choice, the same every epoch; "
                                           "default all)", bounds=_POSITIVE)
    eval_negatives: int = option(100, "--task link: uniform negatives each held-out pair is "
                                      "ranked against", bounds=_POSITIVE, cli=False)
    eval_pairs: int | None = option(None, "--task link: rank N of the held-out pairs (a seeded "
                                          "random choice; default all)", bounds=_POSITIVE)


AUTO = "auto"
"""The strategy name that asks a plan to choose the strategy and its options
(:func:`dglx_dist.planner.auto.resolve`, before the strategy is built)."""


class _PlanFirst:
    """What stands for the strategy registry under the name :data:`AUTO`: the options given
    with it are kept as given, in a Config of their own without defaults, for the plan that
    checks them against the strategies that take them; nothing is built before it."""

    @staticmethod
    def make_config(name: str, **options: Any) -> Any:
        try:
            return _given_options(tuple(sorted(options)))(**options)
        except TypeError:  # not a name any strategy's option has
            raise RegistryError(f"strategy 'auto': options {sorted(options)}: expected option "
                                f"names") from None

    @staticmethod
    def build(name: str, **options: Any) -> NoReturn:
        raise StateError("strategy 'auto' is resolved by a plan before it is built "
                         "(dglx_dist.planner.auto.resolve); build the strategy it chose")


@functools.cache
def _given_options(keys: tuple[str, ...]) -> type:
    return dataclasses.make_dataclass("AutoOptions", keys, frozen=True)


def _registry(name: str):
    """What makes strategy ``name``'s options and builds it: the strategy registry, or for
    :data:`AUTO` :class:`_PlanFirst`."""
    from dglx_dist.strategies import STRATEGIES

    return _PlanFirst if name == AUTO else STRATEGIES


@dataclasses.dataclass(frozen=True)
class StrategyConfig:
    """The strategy: a registered name and that strategy's own typed options (its registered
    ``Config``, made and checked by ``STRATEGIES.make_config``; None: its defaults); or
    :data:`AUTO` and the options given with it, kept for the plan that resolves it
    (:func:`dglx_dist.planner.auto.resolve`)."""

    name: str = option("distdgl", "registered strategy, or auto: the one `dglx plan` chooses "
                                  "for this graph and launch, with its options (those given "
                                  "are kept)", flag="--strategy")
    options: Any = option(None, "strategy option, repeatable (see docs/strategies)",
                          flag="--strategy-opt", repeat=True)

    @classmethod
    def of(cls, name: str, **options: Any) -> StrategyConfig:
        """``name`` with ``options`` (strings from the command line are coerced), checked by
        the strategy registry (:data:`AUTO`'s by the plan that resolves it).

        Raises:
            RegistryError: an unknown strategy or option, or a value of the wrong type.
        """
        return cls(name, _registry(name).make_config(name, **options))

    @classmethod
    def from_flags(cls, base: StrategyConfig, name: str | None = None,
                   options: list[str] | None = None) -> StrategyConfig:
        """From ``--strategy`` and ``--strategy-opt`` (``base``'s where not given)."""
        if name is None and options is None:
            return base
        if options is None:  # another strategy: base's options may not be its
            return cls(name) if name != base.name else base
        return cls.of(name or base.name, **parse_key_values(options, "--strategy-opt"))

    def values(self) -> dict[str, Any]:
        """The options as keywords (empty: the strategy's defaults)."""
        if self.options is None:
            return {}
        return {f.name: getattr(self.options, f.name) for f in dataclasses.fields(self.options)}

    def flag_pairs(self) -> list[str]:
        """The options that differ from the strategy's defaults (:data:`AUTO` has none), as
        ``KEY=VALUE``."""
        if self.options is None:
            return []
        default = StrategyConfig.of(self.name).values()
        return [f"{k}={_text(v)}" for k, v in self.values().items()
                if k not in default or v != default[k]]

    def build(self):
        """The strategy instance (``STRATEGIES.build``).

        Raises:
            StateError: the name is :data:`AUTO`, which a plan resolves first.
        """
        return _registry(self.name).build(self.name, **self.values())


def _text(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value).lower() if isinstance(value, bool) or value is None else str(value)


@dataclasses.dataclass(frozen=True)
class DataConfig(_Section):
    """Where the dataset and its partitions are."""

    data: str | None = option(None, "dataset directory or built-in name (default: cora); with "
                                    "--partitions, checked to be the dataset they were made "
                                    "from")
    partitions: Path | None = option(None, "partition directory from `dglx partition` "
                                           "(default: partition --data for the strategy, cached "
                                           "in --cache-dir)")
    cache_dir: Path = option(Path("dglx-partitions"), "where partitions made for a run are "
                                                      "cached")


@dataclasses.dataclass(frozen=True)
class JobConfig(_Section):
    """How the job runs and reports: devices, output, checkpoints, refusals."""

    backend: str | None = option(None, "gloo or nccl, the backend of the device collectives "
                                       "(default: nccl on GPUs; host traffic is always gloo's)")
    device: str | None = option(None, "auto, cpu, cuda or cuda:N (default auto: local rank i "
                                      "on GPU i when CUDA is available, else the CPU)")
    progress: bool = option(True, "no progress bars", flag="--no-progress")
    metrics_file: Path | None = option(None, "append each epoch's metrics record to FILE as a "
                                             "JSON line (--metrics-file: the same)",
                                       flag="--metrics-out", aliases=("--metrics-file",),
                                       metavar="FILE")
    json: bool = option(False, "the metrics records as JSON lines on stdout also where it is "
                               "a terminal (elsewhere they are written anyway); a terminal "
                               "otherwise gets the summary table")
    checkpoint_dir: Path | None = option(None, "save checkpoints here (a directory every rank "
                                               "sees); a run restarted by torchrun "
                                               "--max-restarts resumes from it")
    checkpoint_every: int = option(1, "save after every N epochs and after the last",
                                   bounds=_POSITIVE, metavar="N")
    nonfinite_loss: str = option("raise", "an epoch whose loss is NaN or Inf stops the run with "
                                          "an error naming the epoch and step (default), or is "
                                          "logged and training goes on",
                                 choices=("raise", "warn"))
    fail_on_collapse: bool = option(False, "exit 2 when the test accuracy (AUC for --task "
                                           "link) ends at chance level, instead of the warning")
    measure_saved_bytes: bool = option(False, "report peak_saved_mb, the activation memory of a "
                                              "training forward (a saved-tensor hook on every "
                                              "forward; off by default)")
    resume: bool = option(False, "continue from the newest intact checkpoint in "
                                 "--checkpoint-dir")
    prefetch_thread: str = option("auto", "the training loader's worker thread (DGL's "
                                          "use_prefetch_thread): auto, where the steps go to a "
                                          "GPU, as DGL's default; on; off, the loop in turn",
                                  choices=("auto", "on", "off"))
    prefetch_factor: int | None = option(None, "steps the training loader draws ahead of the "
                                               "loop (on its worker thread, else on the calling "
                                               "thread), each holding its rows (DGL's "
                                               "prefetch_factor; default 2, or what --strategy "
                                               "auto chose)", bounds=_POSITIVE, metavar="N")
    num_workers: int | None = option(None, "sampler processes per rank that draw the training "
                                           "loader's steps while its worker thread starts "
                                           "their rows' pulls (DGL's num_workers; default 0, "
                                           "none, or what --strategy auto chose)",
                                     bounds=Bounds(0), metavar="N")
    use_uva: bool = option(False, "the training loader draws its steps on the rank's GPU "
                                  "(DGL's use_uva; the strategy's sampler copied into the "
                                  "GPU's memory; needs a GPU)")
    gpu_cache: int | None = option(None, "the training loader keeps the feature rows of this "
                                         "many nodes (those of most out-edges) on the rank's "
                                         "GPU (DGL's gpu_cache; needs a GPU)",
                                   bounds=_POSITIVE, metavar="ROWS")
    memory_limit: int | None = option(None, "refuse before starting when the strategy's "
                                            "estimated peak for this machine's ranks exceeds "
                                            "this (default: the memory available now; node "
                                            "task only)", bounds=_POSITIVE, metavar="BYTES")

    @property
    def use_prefetch_thread(self) -> bool | None:
        """``prefetch_thread`` as DGL's ``use_prefetch_thread`` (None: DGL's default)."""
        return {"auto": None, "on": True, "off": False}[self.prefetch_thread]

    def train_loader(self) -> dict:
        """The training loader's DGL ``DataLoader`` options these flags ask for."""
        kept = {"gpu_cache": {"node": {"feat": self.gpu_cache}}} if self.gpu_cache else {}
        return {"use_prefetch_thread": self.use_prefetch_thread,
                "num_workers": self.num_workers or 0,
                "prefetch_factor": self.prefetch_factor, "use_uva": self.use_uva, **kept}


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One run: the model, its optimisation, the loop, the task, the strategy, the data and
    the job (the defaults are ``dglx train``'s)."""

    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    loop: LoopConfig = dataclasses.field(default_factory=LoopConfig)
    task: TaskConfig = dataclasses.field(default_factory=TaskConfig)
    strategy: StrategyConfig = dataclasses.field(default_factory=StrategyConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    job: JobConfig = dataclasses.field(default_factory=JobConfig)

    def updated(self, **sections: dict[str, Any]) -> RunConfig:
        """This config with fields of its sections replaced, e.g.
        ``updated(model={"hidden": 64}, loop={"epochs": 5})``."""
        return dataclasses.replace(self, **{
            name: dataclasses.replace(getattr(self, name), **changes)
            for name, changes in sections.items()})
