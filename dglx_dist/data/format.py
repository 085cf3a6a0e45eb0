"""The dataset directory formats, read and written with pyarrow (nothing is pickled).

docs/dataset_format.md is the format: a graph without types is ``edges.parquet``,
``nodes.parquet`` and ``meta.json``; a typed one (``meta.json`` format "dglx-hetero") has
``nodes/NTYPE.parquet`` and ``edges/I_REL.parquet``. :func:`read_dataset` reads either
(:func:`is_hetero` tells them apart) and validates everything before returning, raising
:class:`~dglx_dist.errors.DatasetFormatError` naming the file, the field, the value found and
the value expected. :func:`write_dataset` writes either, atomically.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dglx_dist.data.atomic import DirKind, atomic_directory
from dglx_dist.data.checked import (WRITE_OPTIONS, check_finite, check_plausible, check_range,
                                   column_numpy, read_checked, read_feat, read_json_object,
                                   to_arrow)
from dglx_dist.data.dataset import (MASKS, META_SIZES, DatasetMeta, EdgeTable, GraphDataset,
                                    NodeTable, check_etype, check_type_name)
from dglx_dist.data.edge_data import edge_data_arrays, edge_data_columns
from dglx_dist.errors import DatasetFormatError
from dglx_dist.graphcore.types import Etype

__all__ = ["HELDOUT_ARRAYS", "read_dataset", "read_meta", "write_dataset", "is_hetero",
           "read_hetero_meta", "HeteroMeta", "hetero_meta", "write_edges", "write_nodes",
           "EDGE_SCHEMA", "DATASET_DIR", "FORMAT"]

EDGES_FILE, NODES_FILE, META_FILE = "edges.parquet", "nodes.parquet", "meta.json"
EDGE_SCHEMA = pa.schema([("src", pa.int64()), ("dst", pa.int64())])
DATASET_DIR = DirKind("dataset", "a dglx dataset directory")
HELDOUT_ARRAYS = ("val_u", "val_v", "test_u", "test_v")
"""The held-out pairs of a link-prediction dataset, as arrays beside its tables (``NAME.npy``):
its split made once by ``dglx train --task link``, or given with the data (``dglx data
import ogbl-*``)."""
FORMAT, VERSION = "dglx-hetero", 1  # the typed directory's meta.json
_KEYS = ("format", "version", "ntypes", "canonical_etypes", "num_edges", "num_classes",
         "category")
_LABELED = {"label": "integer", **{m: "bool" for m in MASKS}}  # a nodes table's, in order
_FEAT = {"feat": "float list"}


def node_schema(feat_dim: int) -> pa.Schema:
    """Arrow schema of nodes.parquet for ``feat_dim`` features."""
    return pa.schema([("label", pa.int64()), ("train", pa.bool_()), ("val", pa.bool_()),
                      ("test", pa.bool_()), ("feat", pa.list_(pa.float32(), feat_dim))])


def node_batch(n: NodeTable) -> pa.RecordBatch:
    """Rows of a nodes file: ``label`` and the masks where the type is labeled, then ``feat``
    (a fixed-size list, no copy) where it has features."""
    columns = {}
    if n.label is not None:
        columns["label"] = to_arrow(np.asarray(n.label, np.int64))
        columns.update({m: to_arrow(np.asarray(v, bool)) for m, v in n.masks().items()})
    if n.feat is not None:
        columns["feat"] = to_arrow(np.asarray(n.feat, np.float32))
    return pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns))


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
                                 "one (read_dataset reads either)")
    values = {key: _count(raw, key, str(file)) for key in META_SIZES}
    check_plausible(values, file, DatasetFormatError)
    if values["num_classes"] < 1 or values["feat_dim"] < 1:
        raise DatasetFormatError(f"{file}: num_classes and feat_dim must be >= 1, got "
                                 f"{values['num_classes']} and {values['feat_dim']}")
    extra = {k: v for k, v in raw.items() if k not in META_SIZES}
    return DatasetMeta(extra=extra, **values)


def read_dataset(path: str | os.PathLike, nonfinite: str = "reject") -> GraphDataset:
    """Reads and validates a dataset directory, with types or without.

    Args:
        path: the directory.
        nonfinite: NaN / Inf features are an error ("reject") or a logged warning ("warn").

    Raises:
        DatasetFormatError: a missing file, wrong schema, count or id (the message says which).
    """
    path = Path(path)
    if is_hetero(path):
        meta = read_hetero_meta(path)
        nodes = {t: _read_nodes(path / node_file(t), s["num_nodes"],
                                ({} if not s["feat_dim"] else _FEAT) |
                                (_LABELED if s["labeled"] else {}),
                                s["feat_dim"], meta.num_classes, nonfinite)
                 for t, s in meta.ntypes.items()}
        edges = {et: _read_edges(path / edge_file(i, et), meta.num_edges[i],
                                 *((meta.ntypes[t]["num_nodes"], f"{t!r} node id")
                                   for t in (et[0], et[2])), nonfinite)
                 for i, et in enumerate(meta.etypes)}
        return GraphDataset.typed(nodes, edges, meta.num_classes, meta.category, meta.extra)
    return _read_one_type(path, nonfinite)


def _read_one_type(path: Path, nonfinite: str) -> GraphDataset:
    meta = read_meta(path)
    n = meta.num_nodes
    e = _read_edges(path / EDGES_FILE, meta.num_edges, (n, "node id"), (n, "node id"),
                    nonfinite)
    node = _read_nodes(path / NODES_FILE, n, _LABELED | _FEAT, meta.feat_dim, meta.num_classes,
                       nonfinite)
    return GraphDataset(e.src, e.dst, node.feat, node.label, node.train, node.val, node.test,
                        meta.num_classes, meta.extra, e.edata)


def _read_nodes(file: Path, n: int, fields: dict[str, str], width: int, num_classes: int,
                nonfinite: str) -> NodeTable:
    """A node table from ``file``, which must hold ``fields`` (in its format's order)."""
    if not fields:
        return NodeTable(n)
    err, label, masks, feat = DatasetFormatError, None, {}, None
    table = read_checked(file, fields, n, err, read=tuple(k for k in fields if k != "feat"))
    if "label" in fields:
        label = column_numpy(table, "label", file, err)
        check_range(label, 0, num_classes, file, "label", "class", err)
        masks = {m: column_numpy(table, m, file, err) for m in MASKS}
    if width:
        feat = read_feat(file, n, width, err)
        check_finite(feat, file, nonfinite, err)
    return NodeTable(n, feat, label, **masks)


def _read_edges(file: Path, count: int, src: tuple[int, str], dst: tuple[int, str],
                nonfinite: str) -> EdgeTable:
    """An edge table from ``file``: ``src`` / ``dst`` (node count, what the ids are) bound its
    ends; float edge data is checked as ``nonfinite`` says."""
    err = DatasetFormatError
    table = read_checked(file, {"src": "integer", "dst": "integer"}, count, err,
                         all_columns=True)
    edata = edge_data_arrays(table, edge_data_columns(table.schema, file, err), file, err)
    ends = {end: column_numpy(table, end, file, err) for end in ("src", "dst")}
    for (end, ids), (n, what) in zip(ends.items(), (src, dst)):
        check_range(ids, 0, n, file, end, what, err)
    for name, values in edata.items():
        if values.dtype.kind == "f":
            check_finite(values.reshape(values.shape[0], -1), file, nonfinite, err, field=name)
    return EdgeTable(ends["src"], ends["dst"], edata)


def write_dataset(ds: GraphDataset, path: str | os.PathLike, overwrite: bool = False,
                  rows_per_group: int = 65536,
                  arrays: dict[str, np.ndarray] | None = None) -> Path:
    """Writes ``ds`` as a dataset directory (typed when it has types), atomically (temp dir +
    rename); ``overwrite`` replaces only a dataset directory. ``arrays``: more of what belongs
    with the graph (the link task's held-out pairs), each written beside the tables as
    ``NAME.npy``; ``rows_per_group``: node rows per row group of a graph without types."""
    with atomic_directory(path, overwrite, kind=DATASET_DIR) as tmp:
        for name, value in (arrays or {}).items():
            np.save(tmp / f"{name}.npy", np.ascontiguousarray(value), allow_pickle=False)
        if ds.untyped:
            _write_one_type(ds, tmp, rows_per_group)
        else:
            _write_typed(ds, tmp)
    return Path(path)


def _write_one_type(ds: GraphDataset, tmp: Path, rows_per_group: int) -> None:
    write_edges(tmp / EDGES_FILE, ds.src, ds.dst, ds.edata)
    write_nodes(tmp, ds.meta, rows_per_group, lambda lo, hi: NodeTable(
        hi - lo, ds.feat[lo:hi], ds.label[lo:hi], ds.train[lo:hi], ds.val[lo:hi],
        ds.test[lo:hi]))


def write_edges(file: Path, src: np.ndarray, dst: np.ndarray,
                edata: dict[str, np.ndarray]) -> None:
    """An edges file (``edata``: more columns, one row per edge)."""
    arrays = [to_arrow(np.asarray(src, np.int64)), to_arrow(np.asarray(dst, np.int64)),
              *(to_arrow(a) for a in edata.values())]
    table = pa.table(arrays, names=[*EDGE_SCHEMA.names, *edata])
    pq.write_table(table, file, **WRITE_OPTIONS)


def write_nodes(tmp: Path, meta: DatasetMeta, rows_per_group: int,
                rows: Callable[[int, int], NodeTable],
                done: Callable[[int], Any] = lambda count: None) -> None:
    """nodes.parquet of a graph without types, ``rows(lo, hi)`` (nodes lo..hi-1) a row group
    at a time (``done(rows)`` after each), and meta.json."""
    with pq.ParquetWriter(tmp / NODES_FILE, node_schema(meta.feat_dim),
                          **WRITE_OPTIONS) as writer:
        for lo in range(0, max(meta.num_nodes, 1), rows_per_group):
            hi = min(lo + rows_per_group, meta.num_nodes)
            writer.write_batch(node_batch(rows(lo, hi)))
            done(hi - lo)
    (tmp / META_FILE).write_text(json.dumps(meta.to_json(), indent=2))


# -- the typed directory ---------------------------------------------------------------------
def node_file(ntype: str) -> str:
    return f"nodes/{ntype}.parquet"


def edge_file(index: int, etype: Etype) -> str:
    return f"edges/{index}_{etype[1]}.parquet"


class HeteroMeta:
    """meta.json of a typed dataset, checked: sizes per type, before any table is read."""

    def __init__(self, raw: dict[str, Any], file: Path):
        self.file = file
        err = DatasetFormatError
        if raw.get("format") != FORMAT or raw.get("version") != VERSION:
            raise err(f"{file}: format {raw.get('format')!r} version {raw.get('version')!r}; "
                      f"expected {FORMAT!r} version {VERSION}")
        ntypes = raw.get("ntypes")
        if not isinstance(ntypes, dict) or not ntypes:
            raise err(f"{file}: field 'ntypes' = {ntypes!r}; expected {{name: {{num_nodes, "
                      "feat_dim, labeled}}}")
        self.ntypes: dict[str, dict[str, Any]] = {}
        for name in sorted(ntypes):
            spec = ntypes[name]
            check_type_name(name, f"{file}: node type")
            self.ntypes[name] = {k: _count(spec, k, f"{file}: ntypes[{name!r}]")
                                 for k in ("num_nodes", "feat_dim")}
            self.ntypes[name]["labeled"] = bool(spec.get("labeled", False))
        self.etypes, self.num_edges = self._etypes(raw, file)
        self.num_classes = _count(raw, "num_classes", str(file))
        self.category = raw.get("category")
        if self.category is not None and self.category not in self.ntypes:
            raise err(f"{file}: category {self.category!r} is not a node type; expected one "
                      f"of {sorted(self.ntypes)}")
        check_plausible({"num_nodes": sum(t["num_nodes"] for t in self.ntypes.values()),
                         "num_edges": sum(self.num_edges), "num_classes": self.num_classes},
                        file, err)
        self.extra = {k: v for k, v in raw.items() if k not in _KEYS}

    def _etypes(self, raw: dict[str, Any], file: Path) -> tuple[list[Etype], list[int]]:
        etypes, counts = raw.get("canonical_etypes"), raw.get("num_edges")
        if not isinstance(etypes, list) or not isinstance(counts, list) or \
                len(etypes) != len(counts):
            raise DatasetFormatError(f"{file}: 'canonical_etypes' and 'num_edges' must be lists "
                                     f"of one length; got {etypes!r} and {counts!r}")
        out = [check_etype(et, self.ntypes, f"{file}: canonical_etypes[{i}]")
               for i, et in enumerate(etypes)]
        return out, [_count({"num_edges": c}, "num_edges", f"{file}: num_edges") for c in counts]


def _count(d: Any, key: str, where: str) -> int:
    v = d.get(key) if isinstance(d, dict) else None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise DatasetFormatError(f"{where}: field {key!r} = {v!r}; expected an integer >= 0")
    return v


def is_hetero(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a typed dataset (its meta.json names node types)."""
    file = Path(path) / META_FILE
    try:
        return file.is_file() and "ntypes" in json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        return False


def read_hetero_meta(path: str | os.PathLike) -> HeteroMeta:
    file = Path(path) / META_FILE
    return HeteroMeta(read_json_object(file, DatasetFormatError), file)


def hetero_meta(ds: GraphDataset) -> dict[str, Any]:
    """meta.json's content for ``ds``."""
    ntypes = {name: {"num_nodes": n.num_nodes, "feat_dim": n.feat_dim, "labeled": n.labeled}
              for name, n in ds.nodes.items()}
    return {"format": FORMAT, "version": VERSION, "ntypes": ntypes,
            "canonical_etypes": [list(e) for e in ds.edges],
            "num_edges": [e.num_edges for e in ds.edges.values()],
            "num_classes": ds.num_classes, "category": ds.category, **ds.extra}


def _write_typed(ds: GraphDataset, tmp: Path) -> None:
    (tmp / "nodes").mkdir()
    (tmp / "edges").mkdir()
    for name, n in ds.nodes.items():
        if n.feat is not None or n.labeled:
            pq.write_table(pa.Table.from_batches([node_batch(n)]), tmp / node_file(name),
                           **WRITE_OPTIONS)
    for i, (etype, e) in enumerate(ds.edges.items()):
        write_edges(tmp / edge_file(i, etype), e.src, e.dst, e.edata)
    (tmp / META_FILE).write_text(json.dumps(hetero_meta(ds), indent=2))
