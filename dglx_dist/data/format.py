"""The dataset directory format, read and written with pyarrow (nothing is pickled).

A dataset directory holds three files::

    edges.parquet   src int64, dst int64           one row per directed edge (undirected graphs
                                                    list both directions); any other column
                                                    is edge data (:mod:`~dglx_dist.data.edge_data`)
    nodes.parquet   label int64, train bool, val bool, test bool,
                    feat fixed_size_list<float32>[F]   one row per node, row i is node i
    meta.json       num_nodes, num_edges, feat_dim, num_classes (+ free-form provenance)

Reading validates everything before returning: required files and fields, column types, row
counts against meta.json, node ids in [0, num_nodes), labels in [0, num_classes), the feature
width. Every problem raises :class:`~dglx_dist.errors.DatasetFormatError` naming the file, the
field, the value found and the value expected.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dglx_dist.data.atomic import DirKind, atomic_directory
from dglx_dist.data.checked import (WRITE_OPTIONS, check_finite, check_plausible, check_range,
                                   column_numpy, read_checked, read_feat, read_json_object)
from dglx_dist.data.edge_data import edge_data_arrays, edge_data_columns, to_arrow
from dglx_dist.errors import DatasetFormatError

__all__ = ["GraphDataset", "DatasetMeta", "read_dataset", "read_meta", "write_dataset",
           "node_schema", "node_batch", "edge_batch", "EDGE_SCHEMA", "DATASET_DIR"]

EDGES_FILE, NODES_FILE, META_FILE = "edges.parquet", "nodes.parquet", "meta.json"
EDGE_SCHEMA = pa.schema([("src", pa.int64()), ("dst", pa.int64())])
_META_INTS = ("num_nodes", "num_edges", "feat_dim", "num_classes")
DATASET_DIR = DirKind("dataset", "a dglx dataset directory")
_MASKS = ("train", "val", "test")


@dataclasses.dataclass(frozen=True)
class DatasetMeta:
    """The sizes from meta.json; ``extra`` keeps the free-form provenance fields."""

    num_nodes: int
    num_edges: int
    feat_dim: int
    num_classes: int
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in _META_INTS}
        out.update({k: v for k, v in self.extra.items() if k not in out})
        return out


@dataclasses.dataclass(frozen=True, eq=False)
class GraphDataset:
    """A node-classification graph held in numpy arrays (node i is row i; ``edata`` holds
    edge data by name, row j for edge j)."""

    src: np.ndarray
    dst: np.ndarray
    feat: np.ndarray
    label: np.ndarray
    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    num_classes: int
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    edata: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return int(self.label.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.src.shape[0])

    @property
    def feat_dim(self) -> int:
        return int(self.feat.shape[1])

    @property
    def meta(self) -> DatasetMeta:
        return DatasetMeta(self.num_nodes, self.num_edges, self.feat_dim, self.num_classes,
                           dict(self.extra))


def node_schema(feat_dim: int) -> pa.Schema:
    """Arrow schema of nodes.parquet for ``feat_dim`` features."""
    return pa.schema([("label", pa.int64()), ("train", pa.bool_()), ("val", pa.bool_()),
                      ("test", pa.bool_()), ("feat", pa.list_(pa.float32(), feat_dim))])


def node_batch(label: np.ndarray, train: np.ndarray, val: np.ndarray, test: np.ndarray,
               feat: np.ndarray) -> pa.RecordBatch:
    """A record batch of nodes.parquet rows (features as a fixed-size list, no copy)."""
    feat = np.ascontiguousarray(feat, dtype=np.float32)
    flist = pa.FixedSizeListArray.from_arrays(pa.array(feat.reshape(-1)), feat.shape[1])
    return pa.RecordBatch.from_arrays(
        [pa.array(np.asarray(label, np.int64)), pa.array(np.asarray(train, bool)),
         pa.array(np.asarray(val, bool)), pa.array(np.asarray(test, bool)), flist],
        schema=node_schema(feat.shape[1]))


def edge_batch(src: np.ndarray, dst: np.ndarray,
               edata: dict[str, np.ndarray] | None = None) -> pa.RecordBatch:
    """A record batch of edges.parquet rows (``edata``: extra columns, one row per edge)."""
    edata = edata or {}
    arrays = [pa.array(np.asarray(src, np.int64)), pa.array(np.asarray(dst, np.int64)),
              *(to_arrow(a) for a in edata.values())]
    return pa.RecordBatch.from_arrays(arrays, names=[*EDGE_SCHEMA.names, *edata])


def read_meta(path: str | os.PathLike) -> DatasetMeta:
    """Reads and checks meta.json only (cheap: used to size work before loading)."""
    file = Path(path) / META_FILE
    if not file.is_file():
        raise DatasetFormatError(f"{file}: missing; a dataset directory needs {META_FILE}, "
                                 f"{EDGES_FILE} and {NODES_FILE}")
    raw = read_json_object(file, DatasetFormatError)
    if "ntypes" in raw:
        raise DatasetFormatError(f"{path} holds a heterogeneous dataset (node types "
                                 f"{sorted(raw['ntypes'])}); this step takes a homogeneous "
                                 "one (read_hetero_dataset reads it)")
    values = {}
    for key in _META_INTS:
        v = raw.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise DatasetFormatError(f"{file}: field {key!r} = {v!r}; expected an integer >= 0")
        values[key] = v
    check_plausible(values, file, DatasetFormatError)
    if values["num_classes"] < 1 or values["feat_dim"] < 1:
        raise DatasetFormatError(f"{file}: num_classes and feat_dim must be >= 1, got "
                                 f"{values['num_classes']} and {values['feat_dim']}")
    extra = {k: v for k, v in raw.items() if k not in _META_INTS}
    return DatasetMeta(extra=extra, **values)


def read_dataset(path: str | os.PathLike, nonfinite: str = "reject") -> GraphDataset:
    """Reads and validates a dataset directory.

    Args:
        path: the directory.
        nonfinite: NaN / Inf features are an error ("reject") or a logged warning ("warn").

    Raises:
        DatasetFormatError: a missing file, wrong schema, count or id (the message says which).
    """
    path = Path(path)
    meta = read_meta(path)
    err = DatasetFormatError
    ef, nf = path / EDGES_FILE, path / NODES_FILE
    edges = read_checked(ef, {"src": "integer", "dst": "integer"}, meta.num_edges, err,
                         all_columns=True)
    edata = edge_data_arrays(edges, edge_data_columns(edges.schema, ef, err), ef, err)
    nodes = read_checked(nf, {"label": "integer", "train": "bool", "val": "bool",
                              "test": "bool", "feat": "float list"}, meta.num_nodes, err,
                         read=("label", "train", "val", "test"))
    src, dst = (column_numpy(edges, c, ef, err) for c in ("src", "dst"))
    for name, ids in (("src", src), ("dst", dst)):
        check_range(ids, 0, meta.num_nodes, ef, name, "node id", err)
    label = column_numpy(nodes, "label", nf, err)
    check_range(label, 0, meta.num_classes, nf, "label", "class", err)
    masks = {m: column_numpy(nodes, m, nf, err) for m in _MASKS}
    feat = read_feat(nf, meta.num_nodes, meta.feat_dim, err)
    check_finite(feat, nf, nonfinite, err)
    for name, values in edata.items():
        if values.dtype.kind == "f":
            check_finite(values.reshape(values.shape[0], -1), ef, nonfinite, err, field=name)
    return GraphDataset(src, dst, feat, label, masks["train"], masks["val"], masks["test"],
                        meta.num_classes, meta.extra, edata)


def write_dataset(ds: GraphDataset, path: str | os.PathLike, overwrite: bool = False,
                  rows_per_group: int = 65536,
                  arrays: dict[str, np.ndarray] | None = None) -> Path:
    """Writes ``ds`` as a dataset directory, atomically (temp dir + rename); ``overwrite``
    replaces only a dataset directory. ``arrays``: more of what belongs with the graph (the
    link task's held-out pairs), each written beside the tables as ``NAME.npy``."""
    with atomic_directory(path, overwrite, kind=DATASET_DIR) as tmp:
        for name, value in (arrays or {}).items():
            np.save(tmp / f"{name}.npy", np.ascontiguousarray(value), allow_pickle=False)
        edges = pa.Table.from_batches([edge_batch(ds.src, ds.dst, ds.edata)])
        pq.write_table(edges, tmp / EDGES_FILE, **WRITE_OPTIONS)
        with pq.ParquetWriter(tmp / NODES_FILE, node_schema(ds.feat_dim),
                              **WRITE_OPTIONS) as writer:
            for lo in range(0, max(ds.num_nodes, 1), rows_per_group):
                hi = min(lo + rows_per_group, ds.num_nodes)
                writer.write_batch(node_batch(ds.label[lo:hi], ds.train[lo:hi], ds.val[lo:hi],
                                              ds.test[lo:hi], ds.feat[lo:hi]))
        (tmp / META_FILE).write_text(json.dumps(ds.meta.to_json(), indent=2))
    return Path(path)
