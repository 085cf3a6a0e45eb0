"""``partition_dataset``: dataset directory (homogeneous or typed) -> partition directory +
quality report.

Everything that can be refused is refused before the dataset is loaded or anything is written:
the partitioner's name and options, ``num_parts``, an existing output directory, the
estimated peak memory against what the machine has available, and (typed datasets) edge data
that is not the same columns in every edge type.

A typed dataset (:class:`~dglx_dist.data.hetero.HeteroDataset`, in memory or a directory) is
read as the :class:`~dglx_dist.partition.base.TypedGraph` partitioners plan on
(:func:`typed_graph`). Its edge data is one homogeneous column per name, in edge order: an
edge type may lack a name (its rows hold zeros, and ``GraphTypes.edge_data`` records which
edge types have each name), but the types that have it must agree on its dtype and row shape.
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from dglx_dist.data.atomic import check_target
from dglx_dist.data.edge_data import edge_data_columns, edge_data_spec
from dglx_dist.data.format import DatasetMeta, GraphDataset, read_dataset, read_meta
from dglx_dist.data.hetero import Etype, HeteroDataset, etype_key
from dglx_dist.data.hetero_format import (HeteroMeta, edge_file, is_hetero,
                                          read_hetero_dataset, read_hetero_meta)
from dglx_dist.errors import DatasetFormatError, PartitionError
from dglx_dist.memory import PeakRSS, check_memory
from dglx_dist.partition.base import (PARTITIONERS, Partitioner, PartitionPlan, TypedGraph,
                                      TypedMeta, graph_types, type_feature_slices)
from dglx_dist.partition.book import FeatureSlices
from dglx_dist.partition.io import PARTITION_DIR, write_partitions
from dglx_dist.partition.layout import Layout, Partition
from dglx_dist.partition.quality import PartTally, QualityReport
from dglx_dist.partition.types import GraphTypes

__all__ = ["partition_dataset", "check_memory", "open_typed", "typed_graph"]

log = logging.getLogger(__name__)


def partition_dataset(data: str | os.PathLike | GraphDataset | HeteroDataset,
                      out: str | os.PathLike, method: str = "metis", num_parts: int = 2,
                      options: dict[str, Any] | None = None, *, overwrite: bool = False,
                      progress: bool = False, memory_limit: int | None = None,
                      nonfinite: str = "reject") -> QualityReport:
    """Partitions a dataset into ``num_parts`` parts and writes a partition directory.

    Args:
        data: a dataset directory (homogeneous or typed) or an in-memory dataset. A typed
            one is partitioned over its homogeneous view (:func:`typed_graph`).
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
        report = _write(Layout(ds, plan, owner), _header(partitioner, method, ds, plan), out,
                        overwrite, inputs, bar.update)
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
    slices, types = plan.feature_slices or FeatureSlices([0, ds.feat_dim]), graph_types(ds)
    by_type = {} if types.untyped else {"types": types.to_json()}
    if not types.untyped and plan.feature_slices is not None:
        by_type["type_feature_slices"] = {t: s.to_json() for t, s in type_feature_slices(
            types, plan.book.num_parts).items()}
    return {
        "partitioner": {"name": method, "options": partitioner.options()},
        "num_parts": plan.book.num_parts, "num_nodes": ds.num_nodes, "num_edges": ds.num_edges,
        "feat_dim": ds.feat_dim, "num_classes": ds.num_classes,
        "relabeled": plan.orig_ids is not None, "node_book": plan.book.to_json(),
        "feature_layout": "rows" if plan.feature_slices is None else "columns",
        "feature_slices": slices.to_json(), "dataset": ds.extra,
        **({"edge_data": edge_data_spec(ds.edata)} if ds.edata else {}), **by_type}


# -- a typed dataset, read as the homogeneous view partitioners plan on ---------------------
def _graph_types(ntypes: Mapping[str, tuple[int, int, bool]],
                 etypes: Mapping[Etype, tuple[int, Sequence[str]]],
                 category: str | None) -> GraphTypes:
    """The types of a typed dataset, in DGL's (sorted) order: ``ntypes`` {name: (num_nodes,
    feat_dim, labeled)}, ``etypes`` {canonical edge type: (num_edges, edge-data names)}."""
    names, ets = sorted(ntypes), sorted(etypes)
    offsets = [np.concatenate([[0], np.cumsum(c, dtype=np.int64)])
               for c in ([ntypes[t][0] for t in names], [etypes[e][0] for e in ets])]
    edge_data = {}
    for i, et in enumerate(ets):
        for name in etypes[et][1]:
            edge_data.setdefault(name, []).append(i)
    return GraphTypes(tuple(names), offsets[0], tuple(ets), offsets[1],
                      {t: ntypes[t][1] for t in names},
                      tuple(t for t in names if ntypes[t][2]), category,
                      {k: tuple(v) for k, v in sorted(edge_data.items())})


def _types_of(ds: HeteroDataset) -> GraphTypes:
    return _graph_types({t: (n.num_nodes, n.feat_dim, n.labeled) for t, n in ds.nodes.items()},
                        {et: (e.num_edges, list(e.edata)) for et, e in ds.edges.items()},
                        ds.category)


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


def open_typed(data: str | os.PathLike | HeteroDataset,
               nonfinite: str) -> tuple[TypedMeta, Callable[[], TypedGraph]]:
    """A typed dataset (directory or in memory): its sizes, read and checked without loading
    it (edge data that differs between edge types is refused here), and what loads its
    homogeneous view."""
    if isinstance(data, HeteroDataset):
        _check_edge_data({et: {k: f"{v.dtype}{list(v.shape[1:])}" for k, v in e.edata.items()}
                          for et, e in data.edges.items()}, "the dataset")
        return _typed_meta(_types_of(data), data), lambda: typed_graph(data)
    path, meta = Path(data), read_hetero_meta(data)
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
    types = _graph_types({t: (s["num_nodes"], s["feat_dim"], s["labeled"])
                          for t, s in meta.ntypes.items()},
                         {et: (n, list(specs[et])) for et, n in zip(specs, meta.num_edges)},
                         meta.category)
    return _typed_meta(types, meta), lambda: typed_graph(read_hetero_dataset(path, nonfinite))


def _typed_meta(types: GraphTypes, source: HeteroDataset | HeteroMeta) -> TypedMeta:
    floats = sum(int(n) * types.feat_dims[t] for t, n in zip(types.ntypes,
                                                           np.diff(types.ntype_offsets)))
    return TypedMeta(types.num_nodes, types.num_edges, -(-floats // max(types.num_nodes, 1)),
                     source.num_classes, dict(source.extra), types=types)


def typed_graph(ds: HeteroDataset) -> TypedGraph:
    """The homogeneous view of ``ds`` (edges and node data in original homogeneous ids; each
    edge-data name one column over every edge, zeros for edge types without it)."""
    src, dst = ds.homogeneous_edges()
    nodes, edges = list(ds.nodes.values()), list(ds.edges.values())
    label = np.concatenate([np.full(n.num_nodes, -1, np.int64) if n.label is None
                            else np.asarray(n.label, np.int64) for n in nodes])
    masks = {m: np.concatenate([np.asarray(n.masks()[m], bool) for n in nodes])
             for m in ("train", "val", "test")}
    first = {}
    for e in edges:
        for name, values in e.edata.items():
            first.setdefault(name, values)
    edata = {name: np.concatenate([e.edata[name] if name in e.edata else
                                   np.zeros((e.num_edges, *v.shape[1:]), v.dtype)
                                   for e in edges]) for name, v in first.items()}
    return TypedGraph(src.astype(np.int64), dst.astype(np.int64),
                      np.zeros((label.size, 0), np.float32), label, masks["train"],
                      masks["val"], masks["test"], ds.num_classes, dict(ds.extra), edata,
                      types=_types_of(ds),
                      type_feat={i: np.asarray(n.feat, np.float32) for i, n in enumerate(nodes)
                                 if n.feat is not None})
