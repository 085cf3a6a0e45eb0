"""Benchmark: our ``hash`` and ``metis`` partitioners against DGL's ``partition_graph``.

Every method does the same work (read the dataset directory, partition, write a partition
directory) in its own fresh child process, so the peak memory (VmHWM) is that method's
alone. A child that only imports torch, dgl and dglx_dist gives the import baseline. Edge cut
and imbalance are computed for every method by the same code from its node -> part assignment
(ours: read back from the written parts; DGL: its ``node_map`` ranges + ``orig_nids``).

Usage::

    python scripts/bench_partition.py --preset small
    python scripts/bench_partition.py --preset full --workdir /tmp/bench --out results.json
    python scripts/bench_partition.py --preset products --parts 2 --methods metis,dgl
    python scripts/bench_partition.py --data path/to/dataset --parts 8 --methods metis,dgl
    python scripts/bench_partition.py --preset small --profile   # + phase timing of our metis

Prints one JSON object (rows, ratios, target checks) and a markdown table to stdout; progress
goes to stderr via ``logging``. The exit code is 0 unless something crashed.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pyarrow.parquet as pq

from dglx_dist.bench.presets import script_parser
from dglx_dist.data import to_dgl
from dglx_dist.data.format import read_dataset
from dglx_dist.data.synthetic import SYNTHETIC_PRESETS, SyntheticConfig, write_synthetic
from dglx_dist.memory import peak_rss_bytes
from dglx_dist.partition import PARTITIONERS, partition_dataset
from dglx_dist.report import markdown_table

log = logging.getLogger("bench_partition")

PRESETS = {"small": SyntheticConfig(num_nodes=100_000, num_edges=2_000_000, feat_dim=64),
           "full": SyntheticConfig(num_nodes=1_000_000, num_edges=20_000_000, feat_dim=128),
           "products": SYNTHETIC_PRESETS["products"]}
METHODS = ("hash", "metis", "dgl")
MASKS = ("train", "val", "test")
# (name, numerator method, denominator method, field, comparison, target)
TARGETS = (("metis_time/dgl_time", "metis", "dgl", "seconds", "<=", 1.0),
           ("metis_mem/dgl_mem", "metis", "dgl", "peak_minus_import_mb", "<=", 0.7),
           ("metis_cut/dgl_cut", "metis", "dgl", "edge_cut", "<=", 1.05),
           ("dgl_metis/hash_assign", "dgl", "hash", "assign_seconds", ">=", 20.0),
           ("dgl_time/hash_time (end to end)", "dgl", "hash", "seconds", ">=", None))
COLUMNS = ("method", "parts", "seconds", "seconds_median", "assign_seconds", "peak_mb",
           "peak_minus_import_mb",
           "edge_cut", "cut_frac", "imb_nodes", "imb_edges", "imb_train", "imb_val", "imb_test")


def _peak_mb() -> float:
    """This process's peak resident memory in MiB (``VmHWM``: a fresh child's own, where an
    exec'd child's ``ru_maxrss`` would start at its parent's high-water mark)."""
    return peak_rss_bytes() / 2**20


def quality(src: np.ndarray, dst: np.ndarray, owner: np.ndarray, masks: dict[str, np.ndarray],
            num_parts: int) -> dict[str, Any]:
    """Edge cut and max/mean imbalance of an assignment (``owner`` indexed by original id).

    Args:
        src, dst: original source and destination ids of the directed edges.
        owner: the part of every node.
        masks: boolean train/val/test masks.
        num_parts: number of parts.

    Returns:
        ``edge_cut`` (edges whose endpoints have different owners), ``cut_frac`` and
        ``imb_nodes``, ``imb_edges`` (in-edges counted at the destination's owner),
        ``imb_train``, ``imb_val``, ``imb_test``.
    """
    dst_owner = owner[dst]
    cut = int(np.count_nonzero(owner[src] != dst_owner))
    loads = {"nodes": np.bincount(owner, minlength=num_parts),
             "edges": np.bincount(dst_owner, minlength=num_parts)}
    for m in MASKS:
        loads[m] = np.bincount(owner[masks[m]], minlength=num_parts)
    out: dict[str, Any] = {"edge_cut": cut, "cut_frac": round(cut / max(src.size, 1), 4)}
    for name, load in loads.items():
        mean = float(load.mean())
        out[f"imb_{name}"] = round(float(load.max()) / mean, 4) if mean > 0 else 1.0
    return out


def _read_graph_arrays(data: Path) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Edges and masks of a dataset directory (without its features)."""
    edges = pq.read_table(data / "edges.parquet", columns=["src", "dst"])
    nodes = pq.read_table(data / "nodes.parquet", columns=list(MASKS))
    src, dst = (edges.column(c).to_numpy().astype(np.int64) for c in ("src", "dst"))
    return src, dst, {m: nodes.column(m).to_numpy().astype(bool) for m in MASKS}


def _our_owner(out: Path, num_nodes: int) -> np.ndarray:
    """Owner of every original node id, read back from our partition directory."""
    from dglx_dist.partition import PartitionDir

    pdir = PartitionDir(out)
    owner = np.full(num_nodes, -1, dtype=np.int64)
    for p in range(pdir.num_parts):
        owner[pdir.load_part(p, features=False).core_orig] = p
    if (owner < 0).any():
        raise RuntimeError(f"{out}: {int((owner < 0).sum())} nodes are owned by no part")
    return owner


def _category(masks: dict[str, np.ndarray]) -> np.ndarray:
    """1 train, 2 val, 3 test, 0 other: the balance_ntypes our metis gives DGL's METIS."""
    cat = np.zeros(masks["train"].size, dtype=np.int64)
    for i, m in enumerate(MASKS, start=1):
        cat[masks[m] & (cat == 0)] = i
    return cat


def _work_ours(method: str, data: Path, parts: int, out: Path) -> dict[str, Any]:
    """Runs our partitioner; returns its timing, peak and quality (computed after the peak)."""
    t0 = time.perf_counter()
    report = partition_dataset(data, out, method=method, num_parts=parts, progress=True)
    seconds, peak = time.perf_counter() - t0, _peak_mb()
    src, dst, masks = _read_graph_arrays(data)
    q = quality(src, dst, _our_owner(out, masks["train"].size), masks, parts)
    ours = {"edge_cut": report.edge_cut, **{f"imb_{k}": v for k, v in report.imbalance.items()}}
    diff = {k: (v, q[k]) for k, v in ours.items() if k in q and abs(v - q[k]) > 1e-3}
    if diff:
        log.warning("%s: QualityReport disagrees with the benchmark's recount: %s", method, diff)
    return {"seconds": seconds, "peak_mb": peak, **q, "assign_seconds": report.plan_seconds,
            "report_peak_rss_mb": report.peak_rss_mb,
            "estimated_peak_mb": report.estimated_peak_mb}


def _work_dgl(data: Path, parts: int, out: Path) -> dict[str, Any]:
    """Runs ``dgl.distributed.partition_graph`` with the same balance constraints as ours."""
    import dgl
    import torch

    t0 = time.perf_counter()
    ds = read_dataset(data)
    g = to_dgl(ds)
    masks = {m: getattr(ds, m) for m in MASKS}
    orig_nids, _ = dgl.distributed.partition_graph(
        g, "bench", parts, str(out), part_method="metis",
        balance_ntypes=torch.from_numpy(_category(masks)), balance_edges=True,
        return_mapping=True)
    seconds, peak = time.perf_counter() - t0, _peak_mb()
    # the METIS step alone, the same call partition_graph makes (after the peak was read)
    t1 = time.perf_counter()
    dgl.metis_partition_assignment(g, parts, balance_ntypes=torch.from_numpy(_category(masks)),
                                   balance_edges=True)
    assign = time.perf_counter() - t1
    ranges = json.loads((out / "bench.json").read_text())["node_map"]["_N"]
    orig = orig_nids.numpy()
    owner = np.full(ds.num_nodes, -1, dtype=np.int64)
    for p, (lo, hi) in enumerate(ranges):
        owner[orig[lo:hi]] = p
    if (owner < 0).any():
        raise RuntimeError(f"DGL's node_map leaves {int((owner < 0).sum())} nodes unowned")
    return {"seconds": seconds, "peak_mb": peak, "assign_seconds": assign,
            **quality(ds.src, ds.dst, owner, masks, parts)}


def _work_profile(data: Path, parts: int, out: Path) -> dict[str, Any]:
    """Our metis path phase by phase (mirrors ``partition_dataset``; uses its internals)."""
    from dglx_dist.partition.driver import _header
    from dglx_dist.partition.io import write_partitions
    from dglx_dist.partition.layout import Layout
    from dglx_dist.partition.quality import PartTally, QualityReport

    phases: list[dict[str, Any]] = []
    t = time.perf_counter()

    def mark(name: str) -> None:
        """Records the time and memory of the phase that just ended."""
        nonlocal t
        now = time.perf_counter()
        phases.append({"phase": name, "seconds": round(now - t, 3),
                       "rss_mb": round(psutil.Process().memory_info().rss / 2**20),
                       "peak_mb": round(_peak_mb())})
        log.info("profile: %s", phases[-1])
        t = now

    mark("imports")
    part, ds = PARTITIONERS.build("metis"), read_dataset(data)
    mark("read")
    plan = part.plan(ds, parts)
    mark("plan")
    layout = Layout(ds, plan)
    mark("layout")
    write_partitions(out, _header(part, "metis", ds, plan), layout.parts())
    mark("write")
    QualityReport.from_layout("metis", layout, PartTally(layout.types))
    mark("quality")
    return {"phases": phases}


def worker_main(args: argparse.Namespace) -> None:
    """Hidden ``--worker`` mode: one method in this process, result JSON to ``--result``."""
    import dgl  # noqa: F401  (imported by every method: part of the baseline)
    import torch  # noqa: F401

    data, out = Path(args.data), Path(args.part_out)
    if args.worker == "baseline":
        result: dict[str, Any] = {"peak_mb": _peak_mb()}
    elif args.worker == "dgl":
        result = _work_dgl(data, args.parts, out)
    elif args.worker == "profile":
        result = _work_profile(data, args.parts, out)
    else:
        result = _work_ours(args.worker, data, args.parts, out)
    Path(args.result).write_text(json.dumps(result))


def run_child(method: str, data: Path, parts: int, workdir: Path) -> dict[str, Any]:
    """Runs one method in a fresh child process and returns its result dict.

    The partition output is deleted afterwards. DGL's own stdout (its phase timings) is kept
    as ``dgl_log``.
    """
    out, result = workdir / f"parts-{method}", workdir / f"result-{method}.json"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", method, "--data", str(data),
           "--parts", str(parts), "--part-out", str(out), "--result", str(result)]
    log.info("running %s in a child process", method)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    shutil.rmtree(out, ignore_errors=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    log.debug("[%s stdout]\n%s", method, proc.stdout)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {method!r} failed with exit code {proc.returncode}: "
                           f"{' | '.join(lines[-5:])}")
    res = json.loads(result.read_text())
    result.unlink()
    res["child_wall_s"] = round(wall, 2)
    if method == "dgl":
        res["dgl_log"] = [ln for ln in lines if not ln.startswith("part ")]
        for ln in res["dgl_log"]:
            log.info("[dgl] %s", ln)
    return res


def dataset_dir(args: argparse.Namespace, workdir: Path) -> Path:
    """``--data``, or a synthetic dataset generated into ``workdir`` (cached by its config)."""
    if args.data:
        return Path(args.data)
    changes = {k: v for k, v in (("num_nodes", args.nodes), ("num_edges", args.edges),
                                 ("feat_dim", args.feat_dim)) if v}
    config = dataclasses.replace(PRESETS[args.preset], seed=args.seed, **changes)
    key = hashlib.sha1(json.dumps(dataclasses.asdict(config), sort_keys=True).encode())
    path = workdir / f"synthetic-{key.hexdigest()[:12]}"
    if (path / "meta.json").is_file():
        log.info("reusing cached synthetic dataset %s", path)
        return path
    log.info("generating synthetic dataset %s: %s", path, config)
    write_synthetic(config, path, progress=True)
    return path


def _combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Repeated runs as one: best time (and median, all), largest peak, median-cut quality."""
    times = sorted(r["seconds"] for r in runs)
    by_cut = sorted(runs, key=lambda r: r["edge_cut"])
    if by_cut[0]["edge_cut"] != by_cut[-1]["edge_cut"]:
        log.info("edge cut varies between repeats (METIS is not deterministic here): %s",
                 [r["edge_cut"] for r in runs])
    return {**by_cut[len(runs) // 2], "seconds": times[0],
            "seconds_median": round(times[len(times) // 2], 2),
            "seconds_all": [round(t, 2) for t in times],
            "edge_cut_all": [r["edge_cut"] for r in runs],
            "peak_mb": max(r["peak_mb"] for r in runs)}


def _row(method: str, parts: int, res: dict[str, Any], baseline_mb: float) -> dict[str, Any]:
    """One table row: rounded times and peaks, and the peak above the import baseline."""
    return {"method": method if method != "dgl" else "dgl.partition_graph", "key": method,
            "parts": parts, **res, "seconds": round(res["seconds"], 2),
            "peak_mb": round(res["peak_mb"], 1),
            "peak_minus_import_mb": round(res["peak_mb"] - baseline_mb, 1)}


def ratios(rows: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The target checks of this run's rows: PASS, FAIL or n/a (a method was not run)."""
    checks = []
    for name, num, den, fld, op, target in TARGETS:
        value = None
        if num in rows and den in rows and rows[den][fld]:
            value = round(rows[num][fld] / rows[den][fld], 3)
        ok = None if value is None or target is None else (
            value <= target if op == "<=" else value >= target)
        checks.append({"ratio": name, "value": value,
                       "target": "(reported)" if target is None else f"{op} {target}",
                       "status": "info" if target is None and value is not None else
                       "n/a" if ok is None else ("PASS" if ok else "FAIL")})
    return checks


def bench(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Generates (or finds) the dataset, runs every method and assembles the results."""
    data = dataset_dir(args, workdir)
    meta = json.loads((data / "meta.json").read_text())
    log.info("dataset %s: %d nodes, %d edges, feat_dim %d", data, meta["num_nodes"],
             meta["num_edges"], meta["feat_dim"])
    baseline = run_child("baseline", data, args.parts, workdir)["peak_mb"]
    log.info("import baseline: %.0f MiB", baseline)
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in args.methods}
    for rep in range(args.repeat):  # round robin, so background load hits every method alike
        for method in args.methods:
            res = run_child(method, data, args.parts, workdir)
            runs[method].append(res)
            log.info("%s (run %d/%d): %.2fs, peak %.0f MiB, cut %.4f", method, rep + 1,
                     args.repeat, res["seconds"], res["peak_mb"], res["cut_frac"])
    rows = {m: _row(m, args.parts, _combine(r), baseline) for m, r in runs.items()}
    result = {"dataset": {"path": str(data), **{k: meta[k] for k in
                                                ("num_nodes", "num_edges", "feat_dim")}},
              "parts": args.parts, "repeat": args.repeat, "cpus": os.cpu_count(),
              "load_avg_1m": round(os.getloadavg()[0], 2),
              "baseline_import_mb": round(baseline, 1),
              "rows": list(rows.values()), "targets": ratios(rows)}
    if args.profile:
        result["metis_profile"] = run_child("profile", data, args.parts, workdir)["phases"]
    return result


def report(result: dict[str, Any]) -> str:
    """The markdown tables of a result."""
    text = markdown_table(result["rows"], COLUMNS) + "\n\n" + markdown_table(
        result["targets"], ("ratio", "value", "target", "status"))
    if result.get("metis_profile"):
        text += "\n\nour metis, phase by phase:\n\n" + markdown_table(result["metis_profile"])
    return text


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (``--worker``, ``--part-out``, ``--result`` are internal)."""
    p = script_parser(__doc__, PRESETS, "small",
                      "small: 100k nodes / 2M edges / feat 64; full: 1M / 20M / 128; "
                      "products: dglx datagen --preset products (2.45M / 61.9M / 100)")
    p.add_argument("--nodes", type=int, help="override the preset's node count")
    p.add_argument("--edges", type=int, help="override the preset's directed edge count")
    p.add_argument("--feat-dim", type=int, help="override the preset's feature width")
    p.add_argument("--seed", type=int, default=0, help="synthetic generator seed")
    p.add_argument("--parts", type=int, default=4, help="number of parts (default 4)")
    p.add_argument("--data", help="an existing dataset directory (skips generation)")
    p.add_argument("--workdir", help="where datasets and outputs go (default: a temp dir, "
                                     "removed afterwards); generated datasets are cached here")
    p.add_argument("--methods", default=",".join(METHODS),
                   help=f"comma-separated subset of {','.join(METHODS)}")
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per method (round robin): best time, largest peak, median cut")
    p.add_argument("--profile", action="store_true",
                   help="also time our metis phase by phase (read, plan, layout, write)")
    p.add_argument("--out", help="also write the JSON result to this file")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--part-out", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in args.methods if m not in METHODS]
    if bad:
        p.error(f"--methods {bad} not understood; choose from {METHODS}")
    if args.parts < 1 or args.repeat < 1:
        p.error(f"--parts {args.parts}, --repeat {args.repeat}; expected both >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark (or, with ``--worker``, one method); returns the exit code."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.worker:
        worker_main(args)
        return 0
    own_tmp = args.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="bench_partition_") if own_tmp else args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        result = bench(args, workdir)
    finally:
        if own_tmp:
            shutil.rmtree(workdir, ignore_errors=True)
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text, report(result), sep="\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
