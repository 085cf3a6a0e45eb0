"""Checking the cluster model where it can be checked: ``dglx bench`` on this machine at several
cluster shapes and link speeds, every strategy calibrated on one of them
(:func:`~benchmarks.costmodel.predict.calibrate`) and predicted on all, side by side with
what was measured (``benchmarks/cluster_model.py validate``)."""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.costmodel.predict import Calibration, calibrate, predict
from dglx_dist.errors import InvalidValueError, RunFailedError
from dglx_dist.strategies.cost.shapes import Cluster, GraphShape, Units, Workload

__all__ = ["RunShape", "accuracy", "compare", "measured_rows", "parse_shape"]

log = logging.getLogger("dglx_dist.bench")


@dataclasses.dataclass(frozen=True)
class RunShape:
    """One measured configuration: ``servers`` x ``ranks`` on ``link`` (``1g`` or ``10g``)."""

    servers: int
    ranks: int
    link: str = "1g"

    @property
    def name(self) -> str:
        return f"{self.servers}x{self.ranks}@{self.link}"

    def cluster(self, shared_cores: int | None) -> Cluster:
        from dglx_dist.cluster.emulate import PRESETS

        return Cluster(self.servers, self.ranks, PRESETS[self.link].bits_per_s / 1e9,
                       shared_cores)


def parse_shape(text: str) -> RunShape:
    """``SxG`` or ``SxG@LINK`` (e.g. ``4x2@10g``; the links of ``dglx emulate --preset``)."""
    from dglx_dist.cluster.emulate import PRESETS

    shape, _, link = text.partition("@")
    parts = shape.split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts) or (
            link and link not in PRESETS):
        raise InvalidValueError(f"cluster shape {text!r}: expected SERVERSxRANKS[@LINK], e.g. "
                                f"4x2@10g (links: {', '.join(PRESETS)})")
    return RunShape(int(parts[0]), int(parts[1]), link or "1g")


def measured_rows(shape: RunShape, data: Path, systems: list[str], work: Workload,
                  epochs: int, out: Path, timeout: float,
                  bench_flags: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """``dglx bench`` of ``systems`` at ``shape`` with ``bench_flags`` (its results kept in
    ``out``; a complete earlier run there is reused); the rows by system."""
    results = out / "results.jsonl"
    if not results.is_file():
        cmd = [sys.executable, "-m", "dglx_dist", "bench", "--data", str(data), "--systems",
               ",".join(systems), "--servers", str(shape.servers), "--ranks-per-server",
               str(shape.ranks), "--network", shape.link, "--epochs", str(epochs),
               "--batch-size", str(work.batch_size), "--model", work.model, "--hidden",
               str(work.hidden), "--fanouts", ",".join(map(str, work.fanouts)), "--timeout",
               str(timeout), "--out", str(out), "--no-plot", *bench_flags]
        log.info("measuring %s: %s", shape.name, " ".join(cmd))
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL)
        if not results.is_file():
            raise RunFailedError(f"dglx bench at {shape.name} wrote no results (exit code "
                                 f"{proc.returncode})")
    rows = [json.loads(ln) for ln in results.read_text().splitlines() if ln.strip()]
    return {r["system"]: r for r in rows}


def _error(pred: float, meas: float | None) -> float | None:
    return round(100 * (pred - meas) / meas, 1) if meas else None


def compare(graph: GraphShape, work: Workload, units: Units,
            runs: dict[RunShape, dict[str, dict[str, Any]]], calibrate_on: RunShape,
            shared_cores: int | None = os.cpu_count()) -> tuple[list[dict], dict[str, Calibration]]:
    """Rows of predicted vs measured epoch time and bytes for every strategy and shape, each
    strategy calibrated on its ``calibrate_on`` run; and the calibrations."""
    base = runs[calibrate_on]
    calibs = {name: calibrate(name, graph, work, calibrate_on.cluster(shared_cores), units, row)
              for name, row in base.items() if "error" not in row}
    rows = []
    for shape, measured in runs.items():
        for name, calib in calibs.items():
            row = measured.get(name)
            if not row or "error" in row:
                rows.append({"strategy": name, "shape": shape.name, "error": (row or {}).get(
                    "error", "not run")[:100]})
                continue
            pred = predict(name, graph, work, shape.cluster(shared_cores), units, calib)
            rows.append({"strategy": name, "shape": shape.name,
                         "calibration": shape == calibrate_on,
                         "epoch_measured": row["epoch_time"],
                         "epoch_predicted": round(pred["epoch_time"], 4),
                         "epoch_error_pct": _error(pred["epoch_time"], row["epoch_time"]),
                         "inter_mb_measured": round(row["bytes_inter"] / 1e6, 2),
                         "inter_mb_predicted": round(pred["bytes_inter"] / 1e6, 2),
                         "inter_error_pct": _error(pred["bytes_inter"], row["bytes_inter"]),
                         "intra_mb_measured": round((row["bytes_intra"] or 0) / 1e6, 2),
                         "intra_mb_predicted": round(pred["bytes_intra"] / 1e6, 2),
                         "phases": {k: round(v, 4) for k, v in pred["phases"].items()}})
    return rows, calibs


def accuracy(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per strategy, over the runs it was not calibrated on: the median and the largest
    absolute error of the predicted epoch time and inter-server bytes (percent)."""
    out = []
    for name in dict.fromkeys(r["strategy"] for r in rows):
        mine = [r for r in rows if r["strategy"] == name and "error" not in r
                and not r["calibration"]]
        stats = {"strategy": name, "runs": len(mine)}
        for key in ("epoch", "inter"):
            errs = [abs(r[f"{key}_error_pct"]) for r in mine if r[f"{key}_error_pct"] is not None]
            stats |= {f"{key}_median_abs_pct": statistics.median(errs) if errs else None,
                      f"{key}_max_abs_pct": max(errs, default=None)}
        out.append(stats)
    return out
