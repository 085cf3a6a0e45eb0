"""Loading a partition directory: the book for everyone, one part's arrays for its owner.

``PartitionDir(path)`` reads only the manifest. ``load_part(p)`` reads part ``p``'s files (and
no other part's), checking sizes and checksums (:meth:`PartitionDir.verify_part`) and every id
against the part's ranges before returning. Edge data, node data other than labels and masks, and a typed partitioning's
features per node type are read apart (``load_edge_data(p)``, ``load_node_data(p)``,
``load_type_feat(p, ntype)``); docs/partition_format.md says what each holds and how a typed
partitioning's ids and rows are laid out.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import random
from pathlib import Path
from typing import Any

import numpy as np

from dglx_dist.data.checked import check_range, column_numpy, read_checked, read_feat
from dglx_dist.data.edge_data import checked_spec, edge_data_arrays
from dglx_dist.errors import IdOutOfRangeError, InvalidValueError, PartitionFormatError
from dglx_dist.partition import checksums
from dglx_dist.partition.book import FeatureSlices, NodeBook, RangeBook, book_from_json
from dglx_dist.partition.dgl_config import find_dgl_config
from dglx_dist.partition.io import (MANIFEST, NODE_DATA_PREFIX, keep_stamp_recorded,
                                    part_file_name, read_manifest, record_verified,
                                    still_verified, type_feat_table)
from dglx_dist.partition.layout import Partition
from dglx_dist.partition.types import GraphTypes

__all__ = ["PartitionDir", "Partition"]

_ERR = PartitionFormatError
log = logging.getLogger(__name__)


class PartitionDir:
    """A partition directory on disk: manifest, node book, feature slices, lazy part loading."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not (self.path / MANIFEST).is_file():
            dgl_json = find_dgl_config(self.path)
            if dgl_json is not None:
                raise _ERR(f"{self.path}: this is a DGL partition_graph output, not a dglx "
                           f"partition directory; import it with `dglx partition --from-dgl "
                           f"{dgl_json} OUT` (or dglx_dist.partition.import_dgl_partitions) "
                           f"and open OUT")
        self.manifest: dict[str, Any] = read_manifest(self.path)
        m = self.manifest
        try:
            self.book: NodeBook = book_from_json(m["node_book"])
            self.feature_slices = FeatureSlices(m["feature_slices"])
        except ValueError as exc:
            raise _ERR(f"{self.path / 'partition.json'}: {exc}") from None
        if self.book.num_parts != m["num_parts"] or self.book.num_nodes != m["num_nodes"]:
            raise _ERR(f"{self.path / 'partition.json'}: node_book covers {self.book.num_nodes} "
                       f"nodes in {self.book.num_parts} parts; expected {m['num_nodes']} nodes "
                       f"in num_parts = {m['num_parts']}")
        if (self.feature_slices.feat_dim != m["feat_dim"]
                or m["feature_layout"] not in ("rows", "columns")):
            raise _ERR(f"{self.path / 'partition.json'}: feature_layout "
                       f"{m['feature_layout']!r} with slices {m['feature_slices']}; expected "
                       f"'rows' or 'columns' with slices ending at feat_dim = {m['feat_dim']}")
        self.edge_data, self.node_data = (checked_spec(m, f, self.path / MANIFEST, _ERR)
                                          for f in ("edge_data", "node_data"))
        self.types: GraphTypes | None = (GraphTypes.from_json(m["types"], str(self.path / MANIFEST))
                                         if "types" in m else None)
        slices = m.get("type_feature_slices") if self.types is not None else None  # checked
        self.type_slices: dict[str, FeatureSlices] = {t: FeatureSlices(b) for t, b in
                                                      (slices or {}).items()}
        self._orig_maps: dict[int, np.ndarray] = {}
        self._verified: set[int] = set()
        self._sampler = random.Random()  # seeded from the OS: each load draws other chunks

    num_parts = property(lambda self: self.manifest["num_parts"])
    num_nodes = property(lambda self: self.manifest["num_nodes"])
    num_edges = property(lambda self: self.manifest["num_edges"])
    feat_dim = property(lambda self: self.manifest["feat_dim"])
    num_classes = property(lambda self: self.manifest["num_classes"])
    feature_layout = property(lambda self: self.manifest["feature_layout"])
    partitioner = property(lambda self: self.manifest["partitioner"]["name"])

    @property
    def ndata_names(self) -> dict[str, str]:
        """The user's names of the stored node data ``feat`` and ``label`` where they differ
        (DGL's partitions keep the names their graph gave them, e.g. ``features``)."""
        names = self.manifest.get("ndata_names", {})
        if not isinstance(names, dict) or not all(
                k in ("feat", "label") and isinstance(v, str) and v for k, v in names.items()):
            raise _ERR(f"{self.path / MANIFEST}: field 'ndata_names' = {names!r:.80}; expected "
                       "{'feat': NAME, 'label': NAME} (either may be left out)")
        return {k: v for k, v in names.items() if k != v}

    def fingerprint(self) -> str:
        """An id of the partitions' content (every part file's checksum, from the manifest):
        equal for a copy, different for other data or another partitioning of it."""
        # size and checksum only: a manifest with chunk sums has the fingerprint it had without
        files = [sorted((n, {"bytes": i["bytes"], "sha256": i["sha256"]})
                        for n, i in e["files"].items()) for e in self.manifest["parts"]]
        return hashlib.sha256(json.dumps(files).encode()).hexdigest()[:16]

    def owner(self, ids):
        """The part owning each global id (see :class:`~dglx_dist.partition.book.NodeBook`)."""
        return self.book.owner(ids)

    def to_local(self, ids):
        """Each global id's local id in its owner."""
        return self.book.to_local(ids)

    def core_ids(self, part: int) -> np.ndarray:
        """Global ids of the core nodes of ``part``."""
        return self.book.core_ids(part)

    def halo_ids(self, part: int) -> np.ndarray:
        """Global ids of the HALO nodes of ``part`` (reads that part's halo file only)."""
        self.verify_part(part)
        return self._column(part, "halo", "gid", "integer", "num_halo")

    def to_original(self, ids) -> np.ndarray:
        """The dataset's ids of global ids (identity when the partitioner did not relabel)."""
        ids = np.asarray(ids, dtype=np.int64)
        if not self.manifest["relabeled"]:
            return ids.copy()
        owner = np.asarray(self.book.owner(ids))
        out = np.empty_like(ids)
        for p in np.unique(owner):
            sel = owner == p
            out[sel] = self._orig_map(int(p))[np.asarray(self.book.to_local(ids[sel]))]
        return out

    @functools.cached_property
    def relabeling(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(orig, part)``: the dataset's id of every partitioned id and its inverse, when the
        partitioner relabeled (else None); made once per directory object, shared by whoever
        translates ids (the graph, a typed sampler)."""
        if not self.manifest["relabeled"]:
            return None
        orig = self.to_original(np.arange(self.num_nodes, dtype=np.int64))
        part = np.empty_like(orig)
        part[orig] = np.arange(orig.size, dtype=np.int64)
        return orig, part

    @property
    def edge_offsets(self) -> np.ndarray:
        """Part ``p`` holds the partitioned edge ids ``[edge_offsets[p], edge_offsets[p+1])``."""
        sizes = [entry["num_edges"] for entry in self.manifest["parts"]]
        return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    def edge_book(self) -> RangeBook:
        """Where each partitioned edge id's row lives (a range book over the edges)."""
        return RangeBook(self.edge_offsets)

    def edge_part_ids(self) -> np.ndarray:
        """The partitioned id of every edge, indexed by the dataset's edge id (reads every
        part's ``eid`` column: one int64 per edge)."""
        out = np.full(self.num_edges, -1, dtype=np.int64)
        for p, lo in enumerate(self.edge_offsets[:-1]):
            self.verify_part(p)
            eid = self._column(p, "edges", "eid", "integer", "num_edges")
            check_range(eid, 0, self.num_edges, self._file(p, "edges"), "eid", "edge id", _ERR)
            out[eid] = lo + np.arange(eid.size, dtype=np.int64)
        if (out < 0).any():
            raise _ERR(f"{self.path}: edges {np.flatnonzero(out < 0)[:5].tolist()} are in no "
                       f"part; every edge must be stored once")
        return out

    def load_edge_data(self, part: int) -> dict[str, np.ndarray]:
        """Part ``part``'s edge data (the manifest's ``edge_data``), row j for its edge j."""
        return self._data(part, "edges", self.edge_data, "num_edges", "edge", "")

    def load_node_data(self, part: int) -> dict[str, np.ndarray]:
        """Part ``part``'s node data other than labels and masks (the manifest's
        ``node_data``: what DGL's partitions hold besides them, e.g. ``trainer_id``), row i
        for its core node i."""
        return self._data(part, "nodes", self.node_data, "num_core", "node", NODE_DATA_PREFIX)

    def _data(self, part: int, table: str, spec: dict[str, dict[str, Any]], rows: str,
              kind: str, prefix: str) -> dict[str, np.ndarray]:
        self._check_part(part)
        if not spec:
            return {}
        self.verify_part(part)
        file, columns = self._file(part, table), [prefix + n for n in spec]
        read = read_checked(file, {}, self._entry(part)[rows], _ERR, read=tuple(columns))
        out = {c[len(prefix):]: v for c, v in edge_data_arrays(read, columns, file, _ERR).items()}
        for name, values in out.items():
            want = (str(values.dtype), list(values.shape[1:]))
            if want != (spec[name]["dtype"], spec[name]["shape"]):
                raise _ERR(f"{file}: {kind} data {name!r} is {want[0]} of row shape {want[1]}; "
                           f"the manifest says {spec[name]['dtype']} of {spec[name]['shape']}")
        return out

    def load_feat(self, part: int) -> tuple[np.ndarray, tuple[int, int]]:
        """Only part ``part``'s features and the columns they cover (for caching replicas)."""
        self.verify_part(part)
        num_core = self._entry(part)["num_core"]
        if self.types is not None:  # features per node type: load_type_feat
            return np.zeros((num_core, 0), dtype=np.float32), (0, 0)
        if self.feature_layout == "rows":
            cols, rows = (0, self.feat_dim), num_core
        else:
            sl = self.feature_slices.slice(part)
            cols, rows = (sl.start, sl.stop), self.num_nodes
        return self._read_feat(part, "feat", rows, cols[1] - cols[0]), cols

    def load_part(self, part: int, features: bool = True) -> Partition:
        """Reads part ``part``, its file sizes and checksums checked first; without
        ``features``, its ``feat`` is an empty array of no columns (for a reader that needs
        the structure and node data only: the features are the largest file)."""
        self.verify_part(part)
        entry = self._entry(part)
        nc, nh, ne = entry["num_core"], entry["num_halo"], entry["num_edges"]
        nf, hf, ef = (self._file(part, n) for n in ("nodes", "halo", "edges"))
        nodes = read_checked(nf, {"gid": "integer", "orig_id": "integer", "label": "integer",
                                  "train": "bool", "val": "bool", "test": "bool"}, nc, _ERR)
        halo = read_checked(hf, {"gid": "integer", "orig_id": "integer"}, nh, _ERR)
        edges = read_checked(ef, {"src": "integer", "dst": "integer", "eid": "integer"}, ne, _ERR)
        cols = {f"n.{c}": column_numpy(nodes, c, nf, _ERR) for c in nodes.column_names}
        cols.update({f"h.{c}": column_numpy(halo, c, hf, _ERR) for c in halo.column_names})
        cols.update({f"e.{c}": column_numpy(edges, c, ef, _ERR) for c in edges.column_names})
        n, N = self.manifest["num_nodes"], self.manifest["num_classes"]
        for key, hi, file in (("n.gid", n, nf), ("n.orig_id", n, nf), ("h.gid", n, hf),
                              ("h.orig_id", n, hf), ("n.label", N, nf), ("e.src", nc + nh, ef),
                              ("e.dst", nc, ef), ("e.eid", self.manifest["num_edges"], ef)):
            if key != "n.label" or self.types is None:
                check_range(cols[key], 0, hi, file, key[2:], "value", _ERR)
        if self.types is not None:
            self._check_typed_nodes(part, cols, nf)
        if not np.array_equal(cols["n.gid"], self.book.core_ids(part)):
            raise _ERR(f"{nf}: field 'gid' does not list the core ids the node book gives part "
                       f"{part}; the part does not belong to this manifest")
        feat, feat_cols = (self.load_feat(part) if features else
                           (np.empty((0, 0), dtype=np.float32), (0, 0)))
        return Partition(part, cols["n.gid"], cols["n.orig_id"], cols["h.gid"], cols["h.orig_id"],
                         cols["e.src"], cols["e.dst"], cols["e.eid"], cols["n.label"],
                         cols["n.train"], cols["n.val"], cols["n.test"], feat, feat_cols,
                         ntype_counts=None if self.types is None else self.ntype_counts(part))

    def ntype_counts(self, part: int) -> np.ndarray:
        """Core nodes of each node type in part ``part`` (typed partitionings), in type order:
        type ``i``'s core nodes are the local ids ``[sum(counts[:i]), sum(counts[:i+1]))``,
        so a node's row among its type's (:meth:`load_type_feat`) is its local id minus the
        start of that run."""
        self._check_part(part)
        self._typed()
        return np.asarray(self._entry(part)["ntype_counts"], dtype=np.int64)

    def type_rows(self, ntype: str) -> np.ndarray:
        """The per-type ids of node type ``ntype``'s rows in the order the graph's stores keep
        them: by part, then by local id (part ``p``'s are one contiguous range)."""
        types = self._typed()
        i = types.ntype_index(ntype)
        lo, hi = (int(x) for x in types.ntype_offsets[i:i + 2])
        orig = self.to_original(np.concatenate([self.book.core_ids(p)
                                                for p in range(self.num_parts)]))
        return orig[(orig >= lo) & (orig < hi)] - lo

    def type_row_of(self, gids) -> tuple[np.ndarray, np.ndarray]:
        """(node type index, row among the type's rows) of partitioned ids ``gids`` of a
        typed partitioning: a type's rows run part after part, by local id inside a part
        (the row spaces of ``g.nodes[ntype].data``; :meth:`type_rows` the other way)."""
        counts = np.stack([self.ntype_counts(p) for p in range(self.num_parts)])
        ends = np.cumsum(counts, axis=1)  # (parts, types): where each type's run ends
        before = np.cumsum(counts, axis=0) - counts  # the type's rows in earlier parts
        part = np.asarray(self.book.owner(gids), dtype=np.int64)
        local = np.asarray(self.book.to_local(gids), dtype=np.int64)
        t = (local[:, None] >= ends[part]).sum(axis=1)
        return t, before[part, t] + local - (ends - counts)[part, t]

    def load_type_feat(self, part: int, ntype: str) -> np.ndarray:
        """The features (float32) of node type ``ntype`` in part ``part`` of a typed
        partitioning: one row per core node of the type, in local order; under a column
        layout, the part's column slice (:attr:`type_slices`) of every node of the type, in
        per-type id order."""
        self._check_part(part)
        types = self._typed()
        i, width = types.ntype_index(ntype), types.feat_dims.get(ntype, 0)
        if not width:
            raise InvalidValueError(f"node type {ntype!r} of {self.path} has no features; the "
                                    f"types with features: "
                                    f"{[t for t in types.ntypes if types.feat_dims[t]]}")
        self.verify_part(part)
        rows = int(self.ntype_counts(part)[i])
        if self.feature_layout == "columns":  # a column slice of every node of the type
            cols = self.type_slices[ntype].slice(part)
            rows, width = int(types.ntype_offsets[i + 1] - types.ntype_offsets[i]), \
                cols.stop - cols.start
        return self._read_feat(part, type_feat_table(i), rows, width)

    def _typed(self) -> GraphTypes:
        if self.types is None:
            raise InvalidValueError(f"{self.path} is a homogeneous partitioning: it has no "
                                    f"node types (its types is None)")
        return self.types

    def _check_typed_nodes(self, part: int, cols: dict[str, np.ndarray], file: Path) -> None:
        """Each core node's type, by ``ntype_counts``, against its ``orig_id``, label and
        masks: -1 and false for the types without labels, a class for the others."""
        types, num_classes = self.types, self.manifest["num_classes"]
        counts = self.ntype_counts(part)
        index = np.repeat(np.arange(counts.size), counts)
        orig, label = cols["n.orig_id"], cols["n.label"]
        labeled = np.isin(np.asarray(types.ntypes), types.labeled)[index]
        checks = {
            "orig_id": (orig < types.ntype_offsets[index])
            | (orig >= types.ntype_offsets[index + 1]),
            "label": np.where(labeled, (label < 0) | (label >= num_classes), label != -1),
            "train/val/test": ~labeled & (cols["n.train"] | cols["n.val"] | cols["n.test"])}
        for field, bad in checks.items():
            if not bad.any():
                continue
            r = int(np.argmax(bad))
            t, lo, hi = (types.ntypes[index[r]], int(types.ntype_offsets[index[r]]),
                         int(types.ntype_offsets[index[r] + 1]))
            expected = {
                "orig_id": f"an id in [{lo}, {hi}) of node type {t!r}, where the part's "
                           f"ntype_counts put row {r}",
                "label": (f"a class in [0, {num_classes})" if labeled[r] else
                          f"-1 (node type {t!r} has no labels)"),
                "train/val/test": f"false (node type {t!r} has no labels)"}[field]
            value = f" = {cols['n.' + field][r]}" if field != "train/val/test" else " is true"
            raise _ERR(f"{file}: field {field!r} row {r}{value}; expected {expected}")

    def verify_part(self, part: int, full: bool = False) -> None:
        """Checks part ``part``'s files against the manifest's sizes and checksums, once per
        part: in full (each file's SHA-256 and every chunk sum), or where this host hashed them
        in full before as they and the manifest are now (and not ``full``) a random sample of
        the chunks of the files with usable chunk sums, the others in full; logs one line
        saying which (docs/partition_format.md, "Guarantees")."""
        self._check_part(part)
        if part in self._verified and not full:
            return
        folder, files = self.path / self._entry(part)["dir"], self._entry(part)["files"]
        if full or not still_verified(folder, files):
            done = checksums.verify_files(folder, files)
            record_verified(folder, files)
            unchunked = sum(not checksums.usable(i) for i in files.values())
            log.debug("%s: full check of %d files (%d bytes): SHA-256 and every chunk sum; "
                     "later loads on this host hash a sample of chunks%s", folder, done.files,
                     sum(i["bytes"] for i in files.values()),
                     f" ({unchunked} files without chunk sums: whole)" if unchunked else "")
        else:
            done = checksums.verify_files(folder, files, self._sampler)
            keep_stamp_recorded(folder)
            whole = f"; {done.whole} without chunk sums hashed whole" if done.whole else ""
            log.debug("%s: sampled check of %d of %d chunks%s (loads after this host's first "
                     "full check hash a sample of chunks; `dglx verify` hashes every byte)",
                     folder, done.sampled, done.of_chunks, whole)
        self._verified.add(part)

    def _read_feat(self, part: int, table: str, rows: int, width: int) -> np.ndarray:
        file = self._file(part, table)
        read_checked(file, {"feat": "float list"}, rows, _ERR, read=())
        return read_feat(file, rows, width, _ERR)

    def _orig_map(self, part: int) -> np.ndarray:
        if part not in self._orig_maps:
            self.verify_part(part)
            self._orig_maps[part] = self._column(part, "nodes", "orig_id", "integer", "num_core")
        return self._orig_maps[part]

    def train_nodes(self) -> int:
        """Training nodes of every part together (their ``train`` column)."""
        return sum(int(np.count_nonzero(self._column(p, "nodes", "train", "bool", "num_core")))
                   for p in range(self.num_parts))

    def _column(self, part: int, table: str, name: str, kind: str, rows: str) -> np.ndarray:
        """Column ``name`` of part ``part``'s ``table``, of ``kind``, as many rows as the
        part's entry says under ``rows``."""
        file = self._file(part, table)
        read = read_checked(file, {name: kind}, self._entry(part)[rows], _ERR)
        return column_numpy(read, name, file, _ERR)

    def _entry(self, part: int) -> dict[str, Any]:
        return self.manifest["parts"][part]

    def _file(self, part: int, table: str) -> Path:
        return (self.path / self._entry(part)["dir"]
                / part_file_name(table, self.manifest["version"]))

    def _check_part(self, part: int) -> None:
        if not 0 <= part < self.num_parts:
            raise IdOutOfRangeError(f"part {part} is outside [0, {self.num_parts}) for {self.path}")
