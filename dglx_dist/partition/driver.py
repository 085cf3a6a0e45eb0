"""``partition_dataset``: dataset directory -> partition directory + quality report.

Everything that can be refused is refused before the dataset is loaded or anything is written:
the partitioner's name and options, ``num_parts``, an existing output directory, and the
estimated peak memory against what the machine has available.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from dglx_dist.data.atomic import check_target
from dglx_dist.data.edge_data import edge_data_spec
from dglx_dist.data.format import GraphDataset, read_dataset, read_meta
from dglx_dist.errors import PartitionError
from dglx_dist.memory import PeakRSS, check_memory
from dglx_dist.partition.base import PARTITIONERS, Partitioner, PartitionPlan
from dglx_dist.partition.book import FeatureSlices
from dglx_dist.partition.io import PARTITION_DIR, write_partitions
from dglx_dist.partition.layout import Layout, Partition
from dglx_dist.partition.quality import QualityReport

__all__ = ["partition_dataset", "check_memory"]

log = logging.getLogger(__name__)


def partition_dataset(data: str | os.PathLike | GraphDataset, out: str | os.PathLike,
                      method: str = "metis", num_parts: int = 2,
                      options: dict[str, Any] | None = None, *, overwrite: bool = False,
                      progress: bool = False, memory_limit: int | None = None,
                      nonfinite: str = "reject") -> QualityReport:
    """Partitions a dataset into ``num_parts`` parts and writes a partition directory.

    Args:
        data: a dataset directory or an in-memory dataset.
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
        The quality report (edge cut, imbalance, HALO counts, time, peak memory).
    """
    partitioner = PARTITIONERS.build(method, **(options or {}))
    meta = data.meta if isinstance(data, GraphDataset) else read_meta(data)
    partitioner.validate(meta, num_parts)
    inputs = () if isinstance(data, GraphDataset) else (data,)
    check_target(out, overwrite, PARTITION_DIR, inputs, PartitionError)
    estimate = partitioner.estimate_peak_bytes(meta, num_parts)
    check_memory(estimate, memory_limit, "partitioning",
                 "use a machine with more memory, more parts on a bigger machine, or a "
                 "cheaper partitioner (hash)")
    bar = tqdm(total=num_parts + 2, desc=f"{method} x{num_parts}", disable=not progress,
               unit="step")
    with PeakRSS() as rss, bar:
        ds = data if isinstance(data, GraphDataset) else read_dataset(data, nonfinite)
        bar.update()
        t_plan = time.perf_counter()  # the decision: every node's owner is known after this
        plan = partitioner.plan(ds, num_parts)
        owner = np.asarray(plan.book.owner(np.arange(ds.num_nodes, dtype=np.int64)))
        plan_seconds = time.perf_counter() - t_plan
        bar.update()
        layout = Layout(ds, plan, owner)
        halos: list[int] = []

        def on_part(pc: Partition) -> None:
            halos.append(int(pc.halo_gid.size))
            bar.update()

        write_partitions(out, _header(partitioner, method, ds, plan), layout.parts(),
                         overwrite=overwrite, on_part=on_part, inputs=inputs,
                         expected_bytes=_dataset_bytes(ds))
        report = QualityReport.from_layout(method, layout, halos)
    report = report.with_cost(rss.seconds, plan_seconds, rss.peak, estimate)
    log.info("partitioned %s into %d parts with %s in %.2fs (edge cut %.2f%%)", out, num_parts,
             method, rss.seconds, 100 * report.edge_cut_frac)
    return report


def _dataset_bytes(ds: GraphDataset) -> int:
    """About what a partition directory of ``ds`` takes on disk: its arrays' size (the parts'
    files are uncompressed Arrow and hold every row once, plus ids: a dataset's compressed
    Parquet files can be a tenth of it)."""
    arrays = [ds.src, ds.dst, ds.feat, ds.label, *ds.edata.values()]
    return int(sum(a.nbytes for a in arrays)) + 24 * (ds.num_nodes + ds.num_edges)


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
    }
