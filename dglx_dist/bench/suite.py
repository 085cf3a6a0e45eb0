"""One benchmark run from the parsed options of ``dglx bench``: dataset, common setup, every
selected system, time to accuracy, and the outputs in ``--out`` (results.jsonl, meta.json,
results.md, bench.png)."""
from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from dglx_dist.bench.floor import add_floors
from dglx_dist.bench.harness import (NAMED_ONLY, Setup, add_time_to_accuracy, run_system,
                                     skipped_baselines)
from dglx_dist.bench.kinds import KINDS, DataKind, kind_of
from dglx_dist.bench.presets import PRESETS, bench_run, choose_network
from dglx_dist.bench.report import markdown, plot, write_jsonl
from dglx_dist.cli_flags import parse_key_values
from dglx_dist.data.atomic import DirKind, check_target
from dglx_dist.data.nolinks import replace_file
from dglx_dist.data.convert import DGL_EXTRA
from dglx_dist.data.owned import read_record, write_record
from dglx_dist.errors import InvalidValueError, OutputExistsError
from dglx_dist.report import key_values

__all__ = ["BENCH_DIR", "check_out", "data_kind", "extra_options", "replot",
           "run_bench"]

BENCH_DIR = DirKind("bench", "a dglx bench output directory")
_RENDERED = ("results.md", "bench.png")
RESULTS = ("results.jsonl", "meta.json", *_RENDERED)

log = logging.getLogger("dglx_dist.bench")


def dataset(args: argparse.Namespace, workdir: Path) -> Path:
    """``--data`` (a directory or built-in name), else the preset's synthetic graph (cached)."""
    from dglx_dist.prepare import resolve_dataset

    if args.data:
        return resolve_dataset(args.data)
    return PRESETS[args.preset].dataset(bench_run(args).loop.seed, workdir)


def data_kind(args: argparse.Namespace) -> DataKind:
    """The kind of the benchmark's dataset: ``--data``'s, else the preset's (read before any
    work: the dataset is not generated for it)."""
    from dglx_dist.prepare import resolve_dataset

    return KINDS[kind_of(resolve_dataset(args.data)) if args.data else PRESETS[args.preset].kind]


def make_setup(args: argparse.Namespace, data: Path, network: str,
               kind: DataKind = KINDS["graph"]) -> Setup:
    """The common setup from the preset and the options given."""
    from dglx_dist.bench.datasets import nonnegative_features

    meta = json.loads((data / "meta.json").read_text())
    row_norm = (nonnegative_features(data) if args.row_normalize == "auto"
                else args.row_normalize == "on") and kind.model is None  # else: as stored
    preset = PRESETS[args.preset]
    run = bench_run(args).updated(model={"row_normalize": row_norm},
                                  job={"memory_limit": args.memory_limit})
    given = lambda value, default: default if value is None else value  # noqa: E731
    return Setup(data=data.resolve(), num_classes=meta["num_classes"], run=run,
                 batch_size=given(args.batch_size, preset.batch_size),
                 fanouts=given(args.fanouts, preset.fanouts),
                 eval_fanouts=given(args.eval_fanouts, ()),
                 servers=given(args.servers, preset.servers),
                 ranks_per_server=given(args.ranks_per_server, preset.ranks_per_server),
                 network=network, timeout=args.timeout, workdir=args.out / "work",
                 model=kind.model)


def extra_options(items: list[str]) -> dict[str, dict[str, str]]:
    """``--strategy-opt NAME:KEY=VALUE`` values by strategy (strings; the strategy registry
    types and checks them).

    Raises:
        InvalidValueError: an item not of that shape, or a key given twice.
    """
    pairs: dict[str, list[str]] = {}
    for item in items:
        name, sep, opt = item.partition(":")
        if not sep or "=" not in opt:
            raise InvalidValueError(f"--strategy-opt {item!r}: expected NAME:KEY=VALUE, e.g. "
                                    f"p3:pipeline=true")
        pairs.setdefault(name, []).append(opt)
    return {name: parse_key_values(opts, f"--strategy-opt {name}:")
            for name, opts in pairs.items()}


def check_out(out: Path, overwrite: bool, replot: bool) -> None:
    """Refuses an ``--out`` that would lose something, before any work: a file, a directory
    holding anything but an earlier benchmark's recorded outputs, or (without
    ``--overwrite``) an earlier benchmark's; ``--replot`` rewrites only an earlier
    benchmark's (:mod:`~dglx_dist.data.owned`)."""
    if not replot:
        check_target(out, overwrite, BENCH_DIR)
    elif not (out / "results.jsonl").is_file():
        raise InvalidValueError(f"dglx bench --replot: no results.jsonl in {out} (--out names "
                                f"a directory of an earlier run)")
    else:  # it reads results.jsonl and meta.json, and replaces results.md and bench.png
        record = read_record(out)
        mine = [n for n in _RENDERED if (out / n).exists() and
                (record is None or not record.proves(out, n))]
        if mine:
            raise OutputExistsError(f"dglx bench --replot: {out} holds {', '.join(mine)}, "
                                    f"which dglx bench did not write or which changed since; "
                                    f"refusing to replace them: move them out first")


def _clear_results(out: Path) -> None:
    """Removes an earlier run's results (checked by :func:`check_out`); its cached datasets
    and partitions under ``work/`` stay for this run."""
    record = read_record(out)
    for name in RESULTS if record is not None else ():
        if name in record.files:
            (out / name).unlink(missing_ok=True)


def run_all(args: argparse.Namespace, setup: Setup, kind: DataKind) -> list[dict[str, Any]]:
    """Runs the selected systems (default: every one but those run only when named, such as
    ``auto``) one after the other, ``--repeat`` times in turn (tqdm over the runs); with
    repeats, each row's ``run`` says which."""
    from tqdm import tqdm

    table = kind.systems(extra_options(args.strategy_opt), setup.run.task.name)
    skipped = skipped_baselines(kind.baselines, setup.run.task.name)
    if skipped:
        log.warning("DGL is not installed: the DGL rows (%s) are skipped; %s to run them",
                    ", ".join(skipped), DGL_EXTRA)
    rows = []
    bar = tqdm([(run, name) for run in range(1, args.repeat + 1)
                for name in args.systems or [n for n in table if n not in NAMED_ONLY]],
               desc="bench runs", unit="run", disable=None)  # a terminal's only
    for run, name in bar:
        bar.set_postfix_str(name)
        row = run_system(name, table[name], setup)
        rows.append({"run": run} | row if args.repeat > 1 else row)
        log.info("%s: %s", name, row.get("error") or key_values({k: row.get(k) for k in (
            "epoch_time", "bytes_inter", "peak_mem_mb", "val_acc", "test_acc", "run_wall_s")}))
    return rows


def _render(out: Path, rows: list[dict[str, Any]], meta: dict[str, Any], figure: bool) -> str:
    """Writes results.md (and bench.png) from the rows and meta; returns the markdown."""
    text = markdown(rows, meta)
    replace_file(out / "results.md", text)
    if figure:
        plot(rows, out / "bench.png", meta["command"],
             meta.get("table") or meta["setup"].get("task", "node"))
    return text


def run_bench(args: argparse.Namespace, command: str) -> tuple[list[dict[str, Any]], str]:
    """Runs the benchmark the options describe; returns its rows and the markdown report.

    Args:
        args: ``dglx bench``'s options, presets filled in.
        command: the command line, for meta.json and the report's title.
    """
    t0 = time.perf_counter()
    _clear_results(args.out)
    (args.out / "work").mkdir(parents=True, exist_ok=True)
    data = dataset(args, args.out / "work")
    kind = KINDS[kind_of(data)]
    setup = make_setup(args, data, choose_network(args.network), kind)
    log.info("setup: %s", key_values(setup.public()))
    rows = run_all(args, setup, kind)
    target = add_time_to_accuracy(rows, args.target)
    add_floors(rows, setup.network, setup.world)
    meta = {"command": command, "dataset": str(data), "kind": kind_of(data),
            "table": kind.table or setup.run.task.name,
            "setup": {**setup.public(), "layers": setup.layers},
            "target_fraction": args.target, "target_acc": target, "cpus": os.cpu_count(),
            "load_avg_1m": round(os.getloadavg()[0], 2),
            "wall_s": round(time.perf_counter() - t0, 1)}
    write_jsonl(rows, args.out / "results.jsonl")
    replace_file(args.out / "meta.json", json.dumps(meta, indent=2) + "\n")
    text = _render(args.out, rows, meta, not args.no_plot)
    write_record(args.out, BENCH_DIR.name)  # the run's every file, its work/ caches included
    log.info("done in %.0f s; results in %s", meta["wall_s"], args.out)
    return rows, text


def replot(out: Path, figure: bool = True) -> str:
    """Rewrites results.md and bench.png from ``out``'s results.jsonl and meta.json; returns
    the markdown.

    Raises:
        InvalidValueError: either file is not what ``dglx bench`` writes (naming the line)."""
    rows = []
    for n, line in enumerate((out / "results.jsonl").read_text(errors="replace").splitlines()):
        try:
            row = json.loads(line) if line.strip() else None
        except ValueError:
            row = line
        if row is not None and not (isinstance(row, dict) and "system" in row):
            raise InvalidValueError(f"{out / 'results.jsonl'} line {n + 1}: not a result row of "
                                    f"dglx bench (truncated or another file?); run the "
                                    f"benchmark again")
        rows += [row] if row is not None else []
    try:
        meta = json.loads((out / "meta.json").read_text())
    except (OSError, ValueError) as exc:
        meta = f"{type(exc).__name__}: {exc}"
    if not isinstance(meta, dict) or "command" not in meta:
        raise InvalidValueError(f"{out / 'meta.json'}: not the meta.json of dglx bench "
                                f"({str(meta):.80}); run the benchmark again")
    text = _render(out, rows, meta, figure)
    write_record(out, BENCH_DIR.name, only=_RENDERED)  # what --replot rewrote, and no more
    return text
