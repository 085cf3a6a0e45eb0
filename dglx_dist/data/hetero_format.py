"""The typed dataset directory: a :class:`~dglx_dist.data.hetero.HeteroDataset` on disk.

Layout::

    meta.json                 format "dglx-hetero", version 1; ntypes {name: {num_nodes,
                              feat_dim (0: none), labeled}}; canonical_etypes [[src, rel, dst],
                              ...] and num_edges [...] in the same order; num_classes;
                              category (the predicted node type, or null); free-form provenance
    nodes/NTYPE.parquet       one row per node of the type (row i = per-type id i): feat
                              fixed_size_list<float32>[feat_dim] when feat_dim > 0; label int64
                              and train, val, test bool when labeled. No file for a type that
                              has neither.
    edges/I_REL.parquet       the I-th canonical edge type (I from 0, as listed in meta.json):
                              src, dst int64 per-type ids; any other column is edge data
                              (:mod:`~dglx_dist.data.edge_data`)

Reading checks every file against meta.json (fields, types, row counts, id ranges, classes,
widths) and raises :class:`~dglx_dist.errors.DatasetFormatError` naming the file and field.
Writing is atomic, as for homogeneous datasets.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dglx_dist.data.atomic import atomic_directory
from dglx_dist.data.checked import (WRITE_OPTIONS, check_finite, check_plausible, check_range,
                                   column_numpy, read_checked, read_feat, read_json_object)
from dglx_dist.data.edge_data import edge_data_arrays, edge_data_columns
from dglx_dist.data.format import DATASET_DIR, META_FILE, edge_batch
from dglx_dist.data.hetero import (MASKS, EdgeTable, Etype, HeteroDataset, NodeTable,
                                   check_type_name)
from dglx_dist.errors import DatasetFormatError

__all__ = ["HeteroMeta", "is_hetero", "read_hetero_meta", "read_hetero_dataset",
           "write_hetero_dataset", "FORMAT"]

FORMAT, VERSION = "dglx-hetero", 1
_KEYS = ("format", "version", "ntypes", "canonical_etypes", "num_edges", "num_classes",
         "category")


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
        out = []
        for i, et in enumerate(etypes):
            if not (isinstance(et, list) and len(et) == 3 and et[0] in self.ntypes and
                    et[2] in self.ntypes):
                raise DatasetFormatError(f"{file}: canonical_etypes[{i}] = {et!r}; expected "
                                         f"[src type, relation, dst type] over the node types "
                                         f"{sorted(self.ntypes)}")
            check_type_name(et[1], f"{file}: relation")
            out.append(tuple(et))
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


def _read_nodes(path: Path, meta: HeteroMeta, name: str, nonfinite: str) -> NodeTable:
    spec, err = meta.ntypes[name], DatasetFormatError
    n, width, labeled = spec["num_nodes"], spec["feat_dim"], spec["labeled"]
    if not width and not labeled:
        return NodeTable(n)
    file = path / node_file(name)
    fields = ({"feat": "float list"} if width else {}) | \
        ({"label": "integer", **{m: "bool" for m in MASKS}} if labeled else {})
    table = read_checked(file, fields, n, err, read=tuple(k for k in fields if k != "feat"))
    feat = read_feat(file, n, width, err) if width else None
    if feat is not None:
        check_finite(feat, file, nonfinite, err)
    if not labeled:
        return NodeTable(n, feat)
    label = column_numpy(table, "label", file, err)
    check_range(label, 0, meta.num_classes, file, "label", "class", err)
    masks = {m: column_numpy(table, m, file, err) for m in MASKS}
    return NodeTable(n, feat, label, **masks)


def _read_edges(path: Path, meta: HeteroMeta, i: int) -> EdgeTable:
    etype, err = meta.etypes[i], DatasetFormatError
    file = path / edge_file(i, etype)
    table = read_checked(file, {"src": "integer", "dst": "integer"}, meta.num_edges[i], err,
                         all_columns=True)
    src, dst = (column_numpy(table, c, file, err) for c in ("src", "dst"))
    for end, ntype, ids in (("src", etype[0], src), ("dst", etype[2], dst)):
        check_range(ids, 0, meta.ntypes[ntype]["num_nodes"], file, end,
                    f"{ntype!r} node id", err)
    edata = edge_data_arrays(table, edge_data_columns(table.schema, file, err), file, err)
    return EdgeTable(src, dst, edata)


def read_hetero_dataset(path: str | os.PathLike, nonfinite: str = "reject") -> HeteroDataset:
    """Reads and validates a typed dataset directory.

    Raises:
        DatasetFormatError: a missing file, wrong schema, count or id (the message says which).
    """
    path = Path(path)
    meta = read_hetero_meta(path)
    nodes = {name: _read_nodes(path, meta, name, nonfinite) for name in meta.ntypes}
    edges = {et: _read_edges(path, meta, i) for i, et in enumerate(meta.etypes)}
    return HeteroDataset(nodes, edges, meta.num_classes, meta.category, meta.extra)


def hetero_meta(ds: HeteroDataset) -> dict[str, Any]:
    """meta.json's content for ``ds``."""
    ntypes = {name: {"num_nodes": n.num_nodes, "feat_dim": n.feat_dim, "labeled": n.labeled}
              for name, n in ds.nodes.items()}
    return {"format": FORMAT, "version": VERSION, "ntypes": ntypes,
            "canonical_etypes": [list(e) for e in ds.edges],
            "num_edges": [e.num_edges for e in ds.edges.values()],
            "num_classes": ds.num_classes, "category": ds.category, **ds.extra}


def _node_table(n: NodeTable) -> pa.Table:
    columns: dict[str, pa.Array] = {}
    if n.feat is not None:
        feat = np.ascontiguousarray(n.feat, dtype=np.float32)
        columns["feat"] = pa.FixedSizeListArray.from_arrays(pa.array(feat.reshape(-1)),
                                                            feat.shape[1])
    if n.label is not None:
        columns["label"] = pa.array(np.asarray(n.label, np.int64))
        columns.update({m: pa.array(np.asarray(v, bool)) for m, v in n.masks().items()})
    return pa.table(columns)


def write_hetero_dataset(ds: HeteroDataset, path: str | os.PathLike,
                         overwrite: bool = False) -> Path:
    """Writes ``ds`` as a typed dataset directory, atomically."""
    with atomic_directory(path, overwrite, kind=DATASET_DIR) as tmp:
        (tmp / "nodes").mkdir()
        (tmp / "edges").mkdir()
        for name, n in ds.nodes.items():
            if n.feat is not None or n.labeled:
                pq.write_table(_node_table(n), tmp / node_file(name), **WRITE_OPTIONS)
        for i, (etype, e) in enumerate(ds.edges.items()):
            table = pa.Table.from_batches([edge_batch(e.src, e.dst, e.edata)])
            pq.write_table(table, tmp / edge_file(i, etype), **WRITE_OPTIONS)
        (tmp / META_FILE).write_text(json.dumps(hetero_meta(ds), indent=2))
    return Path(path)
