"""``dglx bench``: every system (single-process DGL, DGL's DistDGL, each registered strategy)
on the same dataset and model, one after the other; the table on stdout, the results, table
and figure in ``--out`` (:mod:`dglx_dist.bench`, docs/benchmarks.md)."""
from __future__ import annotations

import argparse
import importlib.util
import shlex
import sys
from pathlib import Path
from typing import Callable

from dglx_dist.cli_flags import add_flags, number
from dglx_dist.config import TRAINING, RunConfig
from dglx_dist.errors import InvalidValueError

__all__ = ["COMMANDS", "add_arguments", "run"]


def _fanouts(text: str) -> tuple[int, ...]:
    parts = text.split(",")
    if not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive integers separated by "
                                         f"commas, input layer first, e.g. 10,25")
    return tuple(int(p) for p in parts)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``dglx bench``'s options."""
    from dglx_dist.bench.presets import BENCH_RUN, PRESETS, SET_BY_SETUP

    p.add_argument("--preset", choices=sorted(PRESETS), default="tiny",
                   help="tiny: 20k nodes, minutes; small: 200k nodes / 2M edges, ~6 min on 2 "
                        "cores; large: ogbn-products' shape, for a big machine; mag-small: a "
                        "typed graph shaped like ogbn-mag, the R-GCN, ~2 min")
    p.add_argument("--data", help="a dataset directory (typed too) or built-in name (instead "
                                  "of the preset's synthetic graph)")
    p.add_argument("--systems", type=lambda text: [x for x in text.split(",") if x],
                   help="comma-separated (default: dgl, dgl-distdgl and every strategy; on a "
                        "typed dataset, dgl-distdgl and every strategy that trains one); auto: "
                        "the strategy `dglx plan` picks for this benchmark, its row named "
                        "'auto (STRATEGY)' (options: --strategy-opt auto:KEY=VALUE)")
    p.add_argument("--repeat", type=number(int, 1), default=1,
                   help="run the systems this many times, in turn (rows say which run)")
    p.add_argument("--network", choices=("auto", "virtual", "1g", "10g"), default="auto")
    p.add_argument("--out", type=Path, default=Path("bench-out"),
                   help="a new or empty directory for the results (cached datasets in work/)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an earlier benchmark's results in --out (only files dglx "
                        "bench recorded writing; its work/ caches are reused)")
    p.add_argument("--strategy-opt", action="append", default=[], metavar="NAME:KEY=VALUE",
                   help="an option for one strategy, repeatable (e.g. granndis:co_batches=4)")
    # the run config's training sections: dglx train's flags, over BENCH_RUN and the preset
    # (epochs, hidden, lr, train_edges): a flag not given stays off args (presets.bench_run)
    add_flags(p, RunConfig, sections=TRAINING, skip=SET_BY_SETUP, base=BENCH_RUN,
              overlay=True, changes={
                  "model": {"choices": None},
                  "epochs": {"type": number(int, 2), "help": "at least 2: the first is warm-up "
                                                             "(default: the preset's)"},
                  "hidden": {"help": "hidden width (default: the preset's)"},
                  "lr": {"help": "Adam's learning rate (default: the preset's)"},
                  "train_edges": {"help": "--task link: training edges per epoch (a seeded "
                                          "choice; default: the preset's)"}})
    p.add_argument("--batch-size", type=number(int, 1),
                   help="seeds (--task link: training edges) per trainer per step")
    p.add_argument("--servers", type=number(int, 1))
    p.add_argument("--ranks-per-server", type=number(int, 1))
    p.add_argument("--fanouts", type=_fanouts,
                   help="per layer, input layer first (default: the preset's: 10,25; "
                        "mag-small 10,10 for every edge type)")
    p.add_argument("--eval-fanouts", type=_fanouts,
                   help="the sampled systems' evaluation: neighbours per layer, input layer "
                        "first (default: full neighbourhoods; single-process DGL's always)")
    p.add_argument("--row-normalize", choices=("auto", "on", "off"), default="auto",
                   help="divide input rows by their sums (auto: if no feature is negative)")
    p.add_argument("--target", type=number(float, 0, 1, low_open=True), default=0.95,
                   help="time to accuracy: val_acc >= target x single-process DGL's final")
    p.add_argument("--timeout", type=number(float, 0, low_open=True), default=900.0,
                   help="seconds per run")
    p.add_argument("--memory-limit", type=number(int, 1), metavar="BYTES",
                   help="dglx train's up-front memory check for our strategies' runs "
                        "(default: the memory available when a run starts)")
    p.add_argument("--no-plot", action="store_true", help="skip the PNGs (no matplotlib)")
    p.add_argument("--replot", action="store_true",
                   help="run nothing: rewrite results.md and bench.png from --out's results")


def _check(args: argparse.Namespace) -> None:
    """Refuses what cannot run, before any work starts."""
    from dglx_dist.bench.harness import skipped_baselines
    from dglx_dist.bench.presets import bench_run
    from dglx_dist.bench.suite import check_out, data_kind, extra_options
    from dglx_dist.data.convert import require_dgl

    run = bench_run(args)
    if args.memory_limit is not None and run.task.name != "node":
        raise InvalidValueError("--memory-limit: only node classification runs are checked "
                                "for memory; leave it out with --task link")
    kind = data_kind(args) if not args.replot else None
    if kind is not None:
        kind.check(args)
    if not args.no_plot and importlib.util.find_spec("matplotlib") is None:
        raise InvalidValueError("dglx bench: the figure needs matplotlib: pip install "
                                "'dglx_dist[plot]', or pass --no-plot")
    check_out(args.out, args.overwrite, args.replot)
    if args.replot:
        return
    table = kind.systems(extra_options(args.strategy_opt), run.task.name)
    unknown = [s for s in args.systems or () if s not in table]
    missing = [s for s in unknown if s in skipped_baselines(kind.baselines, run.task.name)]
    if missing:
        require_dgl(f"--systems {', '.join(missing)}", "or leave them out")
    if unknown:
        from dglx_dist.bench.kinds import KINDS

        every = {s for k in KINDS.values() for s in k.systems({}, "node")}
        what = ("unknown" if set(unknown) - every else
                "not for --task link (their strategies do not train it):"
                if run.task.name == "link" else
                "not for a typed dataset (their strategies do not train graphs with types):")
        raise InvalidValueError(f"--systems: {what} {', '.join(unknown)}; choose from "
                                f"{', '.join(table)}")


def run(args: argparse.Namespace, command: str) -> int:
    """Runs the benchmark (or, with ``--replot``, redraws it) and prints the table.

    Args:
        args: the options of :func:`add_arguments`.
        command: the command line, for meta.json and the report's title.

    Returns:
        0 when every selected system ran, else 1.
    """
    from dglx_dist.bench.suite import replot, run_bench

    _check(args)
    if args.replot:
        sys.stdout.write(replot(args.out, not args.no_plot))
        return 0
    rows, text = run_bench(args, command)
    sys.stdout.write(text)
    return 0 if all("error" not in r for r in rows) else 1


# name: (help, add the arguments, run)
COMMANDS: dict[str, tuple[str, Callable, Callable]] = {
    "bench": ("compare single-process DGL, DGL's DistDGL and every strategy on one dataset and "
              "model: epoch time, time to accuracy, bytes, memory, accuracy", add_arguments,
              lambda args: run(args, "dglx " + shlex.join(args.argv))),
}
