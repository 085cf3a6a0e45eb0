"""The quality report printed after every partitioning."""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from dglx_dist.data.dataset import etype_key
from dglx_dist.partition.layout import Layout, Partition
from dglx_dist.partition.types import GraphTypes
from dglx_dist.report import markdown_table

__all__ = ["QualityReport", "PartTally", "imbalance"]

_MB = 1 << 20


def imbalance(per_part: np.ndarray) -> float:
    """max / mean of a per-part load (1.0 is perfect; 0 loads count as balanced)."""
    mean = float(np.mean(per_part)) if len(per_part) else 0.0
    return float(np.max(per_part)) / mean if mean > 0 else 1.0


@dataclasses.dataclass(frozen=True)
class QualityReport:
    """Edge cut, per-constraint imbalance (max/mean), HALO counts, time and memory.

    ``seconds`` covers reading, partitioning and writing; ``plan_seconds`` only the
    partitioner's decision (METIS, the hash, ...). ``per_type`` (typed datasets only, else
    None and left out of the JSON) holds ``ntypes``: {node type: {core_per_part, imbalance}}
    and ``etypes``: {"src:rel:dst": {edges, edge_cut, edge_cut_frac, halo_per_part}}
    (docs/partitioners.md, "Quality report").
    """

    method: str
    num_parts: int
    num_nodes: int
    num_edges: int
    edge_cut: int
    edge_cut_frac: float
    imbalance: dict[str, float]
    core_per_part: list[int]
    halo_per_part: list[int]
    edges_per_part: list[int]
    seconds: float = 0.0
    plan_seconds: float = 0.0
    peak_rss_mb: float = 0.0
    estimated_peak_mb: float = 0.0
    per_type: dict[str, Any] | None = None

    @classmethod
    def from_layout(cls, method: str, layout: Layout, tally: "PartTally") -> "QualityReport":
        ds, k = layout.ds, layout.book.num_parts
        owner = layout.node_owner_orig()
        loads = {"nodes": np.bincount(owner, minlength=k),
                 "edges": layout.edges_per_part}
        for m in ("train", "val", "test"):
            loads[m] = np.bincount(owner, weights=getattr(ds, m), minlength=k)
        cut = layout.edge_cut()
        return cls(method=method, num_parts=k, num_nodes=ds.num_nodes, num_edges=ds.num_edges,
                   edge_cut=cut, edge_cut_frac=cut / max(ds.num_edges, 1),
                   imbalance={name: round(imbalance(v), 4) for name, v in loads.items()},
                   core_per_part=[int(c) for c in loads["nodes"]],
                   halo_per_part=[int(h) for h in tally.halos],
                   edges_per_part=[int(e) for e in layout.edges_per_part],
                   per_type=None if layout.types.untyped else tally.to_json())

    def with_cost(self, seconds: float, plan_seconds: float, peak_rss_bytes: int,
                  estimated_bytes: int) -> "QualityReport":
        """The report with its costs: total and assignment-only time, peak and estimate."""
        return dataclasses.replace(self, seconds=round(seconds, 3),
                                   plan_seconds=round(plan_seconds, 6),
                                   peak_rss_mb=round(peak_rss_bytes / _MB, 1),
                                   estimated_peak_mb=round(estimated_bytes / _MB, 1))

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if self.per_type is None:
            del out["per_type"]
        return out

    def summary_row(self) -> dict[str, Any]:
        """One flat row for side-by-side tables."""
        row = {"method": self.method, "parts": self.num_parts, "edge_cut": self.edge_cut,
               "cut_frac": round(self.edge_cut_frac, 4)}
        row.update({f"imb_{k}": v for k, v in self.imbalance.items()})
        row.update({"halo_total": sum(self.halo_per_part), "seconds": self.seconds,
                    "plan_seconds": self.plan_seconds, "peak_rss_mb": self.peak_rss_mb})
        return row

    def to_markdown(self) -> str:
        parts = [{"part": p, "core": c, "halo": h, "edges": e} for p, (c, h, e) in
                 enumerate(zip(self.core_per_part, self.halo_per_part, self.edges_per_part))]
        tables = [markdown_table([self.summary_row()]), markdown_table(parts)]
        if self.per_type is not None:
            tables += [markdown_table([{"node type": t, "imbalance": v["imbalance"],
                                        "core per part": " ".join(map(str, v["core_per_part"]))}
                                       for t, v in self.per_type["ntypes"].items()]),
                       markdown_table([{"edge type": et, "edges": v["edges"],
                                        "edge_cut": v["edge_cut"],
                                        "cut_frac": round(v["edge_cut_frac"], 4),
                                        "halo per part": " ".join(map(str, v["halo_per_part"]))}
                                       for et, v in self.per_type["etypes"].items()])]
        return "\n\n".join(tables)


class PartTally:
    """What the quality report counts part by part as the parts are written: HALO nodes and
    its ``per_type`` counts (reported with types)."""

    def __init__(self, types: GraphTypes):
        self.types, self.halos, self.counts, self.type_halos = types, [], [], []
        self.cut = np.zeros(len(types.canonical_etypes), np.int64)

    def add(self, pc: Partition) -> None:
        self.halos.append(pc.num_halo)
        k, n = len(self.types.canonical_etypes), max(pc.num_core + pc.num_halo, 1)
        etype, _ = self.types.etype_of(pc.eid)
        remote = pc.src >= pc.num_core
        self.cut += np.bincount(etype[remote], minlength=k)
        pairs = np.unique(etype[remote] * n + pc.src[remote])
        self.type_halos.append(np.bincount(pairs // n, minlength=k))
        self.counts.append(np.bincount(self.types.to_per_type(pc.core_orig)[0],
                                       minlength=len(self.types.ntypes)))

    def to_json(self) -> dict:
        types, counts, halo = self.types, np.array(self.counts), np.array(self.type_halos)
        ntypes = {t: {"core_per_part": [int(c) for c in counts[:, i]],
                      "imbalance": round(imbalance(counts[:, i]), 4)}
                  for i, t in enumerate(types.ntypes)}
        sizes = np.diff(types.etype_offsets)
        etypes = {etype_key(et): {"edges": int(sizes[i]), "edge_cut": int(self.cut[i]),
                                  "edge_cut_frac": int(self.cut[i]) / max(int(sizes[i]), 1),
                                  "halo_per_part": [int(h) for h in halo[:, i]]}
                  for i, et in enumerate(types.canonical_etypes)}
        return {"ntypes": ntypes, "etypes": etypes}
