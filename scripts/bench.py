"""Benchmark: every system on the same dataset, model and hyper-parameters, in one command.

    python scripts/bench.py --preset tiny                   # 20k-node synthetic graph, minutes
    python scripts/bench.py --preset small --out bench-out  # 200k nodes / 2M edges, ~6 min
    python scripts/bench.py --preset tiny --systems dgl,distdgl --network virtual
    python scripts/bench.py --preset tiny --sweeps          # + P3/GraNNDis/Dorylus sweeps
    python scripts/bench.py --preset large --data DIR       # big machine or real graph

Systems (``--systems``, default all): ``dgl`` (plain DGL, one process, the same model class
and seed, ``dgl.dataloading.NeighborSampler`` with the same fanouts, the same Adam, its batch
the distributed runs' global batch), ``dgl-distdgl`` (DGL 2.1's own DistDGL: 2 machines x 1
trainer with its server processes, on loopback), then every registered strategy
(``dglx_dist.strategies.STRATEGIES``: distdgl, dorylus, fullgraph, granndis, p3) as ``dglx
train`` under torchrun, ``servers x ranks_per_server`` processes.

Common setup: a 2-layer GCN (``dglx_dist.models.GCN``, GraphConv), which every strategy runs
(dorylus runs GraphConv, SAGEConv (mean) and GATConv; a strategy whose ``conv_types`` do not
cover ``--model``'s convs gets a row saying it was not run). Sampled systems (dgl, dgl-distdgl, distdgl, p3) use the fanouts;
full-graph ones (fullgraph, granndis with R=1, dorylus) use full neighbourhoods and take one
step per epoch, which their row's note says.

Network (``--network``): ``auto`` runs our strategies on an emulated cluster
(``dglx_dist.cluster.emulate``: a network namespace per server, tc-shaped 1 Gbit/s links)
where this machine can (root, ip, tc), else on virtual servers (``DGLX_VIRTUAL_SERVERS``:
bytes counted, links not slowed); ``virtual``, ``1g``, ``10g`` choose. DGL's DistDGL always
runs on loopback.

Output in ``--out`` (default ``bench-out/``): ``results.jsonl`` (one JSON object per run),
``results.md`` (the table, also printed), ``bench.png`` (epoch time, time to accuracy, bytes,
peak memory, accuracy) and, with ``--sweeps``, ``sweep_*.png`` (``--replot`` redraws the table
and bench.png from an --out directory without running anything). Columns:

* ``system``, ``strategy``, ``network``: what ran where (``emulated-1g``, ``virtual``,
  ``loopback (not shaped)`` for DGL's DistDGL, ``none (1 process)`` for single-process DGL);
* ``epoch_time``: seconds per epoch, mean without the first (max over ranks);
* ``time_to_accuracy``: training seconds (summed epoch times from the first, evaluation
  excluded) until the validation accuracy first reaches ``target_acc`` = ``--target`` (0.95)
  x the single-process DGL's final validation accuracy ("not reached" within the epochs);
* ``bytes_inter`` / ``bytes_intra``: bytes sent between / inside servers per epoch, summed
  over ranks (our comm layer's counters; not counted for DGL's DistDGL, 0 for one process);
* ``peak_mem_mb``: peak resident memory of the largest rank (DGL's DistDGL: trainer; the
  server processes' peak is in the note);
* ``val_acc`` / ``test_acc``: final accuracies (full neighbourhoods);
* ``steps``: steps per epoch; ``note``: batching, substitutions, why a system did not run;
* in results.jsonl also ``epoch_times``, ``val_acc_per_epoch``, ``epoch_time_first``,
  ``run_wall_s``, ``options`` and ``config`` (the common setup).

Exit code 0 when every selected system ran, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench_* helpers beside us

from _bench_report import markdown, plot, write_jsonl  # noqa: E402
from _bench_systems import Setup, add_time_to_accuracy, run_system, systems  # noqa: E402

log = logging.getLogger("bench")
PRESETS: dict[str, dict[str, Any]] = {
    # a few minutes on 2 cores: 7 runs of ~20-40 s, most of it start-up and partitioning
    "tiny": {"synthetic": {"num_nodes": 20_000, "num_edges": 300_000, "feat_dim": 128,
                           "num_classes": 16}, "epochs": 6, "hidden": 64, "lr": 0.01,
             "batch_size": 250, "servers": 2, "ranks_per_server": 1},
    # ~6 minutes on 2 cores (5.5 min measured)
    "small": {"synthetic": {"num_nodes": 200_000, "num_edges": 2_000_000, "feat_dim": 128,
                            "num_classes": 16}, "epochs": 10, "hidden": 64, "lr": 0.01,
              "batch_size": 1000, "servers": 2, "ranks_per_server": 2},
    # for a big machine (ogbn-products' shape: 2.45M nodes, 124M directed edges, 100
    # features, 47 classes); not run on the development machines
    "large": {"synthetic": {"num_nodes": 2_449_029, "num_edges": 123_718_280, "feat_dim": 100,
                            "num_classes": 47}, "epochs": 5, "hidden": 256, "lr": 0.003,
              "batch_size": 1000, "servers": 4, "ranks_per_server": 4},
}
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


def dataset(args: argparse.Namespace, workdir: Path) -> Path:
    """``--data`` (a directory or built-in name), else the preset's synthetic graph (cached)."""
    from bench_train import synthetic_dataset

    from dglx_dist.data.synthetic import SyntheticConfig
    from dglx_dist.prepare import resolve_dataset

    if args.data:
        return resolve_dataset(args.data)
    return synthetic_dataset(SyntheticConfig(**PRESETS[args.preset]["synthetic"],
                                             seed=args.seed), workdir)


def make_setup(args: argparse.Namespace, data: Path, network: str) -> Setup:
    """The common setup from the preset and the options given."""
    from bench_train import nonnegative_features

    meta = json.loads((data / "meta.json").read_text())
    row_norm = (nonnegative_features(data) if args.row_normalize == "auto"
                else args.row_normalize == "on")
    return Setup(data=data.resolve(), num_classes=meta["num_classes"], model=args.model,
                 hidden=args.hidden, lr=args.lr, dropout=args.dropout,
                 weight_decay=args.weight_decay, epochs=args.epochs, batch_size=args.batch_size,
                 fanouts=args.fanouts, seed=args.seed, row_normalize=row_norm,
                 servers=args.servers, ranks_per_server=args.ranks_per_server, network=network,
                 timeout=args.timeout, workdir=args.out / "work")


def extra_options(items: list[str]) -> dict[str, list[str]]:
    """``--strategy-opt NAME:KEY=VALUE`` values by strategy."""
    out: dict[str, list[str]] = {}
    for item in items:
        name, sep, opt = item.partition(":")
        if not sep or "=" not in opt:
            raise SystemExit(f"--strategy-opt {item!r}: expected NAME:KEY=VALUE, e.g. "
                             f"p3:pipeline=true")
        out.setdefault(name, []).append(opt)
    return out


def run_all(args: argparse.Namespace, setup: Setup) -> list[dict[str, Any]]:
    """Runs the selected systems one after the other (tqdm over the runs)."""
    from tqdm import tqdm

    table = systems(extra_options(args.strategy_opt))
    chosen = args.systems or list(table)
    unknown = [s for s in chosen if s not in table]
    if unknown:
        raise SystemExit(f"--systems: unknown {unknown}; choose from {', '.join(table)}")
    rows = []
    bar = tqdm(chosen, desc="bench runs", unit="run")
    for name in bar:
        bar.set_postfix_str(name)
        rows.append(run_system(name, table[name], setup))
        row = rows[-1]
        log.info("%s: %s", name, row.get("error") or {k: row.get(k) for k in (
            "epoch_time", "bytes_inter", "peak_mem_mb", "val_acc", "test_acc", "run_wall_s")})
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Options; the preset fills whatever was not given."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    p.add_argument("--data", help="a dataset directory or built-in name (instead of the "
                                  "preset's synthetic graph)")
    p.add_argument("--systems", type=lambda s: [x for x in s.split(",") if x],
                   help="comma-separated (default: dgl, dgl-distdgl and every strategy)")
    p.add_argument("--network", choices=("auto", "virtual", "1g", "10g"), default="auto")
    p.add_argument("--out", type=Path, default=Path("bench-out"))
    p.add_argument("--sweeps", nargs="?", const="p3,granndis,dorylus", default="",
                   help="also run the strategy sweeps (default all: p3,granndis,dorylus)")
    p.add_argument("--strategy-opt", action="append", default=[], metavar="NAME:KEY=VALUE",
                   help="an option for one strategy, repeatable (e.g. granndis:co_batches=4)")
    p.add_argument("--model", default="gcn", help="dglx_dist.models name (default gcn)")
    p.add_argument("--epochs", type=int)
    p.add_argument("--hidden", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--batch-size", type=int, help="seeds per trainer per step")
    p.add_argument("--servers", type=int)
    p.add_argument("--ranks-per-server", type=int)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--fanouts", default="10,25", help="per layer, input layer first")
    p.add_argument("--row-normalize", choices=("auto", "on", "off"), default="auto",
                   help="divide input rows by their sums (auto: if no feature is negative)")
    p.add_argument("--target", type=float, default=0.95,
                   help="time to accuracy: val_acc >= target x single-process DGL's final")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    p.add_argument("--no-plot", action="store_true", help="skip the PNGs (no matplotlib)")
    p.add_argument("--replot", action="store_true",
                   help="run nothing: rewrite results.md and bench.png from --out's results")
    args = p.parse_args(argv)
    for key, value in PRESETS[args.preset].items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    if args.epochs < 2:
        p.error("--epochs must be >= 2 (the first epoch is warm-up and not averaged)")
    return args


def replot(out: Path) -> int:
    """Rewrites results.md and bench.png from ``out``'s results.jsonl and meta.json."""
    rows = [json.loads(ln) for ln in (out / "results.jsonl").read_text().splitlines() if ln]
    meta = json.loads((out / "meta.json").read_text())
    text = markdown(rows, meta)
    (out / "results.md").write_text(text)
    plot(rows, out / "bench.png", meta["command"])
    print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; returns the exit code."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.replot:
        return replot(args.out)
    t0 = time.perf_counter()
    (args.out / "work").mkdir(parents=True, exist_ok=True)
    data = dataset(args, args.out / "work")
    setup = make_setup(args, data, choose_network(args.network))
    log.info("setup: %s", setup.public())
    rows = run_all(args, setup)
    target = add_time_to_accuracy(rows, args.target)
    if args.sweeps:
        from _bench_sweeps import run_sweeps

        rows += run_sweeps(args.sweeps.split(","), args.preset, args.out / "work", args.out)
    meta = {"command": "python scripts/bench.py " + " ".join(sys.argv[1:] if argv is None
                                                               else argv),
            "dataset": str(data), "setup": {**setup.public(), "layers": setup.layers},
            "target_fraction": args.target, "target_acc": target, "cpus": os.cpu_count(),
            "load_avg_1m": round(os.getloadavg()[0], 2),
            "wall_s": round(time.perf_counter() - t0, 1)}
    write_jsonl(rows, args.out / "results.jsonl")
    (args.out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    text = markdown(rows, meta)
    (args.out / "results.md").write_text(text)
    if not args.no_plot:
        plot(rows, args.out / "bench.png", meta["command"])
    print(text)
    log.info("done in %.0f s; results in %s", meta["wall_s"], args.out)
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
