"""``dglx bench`` on a dataset with node and edge types: the systems that train it, each on the
R-GCN (:class:`~dglx_dist.models.RGCN`) with the same fanouts (one per layer, for every edge
type), batch, hidden width, epochs, seed and network.

* ``dgl-distdgl``: DGL's own DistDGL (:func:`~dglx_dist.bench.harness.run_dgl_distdgl`; its
  worker partitions and trains a typed dataset with :mod:`dglx_dist.bench.dgl_distdgl_typed`);
* every registered strategy whose :class:`~dglx_dist.strategies.abilities.Capabilities` say
  ``typed_graphs``: the partitions it asks for, made first (as DGL's), then
  :mod:`dglx_dist.bench.typed_worker` under torchrun, our drop-in API in DGL's loop (timed
  phase by phase, as DGL's side).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, Callable

from dglx_dist.bench.dgl_distdgl import startup
from dglx_dist.bench.harness import (Options, launch, parse_records, partition_first,
                                     run_dgl_distdgl, strategy_config, summarize)
from dglx_dist.bench.presets import bench_run
from dglx_dist.bench.shared import Setup
from dglx_dist.cli_flags import to_argv
from dglx_dist.errors import InvalidValueError

__all__ = ["MODEL", "check_typed", "run_typed_strategy", "typed_systems"]

MODEL = "rgcn"
"""The model every system trains on a typed dataset (the setup's ``model``)."""
WORKER = ["-m", "dglx_dist.bench.typed_worker"]


def typed_systems(extra: Options,
                  task: str = "node") -> dict[str, Callable[[Setup], dict[str, Any]]]:
    """Every system by name that trains a typed dataset: DGL's DistDGL, then each registered
    strategy whose capabilities say ``typed_graphs`` (node classification only:
    :func:`check_typed` refuses the link task first)."""
    from dglx_dist.strategies import STRATEGIES

    table: dict[str, Callable[[Setup], dict[str, Any]]] = {"dgl-distdgl": run_dgl_distdgl}
    for name in STRATEGIES.names():
        if STRATEGIES.get(name).capabilities.typed_graphs:
            table[name] = lambda setup, name=name: run_typed_strategy(name, setup, extra)
    return table


def run_typed_strategy(name: str, setup: Setup, extra: Options) -> dict[str, Any]:
    """Strategy ``name`` training the R-GCN through the drop-in API on the setup's network
    (:mod:`~dglx_dist.bench.typed_worker` under torchrun, on the partitions it asks for)."""
    strategy = strategy_config(name, setup, extra)
    parts = partition_first(strategy, setup)
    run = setup.training(strategy).updated(data={"partitions": Path(parts)})
    t0, launched = time.perf_counter(), time.time()
    stdout = launch(setup, [*WORKER, *to_argv(run), "--fanouts",
                            ",".join(map(str, setup.fanouts)), "--batch-size",
                            str(setup.batch_size)])
    records = parse_records(stdout)
    return summarize(records) | startup(records, launched) | {
        "network": setup.network, "run_wall_s": round(time.perf_counter() - t0, 1),
        "note": f"drop-in API (distribute, DataLoader, parallelize), batch "
                f"{setup.batch_size} per rank", "options": strategy.flag_pairs()}


def check_typed(args: argparse.Namespace) -> None:
    """Refuses, in one line, what ``dglx bench`` cannot run on a typed dataset (before any
    work): the link task, another model, row normalisation, the memory check, evaluation
    fanouts."""
    refusals = [
        (bench_run(args).task.name != "node", "--task link: link prediction on a typed graph "
         "is not supported yet; leave --task out"),
        (getattr(args, "model", None) is not None, f"--model {getattr(args, 'model', '')}: on a "
         f"typed dataset every system trains the R-GCN (dglx_dist.models.RGCN); leave --model "
         f"out"),
        (args.row_normalize == "on", "--row-normalize on: the R-GCN projects the typed "
         "dataset's features as stored; leave it out"),
        (args.memory_limit is not None, "--memory-limit: the typed runs are not checked for "
         "memory; leave it out"),
        (args.eval_fanouts is not None, "--eval-fanouts: the typed runs "
         "evaluate with full neighbourhoods; leave it out")]
    for refused, why in refusals:
        if refused:
            raise InvalidValueError(f"dglx bench on a typed dataset: {why}")
