"""The calibration of one strategy from one measured run: the constants with which the plan's
:func:`~dglx_dist.planner.predict.predict` gives that run back (research tooling: the package
ships the prediction and its default constants, :mod:`dglx_dist.planner.units`).

A calibration fits, from one measured run, the per-step overhead (what the units do not cover:
Python, the framework, waiting) and a factor per byte count (headers, ids and what the law
leaves out); where the units alone overshoot the measured time, a factor on the compute
instead. Everything else is predicted.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from dglx_dist.planner.predict import Calibration, law_work, phases, predict
from dglx_dist.planner.shapes import Cluster, GraphShape, Units, Workload

__all__ = ["Calibration", "calibrate", "phases", "predict"]


def calibrate(strategy: str, graph: GraphShape, work: Workload, cluster: Cluster, units: Units,
              measured: dict[str, Any]) -> Calibration:
    """The constants with which :func:`predict` gives ``measured`` (a ``dglx bench`` row:
    ``epoch_time``, ``bytes_inter``, ``bytes_intra``) back for this run."""
    w = law_work(strategy, graph, work, cluster)
    factor = lambda got, law: got / law if law > 0 and got else 1.0  # noqa: E731
    calib = Calibration(inter_factor=factor(measured.get("bytes_inter"), w.inter_bytes),
                        intra_factor=factor(measured.get("bytes_intra"), w.intra_bytes))
    ph = phases(w, units, cluster, calib)
    comm = ph["inter"] + ph["intra"] + ph["latency"] + ph["rounds"]
    compute = ph["sample"] + ph["gather"] + ph["compute"]
    residual = measured["epoch_time"] - comm - compute
    if residual >= 0:  # CPU time, shared like the rest
        return dataclasses.replace(calib, overhead_s_per_step=residual / w.steps /
                                   cluster.contention())
    left = max(measured["epoch_time"] - comm, 0.0)
    return dataclasses.replace(calib, compute_factor=left / compute if compute else 1.0)
