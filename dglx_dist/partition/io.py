"""The partition directory: one JSON manifest plus one folder of Arrow IPC files per part.

docs/partition_format.md is the format: the part files (``nodes``, ``halo``, ``edges`` and
``feat``, or a typed partitioning's ``feat-<type index>``: :data:`PART_TABLES`,
:func:`part_tables`), the manifest's fields and what a typed partitioning adds. The part files
are uncompressed Arrow IPC files, memory-mapped when read; version 1 directories (the same
tables as Parquet files) are still read. The whole directory is built under a temporary name
and renamed into place when complete, so an interrupted partitioning never leaves a directory
that loads. Loading part ``p`` reads the manifest and that part's files only, verifying their
sizes and checksums: in full at a host's first load (each file's SHA-256 and every chunk sum)
and whenever the files or the manifest changed since, else a random sample of their chunks
(:func:`still_verified`; :mod:`~dglx_dist.partition.checksums`).
"""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from dglx_dist.data.atomic import DirKind, atomic_directory
from dglx_dist.data.owned import add_to_record, write_record
from dglx_dist.data.nolinks import replace_file
from dglx_dist.data.checked import check_plausible, read_json_object, to_arrow, write_arrow
from dglx_dist.errors import OutputExistsError, PartitionFormatError
from dglx_dist.partition import checksums
from dglx_dist.partition.layout import Partition
from dglx_dist.partition.types import GraphTypes

__all__ = ["write_partitions", "read_manifest", "MANIFEST", "FORMAT", "VERSION", "PART_FILES",
           "PARTITION_DIR", "VERIFIED", "part_dir_name", "part_file_name", "still_verified",
           "record_verified", "keep_stamp_recorded", "part_tables", "type_feat_table",
           "check_type_feature_slices"]

MANIFEST, FORMAT, VERSION = "partition.json", "dglx-partition", 2
PART_TABLES = ("nodes", "halo", "edges", "feat")
NODE_DATA_PREFIX = "ndata/"  # a nodes table's columns of the manifest's node_data
_SUFFIX = {1: ".parquet", 2: ".arrow"}  # the versions this code reads: their part files' type


def part_file_name(table: str, version: int = VERSION) -> str:
    """The file of a part's ``table`` (one of :data:`PART_TABLES`) in format ``version``."""
    return table + _SUFFIX[version]


PART_FILES = tuple(part_file_name(t) for t in PART_TABLES)  # what this version writes


VERIFIED = ".verified.json"  # in a part's folder: its files as they were when last checked
# no derived patterns: the loads that write a part's stamp add it to the record themselves
PARTITION_DIR = DirKind("partition", "a dglx partition directory")


def part_dir_name(p: int) -> str:
    return f"part-{p:05d}"


def _identity(file: Path) -> list[int]:
    st = file.stat()
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def _stamps(folder: Path) -> dict[str, Any]:
    try:
        stamps = json.loads((folder / VERIFIED).read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    return stamps if isinstance(stamps, dict) else {}


def record_verified(folder: Path, names) -> None:
    """Records that this host hashed the files ``names`` of a part's ``folder`` in full, as
    they are now (device, inode, size, modification time), beside other hosts' stamps, and
    adds the stamp to the directory's record (:func:`keep_stamp_recorded`); an unwritable
    folder records nothing."""
    stamps = _stamps(folder)
    stamps[socket.gethostname()] = {n: _identity(folder / n) for n in names}
    try:
        replace_file(folder / VERIFIED, json.dumps(stamps))
    except OSError:
        return
    keep_stamp_recorded(folder)


def keep_stamp_recorded(folder: Path) -> None:
    """Adds a part ``folder``'s stamp, as it is now, to its partition directory's record
    where the record does not list it so (another host rewrote it, or an update was lost on
    a filesystem without locks); a directory without a record is left as it is."""
    if (folder / VERIFIED).is_file():
        add_to_record(folder.parent, (f"{folder.name}/{VERIFIED}",))


def still_verified(folder: Path, names) -> bool:
    """Whether this host hashed every one of ``names`` in full since it was last written (a
    copied, replaced or rewritten file has another identity; a missing or unreadable stamp,
    or another host's, is no stamp), against the manifest as it is now (one changed since the
    stamp was written is checked in full again). Writing a part is not verifying it."""
    record = _stamps(folder).get(socket.gethostname())
    try:
        return (isinstance(record, dict)
                and all(record.get(n) == _identity(folder / n) for n in names)
                and (folder.parent / MANIFEST).stat().st_mtime_ns
                < (folder / VERIFIED).stat().st_mtime_ns)
    except OSError:
        return False


def type_feat_table(index: int) -> str:
    """The table of node type ``index``'s features in a typed part (``feat-<index>``)."""
    return f"feat-{index}"


def _write_part(pc: Partition, folder: Path) -> dict[str, Any]:
    folder.mkdir()
    tables = {
        "nodes": {"gid": pc.core_gid, "orig_id": pc.core_orig, "label": pc.label,
                  "train": pc.train, "val": pc.val, "test": pc.test,
                  **{NODE_DATA_PREFIX + n: a for n, a in pc.ndata.items()}},
        "halo": {"gid": pc.halo_gid, "orig_id": pc.halo_orig},
        "edges": {"src": pc.src, "dst": pc.dst, "eid": pc.eid, **pc.edata},
    }
    feats = ({"feat": pc.feat} if pc.ntype_counts is None else
             {type_feat_table(i): f for i, f in sorted(pc.type_feat.items())})
    tables.update({n: {"feat": np.asarray(f, np.float32)} for n, f in feats.items()})
    for name, columns in tables.items():  # features in blocks: a reader's peak is one block
        table = pa.table({c: to_arrow(a) for c, a in columns.items()})
        write_arrow(table, folder / part_file_name(name), None if name in PART_TABLES[:3]
                    else 1 << 16)
    files = {n: _file_entry(folder / n) for n in map(part_file_name, tables)}
    entry = {"dir": folder.name, "num_core": int(pc.core_gid.size),
             "num_halo": int(pc.halo_gid.size), "num_edges": int(pc.src.size), "files": files}
    if pc.ntype_counts is not None:
        entry["ntype_counts"] = [int(c) for c in pc.ntype_counts]
    return entry


def _file_entry(file: Path) -> dict[str, Any]:
    sha, sums = checksums.file_sums(file)
    return {"bytes": file.stat().st_size, "sha256": sha,
            "chunks": checksums.chunk_entry(sha, sums)}


def write_partitions(out: str | os.PathLike,
                     header: dict[str, Any] | Callable[[], dict[str, Any]], parts,
                     overwrite: bool = False, on_part: Callable[[Partition], None] | None = None,
                     inputs: tuple = (), expected_bytes: int | None = None) -> Path:
    """Writes every part from the iterable ``parts`` and then the manifest, atomically.

    Args:
        out: the partition directory to create.
        header: manifest fields other than ``format``, ``version`` and ``parts``, or a
            callable returning them once every part is written (for fields known only then,
            such as the ``num_classes`` of an import).
        parts: iterable of :class:`Partition`, consumed one at a time.
        overwrite: replace an existing ``out`` once the new one is complete (only a partition
            directory).
        on_part: called after each part is written (progress, statistics).
        inputs: what the parts are made from; ``out`` may not hold any of it.
        expected_bytes: about how much is written (named if the disk fills up).
    """
    with atomic_directory(out, overwrite, error_cls=OutputExistsError, kind=PARTITION_DIR,
                          inputs=inputs, expected_bytes=expected_bytes) as tmp:
        entries = []
        for pc in parts:
            entries.append(_write_part(pc, tmp / part_dir_name(pc.part)))
            if on_part is not None:
                on_part(pc)
        fields = header() if callable(header) else header
        manifest = {"format": FORMAT, "version": VERSION, **fields, "parts": entries}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        write_record(tmp, PARTITION_DIR.name, known={
            f"{e['dir']}/{name}": info for e in entries for name, info in e["files"].items()})
    return Path(out)


_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "partitioner": dict, "num_parts": int, "num_nodes": int, "num_edges": int, "feat_dim": int,
    "num_classes": int, "relabeled": bool, "node_book": dict, "feature_layout": str,
    "feature_slices": list, "parts": list}


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """Reads and checks ``partition.json`` (format, version, fields, per-part entries).

    Raises:
        PartitionFormatError: naming the file, field, value found and value expected.
    """
    file = Path(path) / MANIFEST
    if not file.is_file():
        hint = " (an interrupted partitioning leaves none)" if Path(path).is_dir() else ""
        raise PartitionFormatError(f"{file}: missing; not a partition directory{hint}")
    m = read_json_object(file, PartitionFormatError, max_bytes=256 << 20)
    if m.get("format") != FORMAT:
        raise PartitionFormatError(f"{file}: format {m.get('format')!r}; expected {FORMAT!r}")
    if m.get("version") not in _SUFFIX:
        raise PartitionFormatError(
            f"{file}: version {m.get('version')!r}; this dglx_dist reads versions "
            f"{' and '.join(map(str, _SUFFIX))} (re-partition the dataset with this version's "
            f"`dglx partition`)")
    for key, typ in _REQUIRED.items():
        value = m.get(key)
        if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            raise PartitionFormatError(f"{file}: field {key!r} = {value!r:.80}; expected "
                                       f"{getattr(typ, '__name__', typ)}")
    check_plausible(m, file, PartitionFormatError)
    if len(m["parts"]) != m["num_parts"] or m["num_parts"] < 1:
        raise PartitionFormatError(f"{file}: {len(m['parts'])} part entries for num_parts = "
                                   f"{m['num_parts']}; expected them equal and >= 1")
    types = _check_types(file, m) if "types" in m else None
    for p, entry in enumerate(m["parts"]):
        _check_part_entry(file, p, entry, m["version"], part_tables(types))
        if types is not None:
            _check_ntype_counts(f"{file}: parts[{p}]", entry, len(types.ntypes))
    return m


def part_tables(types: GraphTypes | None) -> tuple[str, ...]:
    """The tables of each part: :data:`PART_TABLES`, or for a typed partitioning one
    features table per node type that has features instead of ``feat``."""
    if types is None:
        return PART_TABLES
    return (*PART_TABLES[:3], *(type_feat_table(i) for i, t in enumerate(types.ntypes)
                                if types.feat_dims[t]))


def _check_types(file: Path, m: dict[str, Any]) -> GraphTypes:
    """The typed manifest's ``types``, checked against the manifest's sizes."""
    types = GraphTypes.from_json(m["types"], str(file))
    for field, last, total in (("ntype_offsets", types.num_nodes, "num_nodes"),
                               ("etype_offsets", types.num_edges, "num_edges")):
        if last != m[total]:
            raise PartitionFormatError(f"{file}: field 'types.{field}' ends at {last}; "
                                       f"expected {total} = {m[total]}")
    if m["version"] != VERSION or m["feat_dim"] != 0 or \
            m["feature_layout"] not in ("rows", "columns"):
        raise PartitionFormatError(
            f"{file}: a typed manifest (field 'types') with version {m['version']}, feat_dim "
            f"{m['feat_dim']} and feature_layout {m['feature_layout']!r}; expected version "
            f"{VERSION}, feat_dim 0 and 'rows' or 'columns' (typed features are stored per "
            f"node type)")
    check_type_feature_slices(file, m, types)
    return types


def check_type_feature_slices(file: Path, m: dict[str, Any],
                              types: GraphTypes) -> dict[str, list[int]] | None:
    """A typed manifest's ``type_feature_slices``, checked: present exactly when features are
    split by columns, with ``num_parts + 1`` non-decreasing bounds from 0 to the type's
    width for every node type that has features (None under a row layout)."""
    found = m.get("type_feature_slices")
    if m["feature_layout"] == "rows":
        if found is not None:
            raise PartitionFormatError(f"{file}: field 'type_feature_slices' in a manifest "
                                       f"whose feature_layout is 'rows'; expected it only "
                                       f"with 'columns'")
        return None
    featured = {t: w for t, w in types.feat_dims.items() if w}
    ok = isinstance(found, dict) and sorted(found) == sorted(featured)
    for t, bounds in (found.items() if ok else ()):
        ok = ok and isinstance(bounds, list) and len(bounds) == m["num_parts"] + 1 and all(
            isinstance(b, int) and not isinstance(b, bool) for b in bounds) and \
            bounds[0] == 0 and bounds[-1] == featured[t] and \
            all(a <= b for a, b in zip(bounds, bounds[1:]))
    if not ok:
        raise PartitionFormatError(
            f"{file}: field 'type_feature_slices' = {found!r:.80}; expected, for each of the "
            f"featured node types {featured} (name: width), {m['num_parts'] + 1} "
            f"non-decreasing column bounds from 0 to its width")
    return found


def _check_ntype_counts(where: str, entry: dict[str, Any], num_types: int) -> None:
    counts = entry.get("ntype_counts")
    if not (isinstance(counts, list) and len(counts) == num_types and all(
            isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts)):
        raise PartitionFormatError(f"{where}.ntype_counts = {counts!r:.80}; expected "
                                   f"{num_types} counts >= 0, one per node type")
    if sum(counts) != entry["num_core"]:
        raise PartitionFormatError(f"{where}.ntype_counts sum to {sum(counts)}; expected "
                                   f"num_core = {entry['num_core']}")


def _check_part_entry(file: Path, p: int, entry: Any, version: int,
                      tables: tuple[str, ...]) -> None:
    where = f"{file}: parts[{p}]"
    if not isinstance(entry, dict) or entry.get("dir") != part_dir_name(p):
        raise PartitionFormatError(f"{where}: expected an object with dir {part_dir_name(p)!r}")
    for key in ("num_core", "num_halo", "num_edges"):
        v = entry.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise PartitionFormatError(f"{where}.{key} = {v!r}; expected an integer >= 0")
    files = entry.get("files")
    expected = sorted(part_file_name(t, version) for t in tables)
    if not isinstance(files, dict) or sorted(files) != expected:
        raise PartitionFormatError(f"{where}.files lists {sorted(files or {})}; "
                                   f"expected {expected}")
    for name, info in files.items():
        if not (isinstance(info, dict) and isinstance(info.get("bytes"), int)
                and isinstance(info.get("sha256"), str)):
            raise PartitionFormatError(f"{where}.files[{name!r}]: expected bytes and sha256")
        checksums.check_entry(f"{where}.files[{name!r}]", info)
