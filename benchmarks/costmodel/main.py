"""``benchmarks/cluster_model.py``: ``validate`` measures, calibrates and checks the cluster model
on this machine; ``predict`` uses its calibration for a cluster and a graph beyond it;
``memory`` fits each strategy's memory per rank to graph size (docs/cluster_model.md)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from benchmarks.costmodel import LAWS
from benchmarks.costmodel.memory import MB, fit_memory, parse_sizes
from benchmarks.costmodel.predict import Calibration, predict
from benchmarks.costmodel.typed_memory import add_typed_flags, typed_memory
from benchmarks.costmodel.validate import (RunShape, accuracy, compare, measured_rows,
                                           parse_shape)
from benchmarks.sweeps.common import emit_json, emit_text
from dglx_dist.bench.report import Panel, Series, draw
from dglx_dist.cli_flags import number
from dglx_dist.errors import InvalidValueError
from dglx_dist.report import markdown_table
from dglx_dist.strategies.cost.shapes import Cluster, GraphShape, Units, Workload

__all__ = ["main"]

VALIDATION_GRAPH = {"num_nodes": 100_000, "num_edges": 1_500_000, "feat_dim": 128,
                    "num_classes": 16}
"""``validate``'s default graph: large enough that compute is not all per-step overhead, each
run under a minute here."""


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive integers separated by "
                                         f"commas")
    return values


def _parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("validate", help="measure here, calibrate, predict the measured runs")
    v.add_argument("--data", type=Path, help="a dataset directory (default: a synthetic "
                   "100k-node, 1.5M-edge graph, generated in --workdir)")
    v.add_argument("--shapes", default="2x1,2x2,4x1,4x2,2x1@10g",
                   type=lambda t: [parse_shape(s) for s in t.split(",")],
                   help="cluster shapes SERVERSxRANKS[@LINK] to measure (links 1g, 10g)")
    v.add_argument("--calibrate-on", type=parse_shape, default=parse_shape("2x2"),
                   help="the shape every strategy is calibrated on (one with both inter- and "
                        "intra-server traffic)")
    v.add_argument("--systems", default=",".join(LAWS))
    v.add_argument("--epochs", type=number(int, 2), default=4)
    v.add_argument("--batch-size", type=number(int, 1), default=500)
    v.add_argument("--hidden", type=number(int, 1), default=64)
    v.add_argument("--fanouts", type=_ints, default=(10, 25))
    v.add_argument("--workdir", type=Path, default=Path("cluster-model"))
    v.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    q = sub.add_parser("predict", help="epoch time and bytes on a cluster beyond this machine")
    q.add_argument("--calibration", type=Path, default=Path("cluster-model/calibration.json"),
                   help="validate's output")
    q.add_argument("--graph", default="papers", help="papers or products (a synthetic preset's "
                   "shape, with the calibration graph's degrees and cuts), mag (ogbn-mag's "
                   "node types: paper features, learned rows --hidden wide for the others), "
                   "or a dataset dir")
    q.add_argument("--servers", type=_ints, default=(1, 2, 4, 8, 16, 32, 64))
    q.add_argument("--ranks-per-server", type=number(int, 1), default=1)
    q.add_argument("--link-gbit", type=number(float, 0, low_open=True), default=10.0)
    q.add_argument("--intra-gbit", type=number(float, 0, low_open=True),
                   help="bandwidth between ranks of a server (default: loopback as measured "
                        "here; PCIe 4.0 is about 200)")
    q.add_argument("--compute-speedup", type=number(float, 0, low_open=True), default=1.0,
                   help="a rank's speed at the model's math over one core here (its threads, "
                        "or a GPU)")
    q.add_argument("--sample-speedup", type=number(float, 0, low_open=True), default=1.0,
                   help="the same for sampling and gathering rows")
    q.add_argument("--num-edges", type=number(int, 1), help="change the graph's edge count "
                   "(e.g. 3231371744: papers100M with both directions, as DistDGL counts)")
    q.add_argument("--feat-dim", type=number(int, 1), help="change the graph's feature width")
    q.add_argument("--model", choices=("gcn", "sage"), help="default: the calibration's")
    q.add_argument("--hidden", type=number(int, 1), help="default: the calibration's")
    q.add_argument("--fanouts", type=_ints, help="input layer first (default: the "
                   "calibration's)")
    q.add_argument("--batch-size", type=number(int, 1), default=1000)
    m = _memory_parser(sub)
    for sp in (v, q, m):
        sp.add_argument("--out", type=Path, help="also write the JSON here")
        sp.add_argument("--plot", type=Path, help="write a PNG here")
    return p


def _memory_parser(sub) -> argparse.ArgumentParser:
    m = sub.add_parser("memory", help="each strategy's peak memory per rank at several graph "
                                      "sizes, fitted per node and per edge")
    m.add_argument("--sizes", type=parse_sizes,
                   default=parse_sizes("300000:9000000,600000:6000000,1200000:30000000"),
                   help="NODES:EDGES of the synthetic graphs (F=128, 16 classes), at least 3")
    m.add_argument("--servers", type=number(int, 1), default=2)
    m.add_argument("--ranks-per-server", type=number(int, 1), default=1)
    m.add_argument("--systems", default=",".join(LAWS))
    m.add_argument("--epochs", type=number(int, 2), default=2)
    m.add_argument("--batch-size", type=number(int, 1), default=1000)
    m.add_argument("--hidden", type=number(int, 1), default=64)
    m.add_argument("--fanouts", type=_ints, default=(10, 25))
    m.add_argument("--degree", type=number(float, 0, low_open=True), default=61_859_140 / 2_449_029,
                   help="edges per node of the graph asked about (default: ogbn-products')")
    m.add_argument("--workdir", type=Path, default=Path("cluster-model"))
    m.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    add_typed_flags(m)
    return m


def _validation_data(args: argparse.Namespace) -> Path:
    from dglx_dist.bench.datasets import synthetic_dataset
    from dglx_dist.data.synthetic import SyntheticConfig

    if args.data:
        return args.data
    return synthetic_dataset(SyntheticConfig(**VALIDATION_GRAPH), args.workdir)


def validate(args: argparse.Namespace) -> dict[str, Any]:
    """Measures the units, the graph and every shape's runs; calibrates on one; compares."""
    from benchmarks.costmodel.measure import measure_graph, measure_units

    if args.calibrate_on not in args.shapes:
        raise InvalidValueError(f"--calibrate-on {args.calibrate_on.name}: not among --shapes")
    args.workdir.mkdir(parents=True, exist_ok=True)
    data = _validation_data(args)
    work = Workload("gcn", args.hidden, args.fanouts, args.batch_size)
    systems = _systems(args.systems)
    runs = {shape: measured_rows(shape, data, systems, work, args.epochs,
                                 args.workdir / shape.name, args.timeout)
            for shape in args.shapes}
    units, graph = measure_units(), measure_graph(data)
    rows, calibs = compare(graph, work, units, runs, args.calibrate_on)
    result = {"graph": dataclasses.asdict(graph), "workload": dataclasses.asdict(work),
              "units": units.public(), "calibrated_on": args.calibrate_on.name,
              "calibrations": {k: c.public() for k, c in calibs.items()},
              "cores": os.cpu_count(), "accuracy": accuracy(rows), "rows": rows}
    (args.workdir / "calibration.json").write_text(json.dumps(result, indent=2))
    return result


def memory(args: argparse.Namespace) -> dict[str, Any]:
    """Every strategy at every ``--sizes`` graph (``dglx bench`` on 10 Gbit/s emulated links:
    memory does not depend on the link); per strategy, the fit of its peak per rank and the
    largest graph of ``--degree`` that all its ranks fit into this machine's memory
    (``--typed``: :func:`~benchmarks.costmodel.typed_memory.typed_memory` instead)."""
    if args.typed:
        return typed_memory(args)
    from dglx_dist.bench.datasets import synthetic_dataset
    from dglx_dist.data.synthetic import SyntheticConfig

    shape = RunShape(args.servers, args.ranks_per_server, "10g")
    work = Workload("gcn", args.hidden, args.fanouts, args.batch_size)
    systems = _systems(args.systems)
    runs = {}
    for nodes, edges in args.sizes:
        data = synthetic_dataset(SyntheticConfig(**{**VALIDATION_GRAPH, "num_nodes": nodes,
                                                    "num_edges": edges}), args.workdir)
        # measured, not refused: the check's estimate comes from these runs' fits
        runs[nodes, edges] = measured_rows(shape, data, systems, work, args.epochs,
                                           args.workdir / f"memory-{nodes}-{edges}",
                                           args.timeout, ("--memory-limit", str(1 << 50)))
    budget = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    world, rows = shape.cluster(None).world, []
    for name in systems:
        peaks = {size: r["peak_mem_mb"] for size, got in runs.items()
                 if "error" not in (r := got.get(name, {"error": "not run"}))}
        row = {"strategy": name, **{f"peak_mb_{n // 1000}k": peaks.get((n, e))
                                    for n, e in args.sizes}}
        if len(peaks) < 3:
            rows.append(row | {"error": f"ran at {len(peaks)} of the sizes; a fit needs 3"})
            continue
        fit = fit_memory([(n / world, e / world, mb * MB) for (n, e), mb in peaks.items()])
        rows.append(row | fit.public() | {
            "largest_nodes": fit.largest_nodes(args.degree, budget, world)})
    return {"cluster": shape.name, "world": world, "sizes": args.sizes,
            "degree": round(args.degree, 2), "machine_gb": round(budget / 2**30, 1),
            "rows": rows}


def _systems(text: str) -> list[str]:
    systems = [s for s in text.split(",") if s]
    unknown = sorted(set(systems) - set(LAWS))
    if unknown:
        raise InvalidValueError(f"--systems: no law for {', '.join(unknown)}; choose from "
                                f"{', '.join(LAWS)}")
    return systems


def _mag_shape(base: GraphShape, embed_dim: int) -> GraphShape:
    """ogbn-mag's sizes by type (:mod:`dglx_dist.data.mag`, reverse relations included), with
    the calibration graph's degrees and cuts: papers train, the other types learn rows."""
    from dglx_dist.data.mag import OGBN_MAG_CLASSES, OGBN_MAG_SPLIT, mag_sizes

    sizes = mag_sizes(1.0)
    nodes = sum(sizes.nodes.values())
    types = tuple((n / nodes, 128 if t == "paper" else 0) for t, n in sorted(sizes.nodes.items()))
    return dataclasses.replace(base, nodes=nodes, edges=sum(sizes.edges.values()),
                               feat_dim=128, num_classes=OGBN_MAG_CLASSES,
                               train_frac=OGBN_MAG_SPLIT["train"] / nodes, node_types=types,
                               embed_dim=embed_dim)


def _graph(args: argparse.Namespace, base: GraphShape, base_hidden: int) -> GraphShape:
    from dglx_dist.data.synthetic import SYNTHETIC_PRESETS

    if args.graph == "mag":
        graph = _mag_shape(base, args.hidden or base_hidden)
    elif args.graph in SYNTHETIC_PRESETS:
        c = SYNTHETIC_PRESETS[args.graph]
        graph = dataclasses.replace(base, nodes=c.num_nodes, edges=c.num_edges,
                                    feat_dim=c.feat_dim, num_classes=c.num_classes,
                                    train_frac=c.train_frac)
    elif Path(args.graph).is_dir():
        from benchmarks.costmodel.measure import measure_graph

        graph = measure_graph(args.graph)
    else:
        raise InvalidValueError(f"--graph {args.graph!r}: expected papers, products, mag or "
                                f"a dataset directory")
    changes = {"edges": args.num_edges, "feat_dim": args.feat_dim}
    return dataclasses.replace(graph, **{k: v for k, v in changes.items() if v is not None})


def predict_cluster(args: argparse.Namespace) -> dict[str, Any]:
    """Every calibrated strategy at every ``--servers`` count on the chosen graph."""
    if not args.calibration.is_file():
        raise InvalidValueError(f"--calibration {args.calibration}: no such file (run "
                                f"benchmarks/cluster_model.py validate first)")
    cal = json.loads(args.calibration.read_text())
    base = GraphShape(**{**cal["graph"], "rel_degrees": tuple(cal["graph"]["rel_degrees"]),
                         "edge_cuts": tuple(cal["graph"]["edge_cuts"])})
    graph = _graph(args, base, cal["workload"]["hidden"])
    changes = {k: getattr(args, k) for k in ("model", "hidden", "fanouts", "batch_size")}
    work = Workload(**{**cal["workload"], "fanouts": tuple(cal["workload"]["fanouts"]),
                       **{k: v for k, v in changes.items() if v is not None}})
    units = Units(**cal["units"])
    if args.intra_gbit:
        units = dataclasses.replace(units, intra_s_per_byte=8 / (args.intra_gbit * 1e9))
    rows = []
    for name, c in cal["calibrations"].items():
        for servers in args.servers:
            cluster = Cluster(servers, args.ranks_per_server, args.link_gbit,
                              compute_speedup=args.compute_speedup,
                              sample_speedup=args.sample_speedup)
            p = predict(name, graph, work, cluster, units, Calibration(**c))
            rows.append({"strategy": name, "servers": servers, "world": cluster.world,
                         "epoch_s": round(p["epoch_time"], 2), "steps": p["steps"],
                         "inter_gb": round(p["bytes_inter"] / 1e9, 2),
                         **{f"{k}_s": round(v, 2) for k, v in p["phases"].items()}})
    return {"graph": graph.public(), "workload": dataclasses.asdict(work),
            "link_gbit": args.link_gbit, "ranks_per_server": args.ranks_per_server,
            "compute_speedup": args.compute_speedup, "sample_speedup": args.sample_speedup,
            "rows": rows}


def _plot_validation(result: dict[str, Any], path: Path) -> None:
    """Per strategy, bars of measured and predicted epoch time, then of inter-server bytes,
    at every shape."""
    ok = [r for r in result["rows"] if "error" not in r]
    names = list(dict.fromkeys(r["strategy"] for r in ok))
    panels = []
    for key, what, unit in (("epoch", "epoch time", "s"), ("inter_mb", "inter-server", "MB")):
        for name in names:
            mine = [r for r in ok if r["strategy"] == name]
            x = tuple(r["shape"] for r in mine)
            panels.append(Panel(f"{name}: {what}", tuple(
                Series(kind, x, tuple(r[f"{key}_{kind}"] for r in mine))
                for kind in ("measured", "predicted")), ylabel=unit))
    draw(panels, path, f"cluster model vs measured (calibrated on {result['calibrated_on']})",
         columns=len(names))


def _plot_prediction(result: dict[str, Any], path: Path) -> None:
    names = sorted({r["strategy"] for r in result["rows"]})
    series = lambda key: tuple(Series(n, tuple(r["servers"] for r in result["rows"]  # noqa
                                               if r["strategy"] == n),
                                      tuple(r[key] for r in result["rows"]
                                            if r["strategy"] == n)) for n in names)
    panels = [Panel("epoch time", series("epoch_s"), kind="lines", xlabel="servers",
                    ylabel="s", log2x=True, logy=True),
              Panel("inter-server bytes per epoch", series("inter_gb"), kind="lines",
                    xlabel="servers", ylabel="GB", log2x=True)]
    g = result["graph"]
    draw(panels, path, f"predicted: {g['nodes']:,} nodes, {g['edges']:,} edges, "
         f"{result['link_gbit']} Gbit/s links", columns=2)


VALIDATION_COLUMNS = ("strategy", "shape", "epoch_measured", "epoch_predicted",
                      "epoch_error_pct", "inter_mb_measured", "inter_mb_predicted",
                      "inter_error_pct", "intra_mb_measured", "intra_mb_predicted", "error")
PREDICTION_COLUMNS = ("strategy", "servers", "world", "epoch_s", "steps", "inter_gb",
                      "sample_s", "gather_s", "compute_s", "inter_s", "intra_s", "overhead_s")


def _plot_memory(result: dict[str, Any], path: Path) -> None:
    if "points" in result:  # --typed: its table is the result
        raise InvalidValueError("--plot: memory --typed draws no figure; leave --plot out")
    sizes = result["sizes"]
    series = tuple(Series(r["strategy"], tuple(n for n, _ in sizes),
                          tuple(r[f"peak_mb_{n // 1000}k"] for n, _ in sizes))
                   for r in result["rows"])
    edges = ", ".join(f"{e / 1e6:g}M" for _, e in sizes)
    draw([Panel("peak memory per rank", series, kind="lines", xlabel=f"nodes (edges: {edges})",
                ylabel="MB")], path, f"{result['cluster']}, {result['world']} ranks", columns=1)


COMMANDS = {"validate": (validate, VALIDATION_COLUMNS, _plot_validation),
            "predict": (predict_cluster, PREDICTION_COLUMNS, _plot_prediction),
            "memory": (memory, None, _plot_memory)}
"""Each subcommand: what it runs, its table's columns (None: every key), its figure."""


def main(argv: list[str] | None, description: str) -> int:
    args = _parser(description).parse_args(argv)
    run, columns, plot = COMMANDS[args.command]
    result = run(args)
    emit_json(result, args.out)
    emit_text(markdown_table(result["rows"], columns))
    for extra in ("accuracy", "checks"):
        if result.get(extra):
            emit_text(markdown_table(result[extra]))
    if args.plot:
        plot(result, args.plot)
    return 0
