"""Reading and checking the JSON file DGL's ``dgl.distributed.partition_graph`` writes
(``out_path/graph_name.json``: sizes, ``node_map`` / ``edge_map`` id ranges per type and part,
``ntypes`` / ``etypes`` type ids, and per part ``part-P`` the names of its files, the part graph
as ``graph.dgl`` and/or GraphBolt's ``part_graph_graphbolt``).

docs/partition_format.md ("Importing DGL's partition_graph output" and its heterograph
section) says what each field means, the layout of a heterograph's ranges (checked here, since
the import relies on it) and what is refused. Older releases' ``node_map`` lists of range ends
are read; their ``node_map.npy`` is refused. The part files are read by
:mod:`dglx_dist.partition.dgl_import`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np

from dglx_dist.data.checked import read_json_object
from dglx_dist.data.convert import dgl_installed
from dglx_dist.errors import PartitionFormatError
from dglx_dist.partition.types import GraphTypes

__all__ = ["DglConfig", "read_dgl_config", "find_dgl_config", "PART_FILE_KEYS"]

_ERR = PartitionFormatError
PART_FILE_KEYS = ("part_graph", "node_feats", "edge_feats")
GRAPH_KEYS = ("part_graph", "part_graph_graphbolt")  # DGL's classic file, GraphBolt's
_INTS = ("num_nodes", "num_edges", "num_parts")


@dataclasses.dataclass(frozen=True)
class DglConfig:
    """A checked DGL partition configuration; a graph without types is the one-type case of a
    heterograph's (its one node and edge type as the JSON names them, no :attr:`types`).

    Attributes:
        path: the JSON file.
        sha256: its content hash (recorded in the imported manifest's provenance).
        graph_name, part_method, halo_hops: as DGL wrote them (method and hops may be None
            when an old release did not record them).
        num_nodes, num_edges, num_parts: sizes.
        node_offsets: part ``p`` holds new node ids ``[node_offsets[p], node_offsets[p+1])``.
        edge_offsets: the same for new edge ids.
        files: per part, ``{"node_feats" | "edge_feats": absolute path}`` and the part graph,
            ``"part_graph"`` (``graph.dgl``) where the JSON names it and it is there, else
            ``"part_graph_graphbolt"`` (GraphBolt's ``fused_csc_sampling_graph.pt``).
        ntypes, etypes: the node types and the canonical edge types as DGL's keys spell them
            (``src:rel:dst``), in DGL's type-id order.
        node_ranges: ``(node types, parts, 2)``: DGL's new node ids ``[start, end)`` of each
            type in each part (field ``node_map``).
        edge_ranges: ``(edge types, parts, 2)``: the same for edges (field ``edge_map``).
        types: a heterograph's node and canonical edge types, each type's number of nodes and
            edges as offsets; no features and no labels yet (the part files say which types
            have them); a graph without types has the one type (DGL's ``_N`` and ``_E``).
    """

    path: Path
    sha256: str
    graph_name: str | None
    part_method: str | None
    halo_hops: int | None
    num_nodes: int
    num_edges: int
    num_parts: int
    node_offsets: np.ndarray
    edge_offsets: np.ndarray
    files: list[dict[str, Path]]
    ntypes: list[str]
    etypes: list[str]
    node_ranges: np.ndarray
    edge_ranges: np.ndarray
    types: GraphTypes

    @property
    def typed(self) -> bool:
        """Whether the JSON lists more than one node or edge type."""
        return not self.types.untyped


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _type_names(file: Path, m: dict[str, Any], key: str, types_key: str,
                what: str) -> list[str]:
    """The type names fields ``key`` (``node_map`` / ``edge_map``) and ``types_key`` list."""
    value = m.get(key)
    if isinstance(value, str):
        raise _ERR(f"{file}: field {key!r} is the file name {value!r}: a DGL release that did not "
                   f"relabel ids wrote it, so parts have no id ranges to keep; re-run "
                   f"dgl.distributed.partition_graph with DGL >= 0.8")
    if not isinstance(value, dict) or not value:
        raise _ERR(f"{file}: field {key!r} = {value!r:.80}; expected an object mapping each "
                   f"{what} type to per-part id ranges")
    listed = m.get(types_key)
    return sorted(set(value) | set(listed if isinstance(listed, dict) else {}))


def _pairs(where: str, raw: Any, num_parts: int) -> np.ndarray:
    """``[[start, end], ...]``, one pair per part, as a (parts, 2) array."""
    if not isinstance(raw, list) or len(raw) != num_parts:
        raise _ERR(f"{where} = {raw!r:.80}; expected one id range per part ({num_parts})")
    if not all(isinstance(r, list) and len(r) == 2 and all(map(_is_int, r)) for r in raw):
        raise _ERR(f"{where} = {raw!r:.80}; expected [[start, end], ...] integer pairs")
    return np.array(raw, dtype=np.int64).reshape(num_parts, 2)


def _type_ids(file: Path, m: dict[str, Any], key: str, parse: Callable[[str], Any]) -> list:
    """The types of field ``key`` (``{name: type id}``) in type-id order, parsed; checked to
    be numbered 0, 1, ... in sorted order, as ``dgl.heterograph`` numbers them."""
    value = m.get(key)
    if not (isinstance(value, dict) and value and all(_is_int(v) for v in value.values())
            and sorted(value.values()) == list(range(len(value)))):
        raise _ERR(f"{file}: field {key!r} = {value!r:.80}; expected an object mapping each "
                   f"type to its type id 0, 1, ...")
    names = sorted(value, key=value.get)
    parsed = [parse(n) for n in names]
    if parsed != sorted(parsed):
        raise _ERR(f"{file}: field {key!r} numbers the types {names} in that order; expected "
                   f"them in sorted order, as dgl.heterograph numbers them (build the graph "
                   f"with dgl.heterograph before partition_graph)")
    return parsed


def _etype(file: Path, name: str, ntypes: list[str]) -> tuple[str, str, str]:
    parts = name.split(":")
    if len(parts) != 3 or parts[0] not in ntypes or parts[2] not in ntypes:
        raise _ERR(f"{file}: field 'etypes' has the edge type {name!r}; expected "
                   f"'src:rel:dst' over the node types {ntypes} of field 'ntypes'")
    return parts[0], parts[1], parts[2]


def _ranges(file: Path, m: dict[str, Any], key: str, names: list[str], num_parts: int,
            total: int) -> np.ndarray:
    """``(types, parts, 2)`` from field ``key``, checked to be DGL's layout: each part's ids
    one run after the part before, its types' ranges one after another in type order (one
    type: contiguous ranges, also as an old release's list of range ends)."""
    value, types_key = m[key], "ntypes" if key == "node_map" else "etypes"
    if sorted(value) != sorted(names):
        raise _ERR(f"{file}: field {key!r} lists the types {sorted(value)}; field "
                   f"{types_key!r} lists {sorted(names)}; expected the same types")
    raw = [value[n] for n in names]
    if len(raw) == 1 and isinstance(raw[0], list) and all(map(_is_int, raw[0])):  # ends only
        raw = [[[a, b] for a, b in zip([0] + raw[0][:-1], raw[0])]]
    ranges = np.stack([_pairs(f"{file}: field {key!r}[{n!r}]", r, num_parts)
                       for n, r in zip(names, raw)])
    flat = ranges.transpose(1, 0, 2).reshape(-1, 2)  # part by part, its types in order
    starts = np.concatenate([[0], flat[:-1, 1]])
    bad = np.flatnonzero((flat[:, 0] != starts) | (flat[:, 1] < flat[:, 0]))
    if bad.size or flat[-1, 1] != total:
        k = int(bad[0]) if bad.size else flat.shape[0] - 1
        p, t = divmod(k, len(names))
        total_key = "num_nodes" if key == "node_map" else "num_edges"
        if len(names) == 1:
            raise _ERR(f"{file}: field {key!r}[{names[0]!r}] = {raw[0]!r:.120}; expected "
                       f"contiguous ranges [[0, e0], [e0, e1], ...] ending at {total_key} = "
                       f"{total}")
        raise _ERR(f"{file}: field {key!r}[{names[t]!r}][{p}] = {flat[k].tolist()}; expected "
                   f"DGL's layout: a range starting at {int(starts[k])} (each part's ids one "
                   f"run, its types' ranges one after another in type order), the last ending "
                   f"at {total_key} = {total}")
    return ranges


def _graph_types(file: Path, ntypes: list[str], etypes: list, node_ranges: np.ndarray,
                 edge_ranges: np.ndarray) -> GraphTypes:
    offsets = [[0] + np.cumsum((r[..., 1] - r[..., 0]).sum(1)).tolist()
               for r in (node_ranges, edge_ranges)]
    return GraphTypes.from_json(
        {"ntypes": ntypes, "ntype_offsets": offsets[0],
         "canonical_etypes": [list(e) for e in etypes], "etype_offsets": offsets[1],
         "feat_dims": dict.fromkeys(ntypes, 0), "labeled": [], "category": None},
        f"{file} (fields 'ntypes' and 'etypes', as a dglx manifest would hold them)")


def _part_files(file: Path, m: dict[str, Any], num_parts: int) -> list[dict[str, Path]]:
    out = []
    for p in range(num_parts):
        entry = m.get(f"part-{p}")
        if not isinstance(entry, dict):
            raise _ERR(f"{file}: field 'part-{p}' = {entry!r:.80}; expected an object with "
                       f"{list(PART_FILE_KEYS)} file names")
        graphs = [k for k in GRAPH_KEYS if entry.get(k) is not None]
        if not graphs:
            raise _ERR(f"{file}: field 'part-{p}' names no part graph; expected "
                       f"'part_graph' (graph.dgl) or 'part_graph_graphbolt' "
                       f"(fused_csc_sampling_graph.pt)")
        paths = {key: _part_file(file, entry, p, key) for key in ("node_feats", "edge_feats")}
        found = [k for k in graphs if (file.parent / str(entry[k])).is_file()]
        if not dgl_installed():  # GraphBolt's file is read without DGL, graph.dgl through it
            found.sort(key=lambda k: k != "part_graph_graphbolt")
        key = (found or graphs)[0]  # DGL's graph.dgl first, where it is there
        paths[key] = _part_file(file, entry, p, key)
        out.append(paths)
    return out


def _part_file(file: Path, entry: dict[str, Any], p: int, key: str) -> Path:
    rel = entry.get(key)
    if not isinstance(rel, str) or not rel:
        raise _ERR(f"{file}: field 'part-{p}'.{key!r} = {rel!r:.80}; expected a file "
                   f"name relative to {file.parent}")
    path = (file.parent / rel).resolve()
    if not path.is_file():
        raise _ERR(f"{path}: missing (field 'part-{p}'.{key!r} of {file} names it)")
    return path


def read_dgl_config(json_path: str | os.PathLike) -> DglConfig:
    """Reads and checks DGL's partition JSON, and that every part file it names exists (with
    :attr:`DglConfig.types` when it lists more than one node or edge type).

    Raises:
        PartitionFormatError: naming the file, the field and what was expected.
    """
    file = Path(json_path)
    m = read_json_object(file, _ERR)
    for key in _INTS:
        if not _is_int(m.get(key)) or m[key] < (1 if key == "num_parts" else 0):
            raise _ERR(f"{file}: field {key!r} = {m.get(key)!r:.80}; expected an integer "
                       f"(is this the JSON file written by dgl.distributed.partition_graph?)")
    ntypes = _type_names(file, m, "node_map", "ntypes", "node")
    etypes = _type_names(file, m, "edge_map", "etypes", "edge")
    k = m["num_parts"]
    hops = m.get("halo_hops")
    if hops is not None and (not _is_int(hops) or (k > 1 and hops < 1)):
        raise _ERR(f"{file}: field 'halo_hops' = {hops!r}; expected an integer >= 1 (a part "
                   f"needs its core nodes' in-edges from other parts: partition with "
                   f"num_hops >= 1)")
    typed, canonical = len(ntypes) > 1 or len(etypes) > 1, []
    if typed:
        ntypes = _type_ids(file, m, "ntypes", str)
        canonical = _type_ids(file, m, "etypes", lambda name: _etype(file, name, ntypes))
        etypes = [":".join(e) for e in canonical]
    node_ranges, edge_ranges = (_ranges(file, m, key, names, k, m[total]) for key, names, total
                                in (("node_map", ntypes, "num_nodes"),
                                    ("edge_map", etypes, "num_edges")))
    types = (_graph_types(file, ntypes, canonical, node_ranges, edge_ranges) if typed else
             GraphTypes.one_type(m["num_nodes"], m["num_edges"], 0))  # DGL's _N, _N:_E:_N
    return DglConfig(
        path=file.resolve(), sha256=hashlib.sha256(file.read_bytes()).hexdigest(),
        graph_name=m.get("graph_name"), part_method=m.get("part_method"), halo_hops=hops,
        num_nodes=m["num_nodes"], num_edges=m["num_edges"], num_parts=k,
        node_offsets=np.append(node_ranges[0, :, 0], m["num_nodes"]),
        edge_offsets=np.append(edge_ranges[0, :, 0], m["num_edges"]),
        files=_part_files(file, m, k), ntypes=ntypes, etypes=etypes, node_ranges=node_ranges,
        edge_ranges=edge_ranges, types=types)


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
