"""Reading and checking the JSON file DGL's ``dgl.distributed.partition_graph`` writes.

``partition_graph(g, graph_name, num_parts, out_path, ...)`` writes ``out_path/graph_name.json``
(DGL 2.1, homogeneous graph)::

    {"graph_name": "cora", "num_nodes": 2708, "num_edges": 10556, "part_method": "metis",
     "num_parts": 2, "halo_hops": 1,
     "node_map": {"_N": [[0, 1319], [1319, 2708]]},          # new node ids of part p
     "edge_map": {"_N:_E:_N": [[0, 5133], [5133, 10556]]},   # new edge ids of part p
     "ntypes": {"_N": 0}, "etypes": {"_N:_E:_N": 0},
     "part-0": {"node_feats": "part0/node_feat.dgl", "edge_feats": "part0/edge_feat.dgl",
                "part_graph": "part0/graph.dgl"}, ...}

Older DGL releases wrote ``node_map`` / ``edge_map`` as lists of range ends; those are read too.
Releases that did not relabel node ids stored ``node_map`` as the name of a ``.npy`` file; those
are refused (there are no per-part id ranges to keep). This module only reads JSON; the part
files are read by :mod:`dglx_dist.partition.dgl_import`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from dglx_dist.data.checked import read_json_object
from dglx_dist.errors import PartitionFormatError

__all__ = ["DglConfig", "read_dgl_config", "find_dgl_config", "PART_FILE_KEYS"]

_ERR = PartitionFormatError
PART_FILE_KEYS = ("part_graph", "node_feats", "edge_feats")
_INTS = ("num_nodes", "num_edges", "num_parts")


@dataclasses.dataclass(frozen=True)
class DglConfig:
    """A checked DGL partition configuration (homogeneous graphs only).

    Attributes:
        path: the JSON file.
        sha256: its content hash (recorded in the imported manifest's provenance).
        graph_name, part_method, halo_hops: as DGL wrote them (method and hops may be None
            when an old release did not record them).
        num_nodes, num_edges, num_parts: sizes.
        ntype, etype: the single node type and (canonical, ``src:rel:dst``) edge type name.
        node_offsets: part ``p`` holds new node ids ``[node_offsets[p], node_offsets[p+1])``.
        edge_offsets: the same for new edge ids.
        files: per part, ``{"part_graph" | "node_feats" | "edge_feats": absolute path}``.
    """

    path: Path
    sha256: str
    graph_name: str | None
    part_method: str | None
    halo_hops: int | None
    num_nodes: int
    num_edges: int
    num_parts: int
    ntype: str
    etype: str
    node_offsets: np.ndarray
    edge_offsets: np.ndarray
    files: list[dict[str, Path]]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _single_type(file: Path, m: dict[str, Any], key: str, types_key: str, what: str) -> str:
    """The one type name of ``m[key]``; refuses heterogeneous graphs naming their types."""
    value = m.get(key)
    if isinstance(value, str):
        raise _ERR(f"{file}: field {key!r} is the file name {value!r}: a DGL release that did not "
                   f"relabel ids wrote it, so parts have no id ranges to keep; re-run "
                   f"dgl.distributed.partition_graph with DGL >= 0.8")
    if not isinstance(value, dict) or not value:
        raise _ERR(f"{file}: field {key!r} = {value!r:.80}; expected an object mapping the "
                   f"{what} type to per-part id ranges")
    names = sorted(set(value) | set(m.get(types_key) or {}))
    if len(names) != 1:
        raise _ERR(f"{file}: fields {key!r} and {types_key!r} list {what} types {names}: a "
                   f"heterogeneous graph; dglx_dist imports "
                   f"homogeneous graphs only (one node type, one edge type): convert with "
                   f"dgl.to_homogeneous before partition_graph, or partition the dataset with "
                   f"`dglx partition`")
    return names[0]


def _ranges(file: Path, m: dict[str, Any], key: str, name: str, num_parts: int,
            total: int) -> np.ndarray:
    """Offsets ``[0, e_0, ..., total]`` from ``m[key][name]``: ``[[s, e], ...]`` or ends only."""
    where = f"{file}: field {key!r}[{name!r}]"
    raw = m[key][name]
    if not isinstance(raw, list) or len(raw) != num_parts:
        raise _ERR(f"{where} = {raw!r:.80}; expected one id range per part ({num_parts})")
    if all(_is_int(e) for e in raw):  # the old layout: range ends only
        raw = [[a, b] for a, b in zip([0] + raw[:-1], raw)]
    if not all(isinstance(r, list) and len(r) == 2 and all(map(_is_int, r)) for r in raw):
        raise _ERR(f"{where} = {raw!r:.80}; expected [[start, end], ...] integer pairs")
    starts = np.array([r[0] for r in raw], dtype=np.int64)
    ends = np.array([r[1] for r in raw], dtype=np.int64)
    offsets = np.concatenate([starts, ends[-1:]])
    if starts[0] != 0 or np.any(ends[:-1] != starts[1:]) or np.any(ends < starts) \
            or ends[-1] != total:
        total_key = "num_nodes" if key == "node_map" else "num_edges"
        raise _ERR(f"{where} = {raw!r:.120}; expected contiguous ranges [[0, e0], [e0, e1], ...] "
                   f"ending at {total_key} = {total}")
    return offsets


def _part_files(file: Path, m: dict[str, Any], num_parts: int) -> list[dict[str, Path]]:
    out = []
    for p in range(num_parts):
        entry = m.get(f"part-{p}")
        if not isinstance(entry, dict):
            raise _ERR(f"{file}: field 'part-{p}' = {entry!r:.80}; expected an object with "
                       f"{list(PART_FILE_KEYS)} file names")
        paths = {}
        for key in PART_FILE_KEYS:
            rel = entry.get(key)
            if not isinstance(rel, str) or not rel:
                raise _ERR(f"{file}: field 'part-{p}'.{key!r} = {rel!r:.80}; expected a file "
                           f"name relative to {file.parent}")
            path = (file.parent / rel).resolve()
            if not path.is_file():
                raise _ERR(f"{path}: missing (field 'part-{p}'.{key!r} of {file} names it)")
            paths[key] = path
        out.append(paths)
    return out


def read_dgl_config(json_path: str | os.PathLike) -> DglConfig:
    """Reads and checks DGL's partition JSON, and that every part file it names exists.

    Raises:
        PartitionFormatError: naming the file, the field and what was expected; heterogeneous
            graphs are refused naming their types.
    """
    file = Path(json_path)
    m = read_json_object(file, _ERR)
    for key in _INTS:
        if not _is_int(m.get(key)) or m[key] < (1 if key == "num_parts" else 0):
            raise _ERR(f"{file}: field {key!r} = {m.get(key)!r:.80}; expected an integer "
                       f"(is this the JSON file written by dgl.distributed.partition_graph?)")
    ntype = _single_type(file, m, "node_map", "ntypes", "node")
    etype = _single_type(file, m, "edge_map", "etypes", "edge")
    k = m["num_parts"]
    hops = m.get("halo_hops")
    if hops is not None and (not _is_int(hops) or (k > 1 and hops < 1)):
        raise _ERR(f"{file}: field 'halo_hops' = {hops!r}; expected an integer >= 1 (a part "
                   f"needs its core nodes' in-edges from other parts: partition with "
                   f"num_hops >= 1)")
    return DglConfig(
        path=file.resolve(), sha256=hashlib.sha256(file.read_bytes()).hexdigest(),
        graph_name=m.get("graph_name"), part_method=m.get("part_method"), halo_hops=hops,
        num_nodes=m["num_nodes"], num_edges=m["num_edges"], num_parts=k, ntype=ntype,
        etype=etype,
        node_offsets=_ranges(file, m, "node_map", ntype, k, m["num_nodes"]),
        edge_offsets=_ranges(file, m, "edge_map", etype, k, m["num_edges"]),
        files=_part_files(file, m, k))


def _looks_like_dgl(file: Path) -> bool:
    if file.suffix != ".json" or not file.is_file() or file.stat().st_size > 64 << 20:
        return False
    try:
        m = json.loads(file.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(m, dict) and "node_map" in m and "part-0" in m and "num_parts" in m


def find_dgl_config(path: str | os.PathLike) -> Path | None:
    """The DGL partition JSON at ``path`` (a file, or a directory holding one), else None."""
    path = Path(path)
    if path.is_file():
        return path if _looks_like_dgl(path) else None
    if path.is_dir():
        for file in sorted(path.glob("*.json"))[:16]:
            if _looks_like_dgl(file):
                return file
    return None
