"""``partition_dataset``: dataset directory (homogeneous or typed) -> partition directory +
quality report.

Everything that can be refused is refused before the dataset is loaded or anything is written:
the partitioner's name and options, ``num_parts``, an existing output directory, the
estimated peak memory against what the machine has available, and (typed datasets) edge data
that is not the same columns in every edge type.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Any, Callable

import numpy as np
from tqdm.auto import tqdm

from dglx_dist.data.atomic import check_target
from dglx_dist.data.edge_data import edge_data_spec
from dglx_dist.data.format import DatasetMeta, GraphDataset, read_dataset, read_meta
from dglx_dist.data.hetero import HeteroDataset
from dglx_dist.data.hetero_format import is_hetero
from dglx_dist.errors import PartitionError
from dglx_dist.memory import PeakRSS, check_memory
from dglx_dist.partition.base import PARTITIONERS, Partitioner, PartitionPlan
from dglx_dist.partition.book import FeatureSlices
from dglx_dist.partition.io import PARTITION_DIR, write_partitions
from dglx_dist.partition.layout import Layout, Partition
from dglx_dist.partition.quality import QualityReport
from dglx_dist.partition.typed import (TypedGraph, TypedLayout, TypeTally, open_typed,
                                      type_feature_slices)

__all__ = ["partition_dataset", "check_memory"]

log = logging.getLogger(__name__)


def partition_dataset(data: str | os.PathLike | GraphDataset | HeteroDataset,
                      out: str | os.PathLike, method: str = "metis", num_parts: int = 2,
                      options: dict[str, Any] | None = None, *, overwrite: bool = False,
                      progress: bool = False, memory_limit: int | None = None,
                      nonfinite: str = "reject") -> QualityReport:
    """Partitions a dataset into ``num_parts`` parts and writes a partition directory.

    Args:
        data: a dataset directory (homogeneous or typed) or an in-memory dataset. A typed
            one is partitioned over its homogeneous view (:mod:`~dglx_dist.partition.typed`).
        out: the partition directory to create (atomically).
        method: a registered partitioner name (``dglx_dist.partition.PARTITIONERS.names()``).
        num_parts: number of parts.
        options: the partitioner's options (strings are coerced to the option's type).
        overwrite: replace ``out`` if it exists (only once the new one is complete, and only
            a partition directory that does not hold ``data``).
        progress: show a tqdm progress bar.
        memory_limit: bytes allowed for the estimated peak; default the available memory.
        nonfinite: NaN / Inf features in a dataset directory: "reject" (an error) or "warn".

    Returns:
        The quality report (edge cut, imbalance, HALO counts, time, peak memory; per node and
        edge type for a typed dataset).
    """
    partitioner = PARTITIONERS.build(method, **(options or {}))
    meta, inputs, load = _open(data, nonfinite)
    partitioner.validate(meta, num_parts)
    check_target(out, overwrite, PARTITION_DIR, inputs, PartitionError)
    estimate = partitioner.estimate_peak_bytes(meta, num_parts)
    check_memory(estimate, memory_limit, "partitioning",
                 "use a machine with more memory, more parts on a bigger machine, or a "
                 "cheaper partitioner (hash)")
    bar = tqdm(total=num_parts + 2, desc=f"{method} x{num_parts}", disable=not progress,
               unit="step")
    with PeakRSS() as rss, bar:
        ds = load()
        bar.update()
        t_plan = time.perf_counter()  # the decision: every node's owner is known after this
        plan = partitioner.plan(ds, num_parts)
        owner = np.asarray(plan.book.owner(np.arange(ds.num_nodes, dtype=np.int64)))
        plan_seconds = time.perf_counter() - t_plan
        bar.update()
        header = _header(partitioner, method, ds, plan)
        report = _write(ds, plan, owner, out, header, overwrite, inputs, bar.update)
    report = report.with_cost(rss.seconds, plan_seconds, rss.peak, estimate)
    log.info("partitioned %s into %d parts with %s in %.2fs (edge cut %.2f%%)", out, num_parts,
             report.method, rss.seconds, 100 * report.edge_cut_frac)
    return report


def _open(data: str | os.PathLike | GraphDataset | HeteroDataset,
          nonfinite: str) -> tuple[DatasetMeta, tuple, Callable[[], GraphDataset]]:
    """The dataset's sizes (read without loading it), the paths it is read from, and what
    loads it (a typed dataset: its homogeneous view)."""
    if isinstance(data, GraphDataset):
        return data.meta, (), lambda: data
    if isinstance(data, HeteroDataset) or is_hetero(data):
        meta, load = open_typed(data, nonfinite)
        return meta, () if isinstance(data, HeteroDataset) else (data,), load
    return read_meta(data), (data,), lambda: read_dataset(data, nonfinite)


def _write(ds: GraphDataset, plan: PartitionPlan, owner: np.ndarray, out: str | os.PathLike,
           header: dict[str, Any], overwrite: bool, inputs: tuple,
           step: Callable[[], Any]) -> QualityReport:
    """Writes the parts and the manifest; the quality report (its costs not yet added)."""
    typed = isinstance(ds, TypedGraph)
    layout = (TypedLayout if typed else Layout)(ds, plan, owner)
    tally = TypeTally(ds.types) if typed else None
    halos: list[int] = []

    def on_part(pc: Partition) -> None:
        halos.append(int(pc.halo_gid.size))
        if tally is not None:
            tally.add(pc)
        step()

    write_partitions(out, header, layout.parts(), overwrite=overwrite, on_part=on_part,
                     inputs=inputs, expected_bytes=_dataset_bytes(ds))
    report = QualityReport.from_layout(header["partitioner"]["name"], layout, halos)
    return report if tally is None else dataclasses.replace(report, per_type=tally.to_json())


def _dataset_bytes(ds: GraphDataset) -> int:
    """About what a partition directory of ``ds`` takes on disk: its arrays' size (the parts'
    files are uncompressed Arrow and hold every row once, plus ids: a dataset's compressed
    Parquet files can be a tenth of it)."""
    arrays = [ds.src, ds.dst, ds.feat, ds.label, *ds.edata.values()]
    typed = ds.type_feat_bytes() if isinstance(ds, TypedGraph) else 0
    return int(sum(a.nbytes for a in arrays)) + typed + 24 * (ds.num_nodes + ds.num_edges)


def _header(partitioner: Partitioner, method: str, ds: GraphDataset,
            plan: PartitionPlan) -> dict[str, Any]:
    slices = plan.feature_slices or FeatureSlices([0, ds.feat_dim])
    return {
        "partitioner": {"name": method, "options": partitioner.options()},
        "num_parts": plan.book.num_parts, "num_nodes": ds.num_nodes, "num_edges": ds.num_edges,
        "feat_dim": ds.feat_dim, "num_classes": ds.num_classes,
        "relabeled": plan.orig_ids is not None, "node_book": plan.book.to_json(),
        "feature_layout": "rows" if plan.feature_slices is None else "columns",
        "feature_slices": slices.to_json(), "dataset": ds.extra,
        **({"edge_data": edge_data_spec(ds.edata)} if ds.edata else {}),
        **({"types": ds.types.to_json()} if isinstance(ds, TypedGraph) else {}),
        **({"type_feature_slices": {t: s.to_json() for t, s in type_feature_slices(
            ds.types, plan.book.num_parts).items()}}
           if isinstance(ds, TypedGraph) and plan.feature_slices is not None else {}),
    }
