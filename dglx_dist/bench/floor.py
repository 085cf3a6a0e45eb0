"""How far each ``dglx bench`` row is from what the hardware allows: the epoch's floor, the
larger of the network's (the busiest server's inter-server bytes over its emulated link's
rate) and the compute's (single-process DGL's epoch over the ranks that compute at once).
docs/benchmarks.md, "Every row beside its floor", says more.
"""
from __future__ import annotations

import os
from typing import Any

__all__ = ["add_floors", "link_bytes_per_s", "FLOOR_FIELDS"]

FLOOR_FIELDS = ("floor_net_s", "floor_compute_s", "floor_s", "vs_floor")
REFERENCE = "dgl"


def link_bytes_per_s(network: str) -> float | None:
    """The bytes per second of a server's link on ``network`` (``emulated-1g``...), or None
    where the links are not shaped."""
    if not network.startswith("emulated-"):
        return None
    from dglx_dist.cluster.emulate import PRESETS

    return PRESETS[network.removeprefix("emulated-")].bits_per_s / 8


def add_floors(rows: list[dict[str, Any]], network: str, ranks: int,
               cpus: int | None = None) -> None:
    """Sets :data:`FLOOR_FIELDS` on every row that ran (not on the single-process reference
    itself); the compute floor comes from the reference row of the same ``run``."""
    rate = link_bytes_per_s(network)
    parallel = max(1, min(ranks, cpus or os.cpu_count() or 1))
    single = {r.get("run"): r["epoch_time"] for r in rows
              if r.get("system") == REFERENCE and "error" not in r and r.get("epoch_time")}
    for row in rows:
        if "error" in row or row.get("system") == REFERENCE or not row.get("epoch_time"):
            continue
        busiest = row.get("bytes_inter_busiest")
        net = busiest / rate if rate and busiest is not None else None
        compute = single[row.get("run")] / parallel if row.get("run") in single else None
        limits = [v for v in (net, compute) if v]  # a zero floor says nothing
        if not limits:
            continue
        floor = max(limits)
        row.update(floor_net_s=None if net is None else round(net, 3),
                   floor_compute_s=None if compute is None else round(compute, 3),
                   floor_s=round(floor, 3), vs_floor=round(row["epoch_time"] / floor, 2))
