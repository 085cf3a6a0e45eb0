"""One benchmark run from the parsed options of ``dglx bench``: dataset, common setup, every
selected system, time to accuracy, optional extra rows (``--sweeps``), and
the outputs in ``--out`` (results.jsonl, meta.json, results.md, bench.png)."""
from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

from dglx_dist.bench.harness import (BENCH_TRAINING, Setup, add_time_to_accuracy, run_system,
                                     systems)
from dglx_dist.bench.presets import PRESETS, choose_network
from dglx_dist.bench.report import markdown, plot, write_jsonl
from dglx_dist.cli_flags import config_from_args
from dglx_dist.errors import InvalidValueError
from dglx_dist.train_config import TrainConfig

__all__ = ["Sweeps", "extra_options", "replot", "run_bench"]

log = logging.getLogger("dglx_dist.bench")
Sweeps = Callable[[argparse.Namespace], list[dict[str, Any]]]
"""Extra rows after the systems' (called with the options; each row carries a ``sweep``)."""


def dataset(args: argparse.Namespace, workdir: Path) -> Path:
    """``--data`` (a directory or built-in name), else the preset's synthetic graph (cached)."""
    from dglx_dist.bench.datasets import synthetic_dataset
    from dglx_dist.prepare import resolve_dataset

    if args.data:
        return resolve_dataset(args.data)
    return synthetic_dataset(PRESETS[args.preset].synthetic(args.seed), workdir)


def make_setup(args: argparse.Namespace, data: Path, network: str) -> Setup:
    """The common setup from the preset and the options given."""
    from dglx_dist.bench.datasets import nonnegative_features

    meta = json.loads((data / "meta.json").read_text())
    row_norm = (nonnegative_features(data) if args.row_normalize == "auto"
                else args.row_normalize == "on")
    train = config_from_args(TrainConfig, args, row_normalize=row_norm,
                             eval_every=BENCH_TRAINING.eval_every)
    return Setup(data=data.resolve(), num_classes=meta["num_classes"], train=train,
                 batch_size=args.batch_size, fanouts=args.fanouts, servers=args.servers,
                 ranks_per_server=args.ranks_per_server, network=network,
                 timeout=args.timeout, workdir=args.out / "work",
                 train_flags=() if args.memory_limit is None else (
                     "--memory-limit", str(args.memory_limit)))


def extra_options(items: list[str]) -> dict[str, list[str]]:
    """``--strategy-opt NAME:KEY=VALUE`` values by strategy.

    Raises:
        InvalidValueError: an item not of that shape.
    """
    out: dict[str, list[str]] = {}
    for item in items:
        name, sep, opt = item.partition(":")
        if not sep or "=" not in opt:
            raise InvalidValueError(f"--strategy-opt {item!r}: expected NAME:KEY=VALUE, e.g. "
                                    f"p3:pipeline=true")
        out.setdefault(name, []).append(opt)
    return out


def run_all(args: argparse.Namespace, setup: Setup) -> list[dict[str, Any]]:
    """Runs the selected systems one after the other (tqdm over the runs)."""
    from tqdm import tqdm

    table = systems(extra_options(args.strategy_opt), args.task)
    rows = []
    bar = tqdm(args.systems or list(table), desc="bench runs", unit="run")
    for name in bar:
        bar.set_postfix_str(name)
        rows.append(run_system(name, table[name], setup))
        row = rows[-1]
        log.info("%s: %s", name, row.get("error") or {k: row.get(k) for k in (
            "epoch_time", "bytes_inter", "peak_mem_mb", "val_acc", "test_acc", "run_wall_s")})
    return rows


def _write(out: Path, rows: list[dict[str, Any]], meta: dict[str, Any], figure: bool) -> str:
    write_jsonl(rows, out / "results.jsonl")
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return _render(out, rows, meta, figure)


def _render(out: Path, rows: list[dict[str, Any]], meta: dict[str, Any], figure: bool) -> str:
    """Writes results.md (and bench.png) from the rows and meta; returns the markdown."""
    text = markdown(rows, meta)
    (out / "results.md").write_text(text)
    if figure:
        plot(rows, out / "bench.png", meta["command"])
    return text


def run_bench(args: argparse.Namespace, command: str,
              sweeps: Sweeps | None = None) -> tuple[list[dict[str, Any]], str]:
    """Runs the benchmark the options describe; returns its rows and the markdown report.

    Args:
        args: ``dglx bench``'s options, presets filled in.
        command: the command line, for meta.json and the report's title.
        sweeps: adds rows after the systems' (``--sweeps``).
    """
    t0 = time.perf_counter()
    (args.out / "work").mkdir(parents=True, exist_ok=True)
    data = dataset(args, args.out / "work")
    setup = make_setup(args, data, choose_network(args.network))
    log.info("setup: %s", setup.public())
    rows = run_all(args, setup)
    target = add_time_to_accuracy(rows, args.target)
    if sweeps is not None:
        rows += sweeps(args)
    meta = {"command": command, "dataset": str(data),
            "setup": {**setup.public(), "layers": setup.layers},
            "target_fraction": args.target, "target_acc": target, "cpus": os.cpu_count(),
            "load_avg_1m": round(os.getloadavg()[0], 2),
            "wall_s": round(time.perf_counter() - t0, 1)}
    text = _write(args.out, rows, meta, not args.no_plot)
    log.info("done in %.0f s; results in %s", meta["wall_s"], args.out)
    return rows, text


def replot(out: Path, figure: bool = True) -> str:
    """Rewrites results.md and bench.png from ``out``'s results.jsonl and meta.json; returns
    the markdown."""
    rows = [json.loads(ln) for ln in (out / "results.jsonl").read_text().splitlines() if ln]
    meta = json.loads((out / "meta.json").read_text())
    return _render(out, rows, meta, figure)
