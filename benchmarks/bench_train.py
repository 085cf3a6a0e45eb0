"""Benchmark: our ``distdgl`` strategy against DGL's own DistDGL, side by side in one run.

Both train the same GraphSAGE (our ``SAGE`` class, same seed) on the same dataset in 2 METIS
partitions (train/val/test and edges balanced) with 2 trainers and the same fanouts, batch
size, epochs and optimizer. Ours: ``dglx partition --method metis --parts 2``, then ``torchrun
--nproc-per-node 2 -m dglx_dist train --strategy distdgl`` with ``DGLX_VIRTUAL_SERVERS=2``.
DGL: ``dgl.distributed.partition_graph``, then per simulated machine one DGL server and one
trainer running DGL's example loop (:mod:`dglx_dist.bench.dgl_distdgl`, the runner ``dglx bench``
uses too, and its worker; each machine gets a private /dev/shm through ``unshare --mount``, see
the worker's docstring). Our runs go through the benchmark harness
(:func:`dglx_dist.bench.harness.run_strategy`, and :func:`~dglx_dist.bench.harness.launch`
for ``--profile``).

``--network 1g`` (or ``10g``) runs both on the emulated cluster (:mod:`dglx_dist.cluster.emulate`)
instead of loopback, DGL's inter-server bytes counted on the machines' interfaces.

Partitioning is not in the epoch time, nor in the start-up (launch to the first epoch's
training: ``startup_s``). Per system: mean epoch time without the first epoch
(with ``--repeat N``: N runs per system, alternating ours/DGL, and the median of the runs'
means; this machine's speed drifts by 20-30% between runs), steps per epoch, test accuracy
(all test nodes, full neighborhoods unless ``--eval-fanouts``), peak memory per trainer and our inter-server bytes per
epoch. ``--profile`` adds an instrumented run of ours to
compare phase by phase (sampling, KVStore pull, forward, backward, all-reduce, optimizer) with
the same phases timed in DGL's loop (:mod:`benchmarks.ours_profile`).

Usage::

    python -m benchmarks.bench_train --preset tiny           # Cora, quick
    python -m benchmarks.bench_train --preset small --repeat 3 --profile --out results.json
    python -m benchmarks.bench_train --data DIR --mode ours --epochs 3
    python -m benchmarks.bench_train --preset small --mode all --repeat 3  # + ours, glibc malloc
    python -m benchmarks.bench_train --data g1m --network 1g --epochs 3 --hidden 32 \
        --lr 0.01 --repeat 3 --profile       # both on the emulated 1 Gbit/s links (root)

``--mode cache`` adds ours with the remote-row cache (distdgl's ``cache_mb``, sized by
``--cache-share``: that share of the bytes of the rows each server does not hold; issue 36's
targets against DGL are the checks). ``--mode all`` adds a third system, ours with
``DGLX_MALLOC=system`` (glibc's default allocator
settings, as DGL's processes run), to show how much of the difference the allocator setting
of :mod:`dglx_dist.runtime.allocator` makes.

Prints one JSON object (rows, profile, checks) and markdown tables to stdout; progress goes
to stderr via ``logging``. The exit code is 0 unless a run crashed.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from dglx_dist.bench.datasets import nonnegative_features
from dglx_dist.bench.dgl_distdgl import hyper, partitions, run_dgl, summarize_run
from dglx_dist.bench.dgl_distdgl_worker import PHASES
from dglx_dist.bench.harness import Setup, attempt, launch, parse_records, run_env, run_strategy
from dglx_dist.bench.presets import ScriptPreset, script_parser
from dglx_dist.cli_flags import add_flags, from_args, parse_key_values, tuple_of
from dglx_dist.config import RunConfig
from dglx_dist.data.synthetic import SyntheticConfig
from dglx_dist.report import markdown_table

log = logging.getLogger("bench_train")


PRESETS = {
    "tiny": ScriptPreset("cora", epochs=30, hidden=16, lr=0.01),
    "small": ScriptPreset(SyntheticConfig(num_nodes=200_000, num_edges=4_000_000, feat_dim=128,
                                          num_classes=16), epochs=5, hidden=64, lr=0.003),
}
BASE = RunConfig().updated(model={"name": "sage"})
"""Both systems train GraphSAGE; the preset and the flags give the rest."""
SECTIONS, SKIP = ("model", "optimizer", "loop"), ("model", "layers", "row_normalize",
                                                  "eval_every")
"""The run config's flags this script takes: the model is GraphSAGE, its depth the fanouts',
its row normalisation ``--row-normalize auto|on|off``'s, and it evaluates after the last
epoch."""
COLUMNS = ("system", "epochs", "startup_s", "epoch_time", "epoch_time_first", "steps",
           "test_acc", "peak_mem_mb", "server_peak_mb", "bytes_sent_inter_per_epoch",
           "cache_hit_rate", "run_wall_s")


def run_config(args: argparse.Namespace) -> RunConfig:
    """GraphSAGE with the preset's epochs, width and learning rate under the flags given."""
    return from_args(RunConfig, args, base=PRESETS[args.preset].run(BASE), sections=SECTIONS,
                     skip=SKIP)


def dataset_dir(args: argparse.Namespace, workdir: Path) -> Path:
    """``--data``, else the preset's built-in dataset or synthetic graph (generated, cached)."""
    from dglx_dist.prepare import resolve_dataset

    if args.data:
        return resolve_dataset(args.data)
    return PRESETS[args.preset].dataset(run_config(args).loop.seed, workdir)


def our_setup(args, data: Path, meta: dict[str, Any], row_norm: bool,
              workdir: Path) -> Setup:
    """The common run (ours: 2 virtual servers x 1 trainer; DGL's: 2 machines), GraphSAGE
    evaluated after the last epoch."""
    run = run_config(args)
    run = run.updated(model={"row_normalize": row_norm}, loop={"eval_every": run.loop.epochs})
    network = "virtual" if args.network == "virtual" else f"emulated-{args.network}"
    return Setup(data=data, num_classes=meta["num_classes"], run=run,
                 batch_size=args.batch_size, fanouts=args.fanouts, timeout=args.timeout,
                 workdir=workdir, network=network, eval_fanouts=args.eval_fanouts)


def _our_parts(setup: Setup) -> Path:
    """Our METIS partitions of the setup's dataset (``dglx partition``, cached)."""
    return partitions("ours", setup.data, setup.workdir, run_env(setup))


def run_ours(args, setup: Setup, system: str = "ours (dglx distdgl)",
             extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Our distdgl: ``dglx train`` under torchrun (:func:`run_strategy`), as a table row."""
    summary = lambda recs: summarize_run(  # noqa: E731  (the wall time: run_strategy's)
        system, recs, 0.0, test_acc=recs[-1]["test_acc"],
        peak=max(r["peak_mem_mb"] for r in recs))
    setup = dataclasses.replace(setup, run=setup.run.updated(
        data={"partitions": _our_parts(setup)}))
    options = parse_key_values(args.ours_opt, "--ours-opt") | (extra or {})
    if args.eval_fanouts:
        options["eval_fanouts"] = args.eval_fanouts
    row = run_strategy("distdgl", setup, {"distdgl": options}, summary)
    return {k: v for k, v in row.items() if k not in ("network", "note", "options")}


def run_profile(args, setup: Setup) -> dict[str, Any]:
    """Our trainer's loop instrumented phase by phase (:mod:`benchmarks.ours_profile`, under
    torchrun; its ranks find ``benchmarks`` in the working directory, the repository root)."""
    target = ["-m", "benchmarks.ours_profile", "--partitions", str(_our_parts(setup))] + hyper(
        setup) + (
        ["--cprofile", str(setup.workdir / "ours.pstats")] if args.cprofile else [])
    return parse_records(launch(setup, target))[-1]


def combine_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row per system over repeated runs: the median run's epoch time (a failed run makes
    the row an error); the other columns come from the first run."""
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    row = dict(runs[0])
    if len(runs) > 1:
        for key in ("epoch_time", "startup_s"):
            values = [r[key] for r in runs if r.get(key) is not None]
            if values:
                row[key], row[f"{key}_runs"] = statistics.median(values), values
    return row


def checks(rows: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The ratio checks: PASS / FAIL, or n/a when a side did not run."""
    ours, dgl = rows.get("ours", {"error": "-"}), rows.get("dgl", {"error": "-"})
    ran = "error" not in ours and "error" not in dgl
    cached = rows.get("ours_cached", {"error": "-"})  # --mode cache (a failed run: its row)
    items = (_cache_checks(cached, dgl) if "error" not in cached else ()) + (
             ("ours_epoch_time / dgl_epoch_time", "<= 0.7", lambda v: v <= 0.7,
              lambda: round(ours["epoch_time"] / dgl["epoch_time"], 3)),
             ("ours_startup_s / dgl_startup_s", "<= 0.333", lambda v: v <= 1 / 3,
              lambda: round(ours["startup_s"] / dgl["startup_s"], 3)),
             ("|ours_acc - dgl_acc|", "<= 0.005", lambda v: v <= 0.005,
              lambda: round(abs(ours["test_acc"] - dgl["test_acc"]), 4)),
             ("steps per epoch: ours - dgl", "== 0", lambda v: v == 0,
              lambda: ours["steps"] - dgl["steps"]))
    other = rows.get("ours_system_malloc", {"error": "-"})
    if "error" not in other and "error" not in dgl:  # for information: the allocator's share
        items += (("ours (DGLX_MALLOC=system) / dgl epoch time", "(info)", None,
                   lambda: round(other["epoch_time"] / dgl["epoch_time"], 3)),)
    out = []
    for name, target, passes, value in items:
        v = value() if ran else None
        out.append({"check": name, "value": v, "target": target,
                    "status": "n/a" if v is None else "info" if passes is None else
                    ("PASS" if passes(v) else "FAIL")})
    return out


def _cache_checks(cached: dict[str, Any], dgl: dict[str, Any]) -> tuple:
    """Issue 36's targets for ours with the cache against DGL's DistDGL."""
    bytes_of = lambda row: row["bytes_sent_inter_per_epoch"]  # noqa: E731
    return (("cached: ours / dgl inter-server bytes per epoch", "<= 0.5", lambda v: v <= 0.5,
             lambda: round(bytes_of(cached) / bytes_of(dgl), 3)),
            ("cached: ours_epoch_time / dgl_epoch_time", "<= 0.5", lambda v: v <= 0.5,
             lambda: round(cached["epoch_time"] / dgl["epoch_time"], 3)),
            ("cached: |ours_acc - dgl_acc|", "<= 0.005", lambda v: v <= 0.005,
             lambda: round(abs(cached["test_acc"] - dgl["test_acc"]), 4)))


def cache_mb(share: float, meta: dict[str, Any], parts: int = 2) -> float:
    """The cache budget per server: ``share`` of the bytes of the rows a server does not
    hold (float32 features, ``parts`` even parts)."""
    remote = meta["num_nodes"] * (parts - 1) / parts
    return round(share * remote * meta["feat_dim"] * 4 / 2**20, 2)


def bench(args: argparse.Namespace, workdir: Path) -> tuple[dict[str, Any], bool]:
    """Runs the selected systems one after the other; returns the result and whether all ran."""
    data = dataset_dir(args, workdir)
    meta = json.loads((data / "meta.json").read_text())
    row_norm = (nonnegative_features(data) if args.row_normalize == "auto"
                else args.row_normalize == "on")
    log.info("dataset %s: %d nodes, %d edges, feat %d, %d classes; row-normalise: %s", data,
             meta["num_nodes"], meta["num_edges"], meta["feat_dim"], meta["num_classes"],
             row_norm)
    ours = our_setup(args, data, meta, row_norm, workdir)
    budget = cache_mb(args.cache_share, meta)
    runners = {"ours": lambda: run_ours(args, ours),
               "ours_cached": lambda: run_ours(
                   args, ours, system=f"ours, cache_mb={budget}", extra={"cache_mb": budget}),
               "ours_system_malloc": lambda: run_ours(
                   args, dataclasses.replace(ours, env=(("DGLX_MALLOC", "system"),)),
                   system="ours, DGLX_MALLOC=system"),
               "dgl": lambda: run_dgl(ours, run_env(ours))}
    order = {"both": ["ours", "dgl"], "all": ["ours", "ours_system_malloc", "dgl"],
             "cache": ["ours", "ours_cached", "dgl"]}
    runs: dict[str, list[dict[str, Any]]] = {}
    for rep in range(args.repeat):  # alternating, so slow spells of the machine hit both
        for name in order.get(args.mode, [args.mode]):
            row = {"system": name} | attempt(name, runners[name])  # an error: in the output
            log.info("%s (run %d): %s", name, rep + 1, {k: row.get(k) for k in COLUMNS})
            runs.setdefault(name, []).append(row)
    rows = {name: combine_runs(rs) for name, rs in runs.items()}
    result = {"dataset": {"path": str(data), **{k: meta[k] for k in (
        "num_nodes", "num_edges", "feat_dim", "num_classes")}}, "parts": 2, "trainers": 2,
        "hyper": {"epochs": ours.run.loop.epochs, "hidden": ours.run.model.hidden,
                  "lr": ours.run.optimizer.lr, "dropout": ours.run.model.dropout,
                  "weight_decay": ours.run.optimizer.weight_decay,
                  "batch_size": args.batch_size, "fanouts": ",".join(map(str, args.fanouts)),
                  "eval_fanouts": ",".join(map(str, args.eval_fanouts)),
                  "seed": ours.run.loop.seed,
                  "row_normalize": row_norm},
        "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
        "rows": list(rows.values()), "checks": checks(rows)}
    if args.profile and "ours" in rows and "error" not in rows["ours"]:
        prof = run_profile(args, ours)
        result["profile"] = profile_rows(prof, rows.get("dgl", {}))
        result["cprofile_top"] = prof.get("cprofile_top")
    return result, all("error" not in r for r in rows.values())


def profile_rows(ours: dict[str, Any], dgl: dict[str, Any]) -> list[dict[str, Any]]:
    """Per epoch (max over trainers, mean over epochs after the first): phase seconds, rows."""
    ours_ph, dgl_ph = ({**r.get("phases", {}), "epoch": r.get("epoch_time")} for r in (ours, dgl))
    dgl_ph.setdefault("allreduce", "(inside backward)")
    return [{"phase": k, "ours": ours_ph.get(k), "dgl": dgl_ph.get(k)}
            for k in PHASES + ("epoch", "input_rows")]


def report(result: dict[str, Any]) -> str:
    """The markdown tables of a result."""
    text = markdown_table(result["rows"], COLUMNS) + "\n\n" + markdown_table(
        result["checks"], ("check", "value", "target", "status"))
    errors = [f"- {r['system']}: {r['error']}" for r in result["rows"] if "error" in r]
    if errors:
        text += "\n\nfailed:\n" + "\n".join(errors)
    if result.get("profile"):
        text += ("\n\nseconds per epoch by phase (max over trainers; ours: instrumented run); "
                 "input_rows: feature rows pulled per epoch:\n\n")
        text += markdown_table(result["profile"])
    return text


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; preset values fill whatever was not given."""
    p = script_parser(__doc__, PRESETS, "small",
                      "tiny: Cora; small: synthetic 200k nodes / 4M edges / feat 128")
    p.add_argument("--data", help="a dataset directory or built-in name (overrides the preset's)")
    p.add_argument("--mode", choices=("ours", "dgl", "both", "all", "cache"), default="both",
                   help="all: also ours with glibc's default allocator (DGLX_MALLOC=system); "
                        "cache: also ours with the remote-row cache (--cache-share)")
    p.add_argument("--network", choices=("virtual", "1g", "10g"), default="virtual",
                   help="virtual: both on loopback; 1g / 10g: both on the emulated cluster's "
                        "links (dglx emulate; needs root)")
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per system, alternating; epoch_time is the median run's")
    p.add_argument("--ours-opt", action="append", default=[], metavar="KEY=VALUE",
                   help="extra distdgl option for our run (repeatable), e.g. fanouts=5,10")
    # the run config (dglx train's flags) over the preset's epochs, hidden and lr
    add_flags(p, RunConfig, sections=SECTIONS, skip=SKIP, base=BASE, overlay=True, changes={
        k: {"help": f"{what} (default: the preset's)"} for k, what in (
            ("epochs", "epochs"), ("hidden", "hidden width"), ("lr", "Adam's learning rate"))})
    p.add_argument("--cache-share", type=float, default=0.1,
                   help="--mode cache: the cache's budget as a share of the bytes of the rows "
                        "a server does not hold")
    p.add_argument("--batch-size", type=int, default=1000, help="seeds per trainer per step")
    p.add_argument("--fanouts", type=tuple_of(int), default=(10, 25),
                   help="per layer, input layer first (default: 10,25)")
    p.add_argument("--eval-fanouts", type=tuple_of(int), default=(),
                   help="the test evaluation's fanouts for both systems (default: full "
                        "neighbourhoods; sampled ones at ogbn-products' size, where a full "
                        "2-hop neighbourhood per batch takes most of the graph)")
    p.add_argument("--row-normalize", choices=("auto", "on", "off"), default="auto",
                   help="divide input rows by their sums (auto: if no feature is negative)")
    p.add_argument("--workdir", default="bench_out/train", help="datasets, partitions, logs")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per training run")
    p.add_argument("--profile", action="store_true", help="also time our trainer's phases")
    p.add_argument("--cprofile", action="store_true",
                   help="with --profile: cProfile rank 0 too (inflates those phase times)")
    p.add_argument("--out", help="also write the JSON result to this file")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    args = p.parse_args(argv)
    if run_config(args).loop.epochs < 2:
        p.error("--epochs must be >= 2 (the first epoch is warm-up and not averaged)")
    return args


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; returns the exit code."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    result, ok = bench(args, workdir)
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text, report(result), sep="\n\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
