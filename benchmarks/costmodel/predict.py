"""The prediction of one strategy's epoch (:func:`predict`, the plan's phases summed) and its
calibration from one measured run: the constants with which :func:`predict` gives that run
back (research tooling: the package ships the phases and their default constants,
:mod:`dglx_dist.planner.predict`, :mod:`dglx_dist.planner.units`).

A calibration fits, from one measured run, the per-step overhead (what the units do not cover:
Python, the framework, waiting) and a factor per byte count (headers, ids and what the law
leaves out); where the units alone overshoot the measured time, a factor on the compute
instead. Everything else is predicted.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from dglx_dist.errors import DglxError, InvalidValueError
from dglx_dist.planner.predict import Calibration, cost_of, phases
from dglx_dist.strategies import STRATEGIES
from dglx_dist.strategies.cost import Cost
from dglx_dist.strategies.cost.counts import Work
from dglx_dist.strategies.cost.shapes import Cluster, GraphShape, Units, Workload

__all__ = ["Calibration", "calibrate", "costs", "law_work", "phases", "predict"]


def costs() -> dict[str, Cost]:
    """The cost of every registered strategy (built with its defaults) that declares one, by
    name, in registry order."""
    out = {}
    for name in STRATEGIES.names():
        try:
            out[name] = cost_of(STRATEGIES.build(name))
        except DglxError:  # no cost, or options needed to be built: not modelled
            continue
    return out


def law_work(strategy: str, graph: GraphShape, work: Workload, cluster: Cluster) -> Work:
    """The :class:`Work` of an epoch of registered strategy ``strategy`` by its cost's law.

    Raises:
        InvalidValueError: no law for ``strategy``, naming those there are.
    """
    known = costs()
    if strategy not in known:
        raise InvalidValueError(f"cluster model: no law for strategy {strategy!r}; it knows "
                                f"{', '.join(known)}")
    return known[strategy].epoch(graph, work, cluster)


def predict(strategy: str, graph: GraphShape, work: Workload, cluster: Cluster, units: Units,
            calib: Calibration = Calibration()) -> dict[str, Any]:
    """The predicted epoch of ``strategy``: seconds, phases, steps, bytes."""
    w = law_work(strategy, graph, work, cluster)
    ph = phases(w, units, cluster, calib)
    return {"epoch_time": sum(ph.values()), "phases": ph, "steps": w.steps,
            "bytes_inter": calib.inter_factor * w.inter_bytes,
            "bytes_intra": calib.intra_factor * w.intra_bytes}


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
