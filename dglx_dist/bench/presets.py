"""The benchmark's presets, frozen values that return the :class:`~dglx_dist.config.RunConfig`
a run starts from (``run``; the flags given on the command line go over it), and the choice
of network the strategies run on. A preset's ``kind`` (a graph without types, or a typed one)
chooses the systems that run (:data:`dglx_dist.bench.kinds.KINDS`)."""
from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from dglx_dist.cli_flags import from_args
from dglx_dist.config import TRAINING, RunConfig
from dglx_dist.errors import InvalidValueError

if TYPE_CHECKING:
    from dglx_dist.data.synthetic import SyntheticConfig

__all__ = ["BENCH_RUN", "bench_run", "NETWORKS", "PRESETS", "Preset", "SET_BY_SETUP", "ScriptPreset",
           "MagPreset", "choose_network", "script_parser"]

log = logging.getLogger("dglx_dist.bench")
BENCH_RUN = RunConfig().updated(model={"name": "gcn", "hidden": 64},
                                loop={"epochs": 5, "eval_every": 1})
"""The common run's model and optimisation unless told otherwise (``eval_every`` 1: the time
to accuracy needs every epoch's validation accuracy)."""
SET_BY_SETUP = ("layers", "edge_batch_size", "eval_every", "row_normalize")
"""Run config flags a benchmark sets itself rather than passing on: the depth from the
fanouts and the link batch from the batch (:meth:`~dglx_dist.bench.harness.Setup.training`), validation every epoch,
and row normalisation chosen by the dataset (``--row-normalize auto|on|off``)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Preset:
    """What every preset of ``dglx bench`` sets: the run's epochs, hidden width and learning
    rate (:meth:`run`), and the setup's batch, fanouts and cluster shape."""

    kind: ClassVar[str]
    """The kind of dataset it generates (:data:`dglx_dist.bench.kinds.KINDS`)."""

    epochs: int
    hidden: int
    lr: float
    batch_size: int
    """Seeds (of the labeled type) per trainer per step."""
    servers: int
    ranks_per_server: int
    fanouts: tuple[int, ...] = (10, 25)
    """Sampled neighbours (of every edge type) per layer, input layer first, unless
    ``--fanouts`` says."""

    def __post_init__(self) -> None:
        if self.epochs < 2:
            raise InvalidValueError(f"{type(self).__name__}: epochs must be >= 2 (the first "
                                    "epoch is warm-up and not averaged)")

    def run(self, base: RunConfig) -> RunConfig:
        """``base`` with the preset's epochs, hidden width and learning rate."""
        return base.updated(model={"hidden": self.hidden}, optimizer={"lr": self.lr},
                            loop={"epochs": self.epochs})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Preset(_Preset):
    """A preset on the synthetic graph it generates, whose run also sets the link task's
    training edges."""

    kind: ClassVar[str] = "graph"

    num_nodes: int
    num_edges: int
    feat_dim: int
    num_classes: int
    train_edges: int
    """``--task link``: training edges per epoch (a seeded choice of the training graph's)."""

    def __post_init__(self) -> None:
        small = [f.name for f in dataclasses.fields(self)
                 if isinstance(getattr(self, f.name), (int, float)) and getattr(self, f.name) <= 0]
        if small:
            raise InvalidValueError(f"Preset: {', '.join(small)} must be > 0")
        super().__post_init__()

    def synthetic(self, seed: int):
        """The :class:`~dglx_dist.data.synthetic.SyntheticConfig` of its graph."""
        from dglx_dist.data.synthetic import SyntheticConfig

        return SyntheticConfig(num_nodes=self.num_nodes, num_edges=self.num_edges,
                               feat_dim=self.feat_dim, num_classes=self.num_classes, seed=seed)

    def dataset(self, seed: int, workdir: Path) -> Path:
        """Its synthetic graph with ``seed``, generated once and cached in ``workdir``."""
        from dglx_dist.bench.datasets import synthetic_dataset

        return synthetic_dataset(self.synthetic(seed), workdir)

    def run(self, base: RunConfig) -> RunConfig:
        """Also the link task's training edges."""
        return super().run(base).updated(task={"train_edges": self.train_edges})


@dataclasses.dataclass(frozen=True, kw_only=True)
class MagPreset(_Preset):
    """A preset on an ogbn-mag-shaped graph, with node and edge types
    (:data:`~dglx_dist.data.mag.MAG_PRESETS`) and the R-GCN's run (the defaults of
    examples/rgcn_hetero.py)."""

    kind: ClassVar[str] = "typed"

    graph: str
    """A :data:`~dglx_dist.data.mag.MAG_PRESETS` name (its seed replaced by the run's)."""
    fanouts: tuple[int, ...] = (10, 10)

    def __post_init__(self) -> None:
        from dglx_dist.data.mag import MAG_PRESETS

        if self.graph not in MAG_PRESETS:
            raise InvalidValueError(f"MagPreset: graph {self.graph!r}; choose from "
                                    f"{', '.join(MAG_PRESETS)}")
        super().__post_init__()

    def dataset(self, seed: int, workdir: Path) -> Path:
        """Its typed graph with ``seed``, generated once and cached in ``workdir``."""
        from dglx_dist.bench.datasets import mag_dataset_dir
        from dglx_dist.data.mag import MAG_PRESETS

        return mag_dataset_dir(dataclasses.replace(MAG_PRESETS[self.graph], seed=seed), workdir)

    def run(self, base: RunConfig) -> RunConfig:
        """Also Adam without weight decay (the R-GCN examples' optimizer)."""
        return super().run(base).updated(optimizer={"weight_decay": 0.0})


PRESETS: dict[str, Preset | MagPreset] = {
    # a few minutes on 2 cores: 7 runs of ~20-40 s, most of it start-up and partitioning
    "tiny": Preset(num_nodes=20_000, num_edges=300_000, feat_dim=128, num_classes=16, epochs=6,
                   hidden=64, lr=0.01, batch_size=250, servers=2, ranks_per_server=1,
                   train_edges=16_000),
    # ~6 minutes on 2 cores (5.5 min measured)
    "small": Preset(num_nodes=200_000, num_edges=2_000_000, feat_dim=128, num_classes=16,
                    epochs=10, hidden=64, lr=0.01, batch_size=1000, servers=2,
                    ranks_per_server=2, train_edges=48_000),
    # for a big machine (ogbn-products' shape: 2.45M nodes, 124M directed edges, 100
    # features, 47 classes); not run on the development machines
    "large": Preset(num_nodes=2_449_029, num_edges=123_718_280, feat_dim=100, num_classes=47,
                    epochs=5, hidden=256, lr=0.003, batch_size=1000, servers=4,
                    ranks_per_server=4, train_edges=1_000_000),
    # ogbn-mag's shape at 1/256 (2,877 papers, 7,577 nodes, 164,930 edges with the reverses);
    # the R-GCN of examples/rgcn_hetero.py, DGL's DistDGL and distdgl: about a minute each
    "mag-small": MagPreset(graph="mag-small", epochs=10, hidden=64, lr=0.01, batch_size=128,
                             servers=2, ranks_per_server=1),
}


@dataclasses.dataclass(frozen=True)
class ScriptPreset:
    """A benchmark script's preset: its dataset, and the run config it starts from
    (``benchmarks/bench_train.py`` and the strategy sweeps)."""

    graph: SyntheticConfig | str
    """A synthetic graph (its seed replaced by ``--seed``), or a built-in dataset's name."""
    epochs: int
    hidden: int | None = None
    lr: float | None = None

    def run(self, base: RunConfig) -> RunConfig:
        """``base`` with the preset's epochs, and its hidden width and learning rate where it
        has them."""
        return base.updated(loop={"epochs": self.epochs}, **(
            {"model": {"hidden": self.hidden}} if self.hidden is not None else {}), **(
            {"optimizer": {"lr": self.lr}} if self.lr is not None else {}))

    def defaults(self) -> dict[str, Any]:
        """A sweep script's option defaults from the preset (``set_defaults``): epochs, hidden,
        lr where it has them, and a synthetic graph's num_nodes, num_edges and feat_dim."""
        values = {"epochs": self.epochs, "hidden": self.hidden, "lr": self.lr}
        if not isinstance(self.graph, str):
            values |= {k: getattr(self.graph, k) for k in ("num_nodes", "num_edges", "feat_dim")}
        return {k: v for k, v in values.items() if v is not None}

    def dataset(self, seed: int, workdir: Path, **changes: Any) -> Path:
        """The built-in dataset, or the synthetic graph with ``seed`` and ``changes`` (e.g.
        ``feat_dim``), generated once and cached in ``workdir``."""
        from dglx_dist.bench.datasets import synthetic_dataset
        from dglx_dist.prepare import resolve_dataset

        if isinstance(self.graph, str):
            return resolve_dataset(self.graph)
        return synthetic_dataset(dataclasses.replace(self.graph, seed=seed, **changes), workdir)


def script_parser(doc: str, presets: dict[str, Any], default: str,
                  preset_help: str) -> argparse.ArgumentParser:
    """A benchmark script's parser: the first paragraph of its docstring as the description
    (the rest shown as written), and ``--preset`` of ``presets``."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(presets), default=default, help=preset_help)
    return p


NETWORKS = {"1g": "emulated-1g", "10g": "emulated-10g", "virtual": "virtual"}


def choose_network(choice: str, link_preset: str = "1g") -> str:
    """``emulated-<preset>`` where namespaces work (``auto``) or were asked for, else
    ``virtual``; an explicit emulated choice that cannot run is an error."""
    if choice == "virtual":
        return "virtual"
    from dglx_dist.cluster.emulate import PRESETS as LINKS, EmulationUnavailable, check_available

    preset = link_preset if choice == "auto" else choice
    try:
        check_available(LINKS[preset])
    except EmulationUnavailable as exc:
        if choice != "auto":
            raise
        log.warning("no emulated cluster here (%s); using virtual servers", exc)
        return "virtual"
    return NETWORKS[preset]


def bench_run(args: argparse.Namespace) -> RunConfig:
    """The common run config: :data:`BENCH_RUN` with the preset's
    values, then the training flags given (``dglx bench`` adds them as an overlay)."""
    return from_args(RunConfig, args, base=PRESETS[args.preset].run(BENCH_RUN),
                     sections=TRAINING, skip=SET_BY_SETUP)
