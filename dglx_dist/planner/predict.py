"""Epoch time and bytes from a strategy's :class:`~dglx_dist.strategies.cost.counts.Work` and
a rank's :class:`~dglx_dist.strategies.cost.shapes.Units`, with a strategy's
:class:`Calibration` (its per-step overhead, by default its cost's, and byte factors;
``benchmarks/costmodel`` fits them from measured runs); a strategy's cost (:func:`cost_of`).
``benchmarks/costmodel`` predicts and calibrates with the same phases.

The time of an epoch is the sum of its phases, nothing overlapped (the plan then hides what
a strategy's choice overlaps: p3's pipelined exchange, a loader's worker thread)::

    (sample + gather) / sample speedup + 3 x (message passing + dense) / compute speedup
                                                         (all x ranks per core where shared)
    + inter-server bytes / servers / link rate + rounds across servers x latency
    + rounds across servers x a round's own cost (CPU time: x ranks per core where shared)
    + intra-server bytes / ranks x s per byte
    + steps x the strategy's per-step overhead (CPU time: x ranks per core where shared)
"""
from __future__ import annotations

import dataclasses
from typing import Any

from dglx_dist.errors import NotSupportedError
from dglx_dist.strategies.abilities import Costed
from dglx_dist.strategies.cost import Cost
from dglx_dist.strategies.cost.counts import Work
from dglx_dist.strategies.cost.shapes import Cluster, Units

__all__ = ["NO_COST", "Calibration", "cost_of", "phases"]

NO_COST = "it declares no cost (strategies/cost: a Costed strategy with a law)"
"""Why a strategy without an epoch law is not planned."""


def cost_of(built: Any) -> Cost:
    """The cost of a strategy (built), with its law.

    Raises:
        NotSupportedError: it declares none (:data:`NO_COST`).
    """
    if not isinstance(built, Costed) or built.cost.law is None:
        raise NotSupportedError(NO_COST)
    return built.cost


@dataclasses.dataclass(frozen=True)
class Calibration:
    """One strategy's fitted constants (identity: no calibration)."""

    overhead_s_per_step: float = 0.0
    compute_factor: float = 1.0
    inter_factor: float = 1.0
    intra_factor: float = 1.0

    def public(self) -> dict[str, float]:
        return {k: float(f"{v:.4g}") for k, v in dataclasses.asdict(self).items()}


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
            "latency": w.rounds * cluster.latency_s,
            "rounds": w.rounds * share * units.round_s,
            "intra": (calib.intra_factor * w.intra_bytes + w.offload_bytes) / cluster.world *
            units.intra_s_per_byte,
            "overhead": share * w.steps * calib.overhead_s_per_step}
