"""What every system of a benchmark shares (:class:`Setup`: dataset, run config, batching,
cluster shape, network) and the environment of the processes it starts."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from dglx_dist.bench.presets import BENCH_RUN
from dglx_dist.config import TRAINING, RunConfig, StrategyConfig

__all__ = ["Setup", "process_env"]


@dataclasses.dataclass(frozen=True)
class Setup:
    """What every system shares: dataset, run config, batching, cluster shape, network."""

    data: Path
    num_classes: int
    run: RunConfig = BENCH_RUN
    """The model, its optimisation, loop and task, as ``dglx train`` takes them (the depth,
    the link task's batch, the data and the strategy are the setup's: :meth:`training`)."""
    batch_size: int = 500
    """Seeds per trainer per step; the global batch is batch_size x world (``link``: training
    edges per trainer per step)."""
    fanouts: tuple[int, ...] = (10, 25)
    """Sampled neighbours per layer, input layer first (also the model's depth)."""
    eval_fanouts: tuple[int, ...] = ()
    """DGL's DistDGL's evaluation fanouts (empty: full neighbourhoods); our strategies take
    theirs as options."""
    servers: int = 2
    ranks_per_server: int = 1
    network: str = "virtual"
    """``virtual`` (DGLX_VIRTUAL_SERVERS on loopback) or ``emulated-<preset>`` (1g, 10g)."""
    timeout: float = 900.0
    workdir: Path = Path("bench-out/work")
    train_flags: tuple[str, ...] = ()
    """More ``dglx train`` arguments (the sweeps' ``--measure-saved-bytes``; prefer ``run``)."""
    env: tuple[tuple[str, str], ...] = ()
    """More environment variables of the run's processes (e.g. ``DGLX_MALLOC=system``)."""
    model: str | None = None
    """The model every system trains where it is not the run config's reference model
    (``rgcn`` on a typed graph: :class:`~dglx_dist.models.RGCN`)."""

    @property
    def world(self) -> int:
        return self.servers * self.ranks_per_server

    @property
    def layers(self) -> int:
        return len(self.fanouts)

    def training(self, strategy: StrategyConfig | None = None) -> RunConfig:
        """The run config of a run: :attr:`run` with the depth of ``fanouts``, ``batch_size``
        training edges per step (link task), the setup's data and partition cache, no progress
        bars, and ``strategy``."""
        run = self.run.updated(
            model={"layers": self.layers}, task={"edge_batch_size": self.batch_size},
            data={"data": str(self.data), "cache_dir": self.workdir.resolve() / "parts"},
            job={"progress": False})
        return run if strategy is None else dataclasses.replace(run, strategy=strategy)

    def public(self) -> dict[str, Any]:
        """The setup as flat JSON (paths as strings), without how a run is made."""
        run = {k: v for section in TRAINING for k, v in dataclasses.asdict(
            getattr(self.run, section)).items()
            if k not in ("layers", "edge_batch_size", "eval_every", "eval_negatives", "name")}
        run |= {"model": self.model or self.run.model.name, "task": self.run.task.name}
        rest = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in ("run", "workdir", "train_flags", "env", "model")}
        out = run | rest
        return {k: str(v) if isinstance(v, Path) else
                ",".join(map(str, v)) if k.endswith("fanouts") else v for k, v in out.items()}


def process_env(setup: Setup) -> dict[str, str]:
    """The environment of a benchmark's processes: one thread each, gloo on loopback, the
    setup's timeout and variables."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
            "DGLX_TIMEOUT": str(int(setup.timeout)), **dict(setup.env)}
