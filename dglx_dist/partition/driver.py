"""``partition_dataset``: dataset directory (homogeneous or typed) -> partition directory +
quality report.

Everything that can be refused is refused before the dataset is loaded or anything is written:
the partitioner's name and options, ``num_parts``, an existing output directory, the
estimated peak memory against what the machine has available, and (typed datasets) edge data
that is not the same columns in every edge type (one dtype and row shape per name: typed
partitions store one column per name, zeros for the edge types without it).
"""
from __future__ import annotations

import functools
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from dglx_dist.data.atomic import check_target
from dglx_dist.data.edge_data import edge_data_columns, edge_data_spec
from dglx_dist.data.dataset import GraphDataset, etype_key
from dglx_dist.graphcore.types import Etype
from dglx_dist.data.format import (edge_file, is_hetero, read_dataset, read_hetero_meta,
                                   read_meta)
from dglx_dist.errors import DatasetFormatError, PartitionError
from dglx_dist.memory import PeakRSS, check_memory
from dglx_dist.partition.base import PARTITIONERS, Partitioner, PartitionPlan, graph_types
from dglx_dist.partition.io import PARTITION_DIR, write_partitions
from dglx_dist.partition.layout import Layout, Partition, format_fields
from dglx_dist.partition.quality import PartTally, QualityReport
from dglx_dist.partition.types import GraphTypes

__all__ = ["partition_dataset", "check_memory"]

log = logging.getLogger(__name__)


def partition_dataset(data: str | os.PathLike | GraphDataset,
                      out: str | os.PathLike, method: str = "metis", num_parts: int = 2,
                      options: dict[str, Any] | None = None, *, overwrite: bool = False,
                      progress: bool = False, memory_limit: int | None = None,
                      nonfinite: str = "reject") -> QualityReport:
    """Partitions a dataset into ``num_parts`` parts and writes a partition directory.

    Args:
        data: a dataset directory (homogeneous or typed) or an in-memory dataset. A typed
            one is partitioned over its homogeneous view.
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
    types, inputs, load = _open(data, nonfinite)
    partitioner.validate(types, num_parts)
    check_target(out, overwrite, PARTITION_DIR, inputs, PartitionError)
    estimate = partitioner.estimate_peak_bytes(types, num_parts)
    check_memory(estimate, memory_limit, "partitioning",
                 "use a machine with more memory, more parts on a bigger machine, or a "
                 "cheaper partitioner (hash)")
    bar = tqdm(total=num_parts + 2, desc=f"{method} x{num_parts}", unit="step", leave=False,
               disable=None if progress else True)  # a terminal's only
    with PeakRSS() as rss, bar:
        ds = load()
        bar.update()
        t_plan = time.perf_counter()  # the decision: every node's owner is known after this
        plan = partitioner.plan(ds, num_parts)
        owner = np.asarray(plan.book.owner(np.arange(ds.num_nodes, dtype=np.int64)))
        plan_seconds = time.perf_counter() - t_plan
        bar.update()
        report = _write(Layout(ds, plan, owner), _header(partitioner, method, ds, plan), out,
                        overwrite, inputs, bar.update)
    report = report.with_cost(rss.seconds, plan_seconds, rss.peak, estimate)
    log.debug("partitioned %s into %d parts with %s in %.2fs (edge cut %.2f%%)", out, num_parts,
             report.method, rss.seconds, 100 * report.edge_cut_frac)
    return report


def _open(data: str | os.PathLike | GraphDataset,
          nonfinite: str) -> tuple[GraphTypes, tuple, Callable[[], GraphDataset]]:
    """The dataset's types and sizes (read and checked without loading it: edge data that
    differs between edge types is refused here), the paths it is read from, and what loads
    it."""
    if isinstance(data, GraphDataset):
        _check_edge_data({et: {k: f"{v.dtype}{list(v.shape[1:])}" for k, v in e.edata.items()}
                          for et, e in data.edges.items()}, "the dataset")
        return graph_types(data), (), lambda: data
    load = functools.partial(read_dataset, data, nonfinite)
    if not is_hetero(data):  # the directory format without types (meta.json's sizes)
        meta = read_meta(data)
        return GraphTypes.one_type(meta.num_nodes, meta.num_edges, meta.feat_dim), (data,), load
    return _hetero_types(Path(data)), (data,), load


def _write(layout: Layout, header: dict[str, Any], out: str | os.PathLike, overwrite: bool,
           inputs: tuple, step: Callable[[], Any]) -> QualityReport:
    """Writes the parts and the manifest; the quality report (its costs not yet added)."""
    tally, ds = PartTally(layout.types), layout.ds
    arrays = [ds.src, ds.dst, ds.label, *ds.edata.values(), *layout.type_feat.values()]
    # about what the directory takes on disk: the parts' files are uncompressed Arrow and
    # hold every row once, plus ids (a dataset's compressed Parquet files can be a tenth)
    expected = int(sum(a.nbytes for a in arrays)) + 24 * (ds.num_nodes + ds.num_edges)

    def on_part(pc: Partition) -> None:
        tally.add(pc)
        step()

    write_partitions(out, header, layout.parts(), overwrite=overwrite, on_part=on_part,
                     inputs=inputs, expected_bytes=expected)
    return QualityReport.from_layout(header["partitioner"]["name"], layout, tally)


def _header(partitioner: Partitioner, method: str, ds: GraphDataset,
            plan: PartitionPlan) -> dict[str, Any]:
    fmt = format_fields(graph_types(ds), plan.book.num_parts, plan.feature_slices is not None)
    return {
        "partitioner": {"name": method, "options": partitioner.options()},
        "num_parts": plan.book.num_parts, "num_nodes": ds.num_nodes, "num_edges": ds.num_edges,
        "feat_dim": fmt["feat_dim"], "num_classes": ds.num_classes,
        "relabeled": plan.orig_ids is not None, "node_book": plan.book.to_json(),
        "feature_layout": "rows" if plan.feature_slices is None else "columns",
        "feature_slices": fmt["feature_slices"], "dataset": ds.extra,
        **({"edge_data": edge_data_spec(ds.edata)} if ds.edata else {}), **fmt}


# -- a typed dataset ------------------------------------------------------------------------
def _check_edge_data(specs: dict[Etype, dict[str, str]], where: str) -> None:
    """Refuses an edge-data name whose dtype or row shape differs between edge types."""
    seen: dict[str, tuple[Etype, str]] = {}
    for etype, spec in specs.items():
        for name, kind in spec.items():
            first, want = seen.setdefault(name, (etype, kind))
            if kind != want:
                raise PartitionError(
                    f"{where}: edge data {name!r} is {kind} in edge type {etype_key(etype)} "
                    f"but {want} in {etype_key(first)}; typed partitions store one column per "
                    f"name: give it one dtype and row shape in every edge type, or rename one")


def _hetero_types(path: Path) -> GraphTypes:
    """A typed dataset directory's types, from its meta.json and its edge files' schemas."""
    meta = read_hetero_meta(path)
    specs = {}
    for i, etype in enumerate(meta.etypes):
        file = path / edge_file(i, etype)
        try:
            schema = pq.read_schema(file)
        except (OSError, ValueError) as exc:
            raise DatasetFormatError(f"{file}: not a readable Parquet file ({exc})") from None
        specs[tuple(etype)] = {n: str(schema.field(n).type)
                               for n in edge_data_columns(schema, file, DatasetFormatError)}
    _check_edge_data(specs, str(path))
    return GraphTypes.of({t: (s["num_nodes"], s["feat_dim"], s["labeled"])
                          for t, s in meta.ntypes.items()},
                         {et: (n, list(specs[et])) for et, n in zip(specs, meta.num_edges)},
                         meta.category)
