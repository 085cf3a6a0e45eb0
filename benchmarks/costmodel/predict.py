"""Epoch time and bytes from a strategy's :class:`~benchmarks.costmodel.laws.Work` and a
rank's measured :class:`~benchmarks.costmodel.shapes.Units`, and the calibration of one
strategy from one measured run.

The time of an epoch is the sum of its phases, nothing overlapped::

    (sample + gather) / sample speedup + 3 x (message passing + dense) / compute speedup
                                                         (all x ranks per core where shared)
    + inter-server bytes / servers / link rate + intra-server bytes / ranks x s per byte
    + steps x the strategy's per-step overhead (CPU time: x ranks per core where shared)

A calibration fits, from one measured run, the per-step overhead (what the units do not cover:
Python, the framework, waiting) and a factor per byte count (headers, ids and what the law
leaves out); where the units alone overshoot the measured time, a factor on the compute
instead. Everything else is predicted.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks.costmodel.laws import LAWS, Work
from benchmarks.costmodel.shapes import Cluster, GraphShape, Units, Workload
from dglx_dist.errors import InvalidValueError

__all__ = ["Calibration", "calibrate", "phases", "predict"]


@dataclasses.dataclass(frozen=True)
class Calibration:
    """One strategy's fitted constants (identity: no calibration)."""

    overhead_s_per_step: float = 0.0
    compute_factor: float = 1.0
    inter_factor: float = 1.0
    intra_factor: float = 1.0

    def public(self) -> dict[str, float]:
        return {k: float(f"{v:.4g}") for k, v in dataclasses.asdict(self).items()}


def _work(strategy: str, graph: GraphShape, work: Workload, cluster: Cluster) -> Work:
    if strategy not in LAWS:
        raise InvalidValueError(f"cluster model: no law for strategy {strategy!r}; it knows "
                                f"{', '.join(LAWS)}")
    return LAWS[strategy](graph, work, cluster)


def phases(w: Work, units: Units, cluster: Cluster, calib: Calibration) -> dict[str, float]:
    """Seconds of each phase of one epoch (``overhead``: the calibrated per-step part)."""
    share = cluster.contention()
    cpu = share * calib.compute_factor / cluster.sample_speedup
    compute = 3 * (w.spmm_edge_dims * units.spmm_s_per_edge_dim +
                   w.flops * units.dense_s_per_flop) / cluster.compute_speedup
    link_bytes_per_s = cluster.link_gbit * 1e9 / 8
    return {"sample": cpu * w.sample_edges * units.sample_s_per_edge,
            "gather": cpu * w.gather_bytes * units.gather_s_per_byte,
            "compute": share * calib.compute_factor * compute,
            "inter": calib.inter_factor * w.inter_bytes / cluster.servers / link_bytes_per_s,
            "intra": (calib.intra_factor * w.intra_bytes + w.offload_bytes) / cluster.world *
            units.intra_s_per_byte,
            "overhead": share * w.steps * calib.overhead_s_per_step}


def predict(strategy: str, graph: GraphShape, work: Workload, cluster: Cluster, units: Units,
            calib: Calibration = Calibration()) -> dict[str, Any]:
    """The predicted epoch of ``strategy``: seconds, phases, steps, bytes."""
    w = _work(strategy, graph, work, cluster)
    ph = phases(w, units, cluster, calib)
    return {"epoch_time": sum(ph.values()), "phases": ph, "steps": w.steps,
            "bytes_inter": calib.inter_factor * w.inter_bytes,
            "bytes_intra": calib.intra_factor * w.intra_bytes}


def calibrate(strategy: str, graph: GraphShape, work: Workload, cluster: Cluster, units: Units,
              measured: dict[str, Any]) -> Calibration:
    """The constants with which :func:`predict` gives ``measured`` (a ``dglx bench`` row:
    ``epoch_time``, ``bytes_inter``, ``bytes_intra``) back for this run."""
    w = _work(strategy, graph, work, cluster)
    factor = lambda got, law: got / law if law > 0 and got else 1.0  # noqa: E731
    calib = Calibration(inter_factor=factor(measured.get("bytes_inter"), w.inter_bytes),
                        intra_factor=factor(measured.get("bytes_intra"), w.intra_bytes))
    ph = phases(w, units, cluster, calib)
    comm = ph["inter"] + ph["intra"]
    compute = ph["sample"] + ph["gather"] + ph["compute"]
    residual = measured["epoch_time"] - comm - compute
    if residual >= 0:  # CPU time, shared like the rest
        return dataclasses.replace(calib, overhead_s_per_step=residual / w.steps /
                                   cluster.contention())
    left = max(measured["epoch_time"] - comm, 0.0)
    return dataclasses.replace(calib, compute_factor=left / compute if compute else 1.0)
