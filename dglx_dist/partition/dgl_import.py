"""Importing the output of DGL's ``dgl.distributed.partition_graph`` without repartitioning.

A DistDGL user's partitions (``graph_name.json``, :mod:`~dglx_dist.partition.dgl_config`, and
per part the part graph, ``node_feat.dgl`` and ``edge_feat.dgl``, read by
:mod:`~dglx_dist.partition.dgl_files`) become a dglx partition directory with the same owners
and node ids; a heterograph's a *typed* one, a graph without types being the one-type case
(DGL's ``_N`` and ``_N:_E:_N``). What goes where, and what is refused, is
docs/partition_format.md ("Importing DGL's partition_graph output"). Every refusal is a
:class:`~dglx_dist.errors.PartitionFormatError` naming the file and the field, raised while the
output is still a temporary directory (:func:`~dglx_dist.partition.io.write_partitions`). One
concept past ~400 lines: the importer, which turns each of DGL's parts into one of ours.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from dglx_dist.data.atomic import check_target
from dglx_dist.data.checked import check_finite, check_range
from dglx_dist.data.convert import require_dgl
from dglx_dist.errors import PartitionError, PartitionFormatError
from dglx_dist.partition.book import RangeBook
from dglx_dist.partition.dgl_config import DglConfig, read_dgl_config
from dglx_dist.partition.dgl_data import DataImport
from dglx_dist.partition.dgl_files import (USUAL_NAMES, NodeDataKeys, checked_num_classes,
                                           class_ids, found_keys, inner_edges, keeps,
                                           load_id_maps, load_part_graph, node_data_keys)
from dglx_dist.partition.dgl_tensors import PartGraph, read_tensor_file
from dglx_dist.partition.io import PARTITION_DIR, write_partitions
from dglx_dist.partition.layout import Partition, format_fields, stored

__all__ = ["import_dgl_partitions", "NodeDataKeys"]

log = logging.getLogger(__name__)
_ERR = PartitionFormatError
_SPLITS = ("train", "val", "test")


class _Ids:
    """DGL's new ids of one kind (nodes or edges) as types and per-type ids, and the original
    homogeneous ids, from the ``(types, parts, 2)`` ranges of DGL's layout."""

    def __init__(self, ranges: np.ndarray, maps: list[np.ndarray | None]):
        num_types, num_parts = ranges.shape[:2]
        counts = ranges[..., 1] - ranges[..., 0]
        self.starts = ranges.transpose(1, 0, 2).reshape(-1, 2)[:, 0]  # part by part
        self.type = np.tile(np.arange(num_types), num_parts)
        self.base = (np.cumsum(counts, axis=1) - counts).T.reshape(-1)  # per-type id at start
        self.offsets = np.concatenate([[0], np.cumsum(counts.sum(axis=1))[:-1]])
        self.maps = maps

    def split(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(type, DGL's new per-type id) of new ids (in range: checked by the caller)."""
        k = np.searchsorted(self.starts, ids, side="right") - 1
        return self.type[k], self.base[k] + ids - self.starts[k]

    def original(self, ids: np.ndarray) -> np.ndarray:
        """Original homogeneous ids of new ids."""
        t, per = self.split(ids)
        for i, m in enumerate(self.maps):
            if m is not None:
                sel = t == i
                per[sel] = m[per[sel]]
        return self.offsets[t] + per


def _id_maps(cfg: DglConfig, value, what: str) -> list[np.ndarray | None]:
    """The id maps of ``what`` (``orig_nids`` / ``orig_eids``), one per type."""
    nodes = what == "orig_nids"
    ranges = cfg.node_ranges if nodes else cfg.edge_ranges
    return load_id_maps(value, cfg.ntypes if nodes else cfg.etypes,
                        (ranges[..., 1] - ranges[..., 0]).sum(axis=1), what, cfg.typed)


@dataclasses.dataclass(frozen=True, eq=False)
class _Structure:
    """One part's structure in our local ids; ``orders[t]`` sorts the part's rows of node type
    ``t`` in ``node_feat.dgl`` (its inner nodes of that type) into our core order."""

    orders: list[np.ndarray]
    halo_gid: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    eid: np.ndarray
    new_eid: np.ndarray  # DGL's new edge ids of the part's edges


def _rows(file: Path, key: str, t: torch.Tensor, n: int, order: np.ndarray,
          one_value: bool) -> np.ndarray:
    if t.shape[:1] != (n,) or (one_value and t.numel() != n):
        raise _ERR(f"{file}: {key!r} has shape {tuple(t.shape)}; expected {n} rows (the part's "
                   f"inner nodes of that type){', one value each' if one_value else ''}")
    return t.reshape(n, -1).numpy()[order]


class _Importer:
    """Turns DGL's parts into :class:`Partition` objects (typed ones for a heterograph), one
    at a time, checking each (see the module docstring)."""

    def __init__(self, cfg: DglConfig, keys: NodeDataKeys, orig_nids, orig_eids,
                 nonfinite: str):
        self.cfg, self.keys, self.nonfinite, self.typed = cfg, keys, nonfinite, cfg.typed
        nids, eids = _id_maps(cfg, orig_nids, "orig_nids"), _id_maps(cfg, orig_eids, "orig_eids")
        self.nodes, self.edges = _Ids(cfg.node_ranges, nids), _Ids(cfg.edge_ranges, eids)
        self.given = (any(m is not None for m in nids), any(m is not None for m in eids))
        self.ends = np.array([[cfg.types.ntype_index(s), cfg.types.ntype_index(d)]
                              for s, _, d in cfg.types.canonical_etypes])  # each edge type's
        self.names: tuple[dict, Path] | None = None  # per type, the data part 0 has
        self.feat_dims: dict[int, int] = {}
        self.labeled: set[int] = set()
        self.max_label, self.edge_cut, self.relabeled = -1, 0, False
        self.absent: set[str] = set()
        self.not_imported: dict[str, set[str]] = {"node_data": set()}  # edge data all imported
        self.edata = DataImport(cfg.etypes, cfg.path)
        self.ndata = DataImport(cfg.ntypes, cfg.path, "node")

    def part(self, p: int) -> Partition:
        cfg, files = self.cfg, self.cfg.files[p]
        s = self._structure(p, files)
        counts = cfg.node_ranges[:, p, 1] - cfg.node_ranges[:, p, 0]
        data = self._node_data(files["node_feats"], counts, s.orders)
        ranges = cfg.edge_ranges[:, p]
        etype, _ = self.edges.split(s.new_eid)
        edata = self.edata.part(files["edge_feats"], read_tensor_file(files["edge_feats"]), etype,
                                s.new_eid - ranges[etype, 0], ranges[:, 1] - ranges[:, 0])
        core = np.arange(cfg.node_offsets[p], cfg.node_offsets[p + 1], dtype=np.int64)
        core_orig = self.nodes.original(core)
        self.relabeled |= not np.array_equal(core_orig, core)
        pc = Partition(part=p, core_gid=core, core_orig=core_orig, halo_gid=s.halo_gid,
                       halo_orig=self.nodes.original(s.halo_gid), src=s.src, dst=s.dst, eid=s.eid,
                       feat=np.zeros((core.size, 0), np.float32), feat_cols=(0, 0), edata=edata,
                       ntype_counts=counts.astype(np.int64), **data)
        return stored(pc, self._format(), columns=False)

    def _field(self, key: str, p: int) -> str:
        """The JSON field of part ``p``'s ranges of ``key`` (``node_map`` / ``edge_map``)."""
        names = self.cfg.ntypes if key == "node_map" else self.cfg.etypes
        return f"field {key!r} (part {p}'s ranges)" if self.typed else \
            f"field {key!r}[{names[0]!r}][{p}]"

    # -- structure ------------------------------------------------------------------------
    def _structure(self, p: int, files: dict[str, Path]) -> _Structure:
        lo, hi = (int(x) for x in self.cfg.node_offsets[p:p + 2])
        g = load_part_graph(files, (lo, hi), typed=self.typed)
        inner, gid, ntype = self._nodes(p, g)
        src, dst = g.src, g.dst
        elo, ehi = (int(x) for x in self.cfg.edge_offsets[p:p + 2])
        keep, new_eid = inner_edges(g, inner[dst], elo, ehi,  # core nodes' in-edges
                                    f"{self.cfg.path} gives it in {self._field('edge_map', p)}")
        if self.typed or "_TYPE" in g.edata:
            self._check_edge_types(p, g, keep, new_eid, ntype)
        src, dst = src[keep], dst[keep]
        remote = ~inner[src]
        halo_gid = np.unique(gid[src[remote]])
        local = np.empty(g.num_nodes, dtype=np.int64)
        local[inner] = gid[inner] - lo  # the core ids are exactly [lo, hi): checked
        local_src = local[src]
        local_src[remote] = (hi - lo) + np.searchsorted(halo_gid, gid[src[remote]])
        self.edge_cut += int(np.count_nonzero(remote))
        orders = [np.argsort(gid[inner & (ntype == t)], kind="stable")
                  for t in range(len(self.cfg.ntypes))]
        return _Structure(orders, halo_gid, local_src, local[dst], self.edges.original(new_eid),
                          new_eid)

    def _nodes(self, p: int, g: PartGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The part graph's inner mask, new ids and node types, checked against node_map
        (the types taken from node_map where the file has none: GraphBolt's, or no types)."""
        cfg, names, file = self.cfg, self.cfg.ntypes, g.file
        lo, hi = (int(x) for x in cfg.node_offsets[p:p + 2])
        inner, gid = g.ndata["inner_node"], g.ndata["_ID"]
        ranges = f"[{lo}, {hi}) that {cfg.path} gives it in {self._field('node_map', p)}"
        if not np.array_equal(np.sort(gid[inner]), np.arange(lo, hi)):
            raise _ERR(f"{file}: its {int(inner.sum())} inner nodes (ndata['inner_node']) do "
                       f"not have the ids (ndata['_ID']) {ranges}; expected exactly those "
                       f"{hi - lo} ids (the part does not belong to this JSON)")
        check_range(gid, 0, cfg.num_nodes, file, "_ID", "node id", _ERR)
        if np.any(~inner & (gid >= lo) & (gid < hi)):
            raise _ERR(f"{file}: a HALO node (inner_node = 0) has an id in the range {ranges}; "
                       f"expected HALO nodes to be owned by other parts")
        expected, _ = self.nodes.split(gid)
        ntype = g.ndata.get("_TYPE", expected)
        check_range(ntype, 0, len(names), file, "_TYPE", "node type id of field 'ntypes'", _ERR)
        bad = np.flatnonzero(ntype != expected)
        if bad.size:
            r = int(bad[0])
            raise _ERR(f"{file}: ndata['_TYPE'] row {r} = {ntype[r]} ({names[ntype[r]]!r}) for "
                       f"node {gid[r]}; field 'node_map' of {cfg.path} puts node {gid[r]} in "
                       f"type {names[expected[r]]!r}; expected the same type")
        return inner, gid, ntype

    def _check_edge_types(self, p: int, g: PartGraph, keep: np.ndarray, new_eid: np.ndarray,
                          ntype: np.ndarray) -> None:
        """The types of the part's edges into inner nodes (rows ``keep``, DGL's new ids
        ``new_eid``), checked against edge_map and the endpoints' types."""
        cfg, etypes, file = self.cfg, self.cfg.etypes, g.file
        if "_TYPE" not in g.edata:  # graph.dgl's absence is refused when it is read
            raise _ERR(f"{file}: no edge types (type_per_edge); expected them in the part "
                       f"graph of a heterograph ({len(etypes)} edge types in {cfg.path})")
        all_types = g.edata["_TYPE"]
        check_range(all_types, 0, len(etypes), file, "_TYPE", "edge type id of field 'etypes'",
                    _ERR)
        etype, (expected, _) = all_types[keep], self.edges.split(new_eid)
        src, dst, ends = g.src[keep], g.dst[keep], self.ends[expected]
        bad = np.flatnonzero((etype != expected) | (ntype[src] != ends[:, 0])
                             | (ntype[dst] != ends[:, 1]))
        if bad.size:
            r, e = int(bad[0]), int(new_eid[bad[0]])
            names, want = cfg.ntypes, etypes[expected[r]]
            found = (f"edata['_TYPE'] = {etype[r]} ({etypes[etype[r]]!r})" if etype[r] !=
                     expected[r] else f"its ends are of types {names[ntype[src[r]]]!r} "
                     f"and {names[ntype[dst[r]]]!r} (ndata['_TYPE'])")
            raise _ERR(f"{file}: edge {e} (edata['_ID']): {found}; field 'edge_map' of "
                       f"{cfg.path} puts it in edge type {want!r}; expected that type and its "
                       f"ends")

    # -- node data ------------------------------------------------------------------------
    def _by_type(self, file: Path, tensors: dict[str, torch.Tensor]) -> list[dict]:
        """The tensors of each node type, by name; a key of no listed type is refused (not
        imported without types: DGL writes ``_N/`` keys only)."""
        names = self.cfg.ntypes
        out: list[dict[str, torch.Tensor]] = [{} for _ in names]
        for key, t in tensors.items():
            ntype, sep, name = key.partition("/")
            if sep and ntype in names:
                out[names.index(ntype)][name] = t
            elif not self.typed:
                self.not_imported["node_data"].add(key)
            else:
                raise _ERR(f"{file}: key {key!r}: {ntype!r} is not one of the node types "
                           f"{names} of field 'ntypes' of {self.cfg.path}; expected keys "
                           f"NTYPE/NAME")
        if not self.typed and self.names is None:  # the first part names them for all
            self.keys = found_keys(self.keys, out[0])
        return out

    def _label_names(self) -> tuple[str, ...]:
        return (("label", "labels") if self.typed and self.keys.label == "label"
                else (self.keys.label,))

    def _label_name(self, file: Path, ntype: str, data: dict) -> str | None:
        found = [n for n in self._label_names() if n in data]
        if len(found) > 1:
            raise _ERR(f"{file}: node type {ntype!r} has both {ntype}/label and {ntype}/labels; "
                       f"expected one (choose with --key label=NAME / keys={{'label': NAME}})")
        return found[0] if found else None

    def _node_data(self, file: Path, counts: np.ndarray, orders: list[np.ndarray]) -> dict:
        """Labels, masks (type after type), per-type features and the other node data of the
        part's core nodes."""
        tensors = read_tensor_file(file)
        by_type, seen, label, feats, other = self._by_type(file, tensors), {}, [], {}, {}
        masks: dict[str, list[np.ndarray]] = {s: [] for s in _SPLITS}
        for i, ntype in enumerate(self.cfg.ntypes):
            data, n, order, keys = by_type[i], int(counts[i]), orders[i], self.keys
            name = self._label_name(file, ntype, data)
            self._required(file, ntype, data, name, sorted(tensors))
            if keys.feat in data:
                feats[i] = self._feat(file, i, f"{ntype}/{keys.feat}", data[keys.feat], n, order)
            if name is not None:
                key = f"{ntype}/{name}"
                label.append(class_ids(_rows(file, key, data[name], n, order, True), file, key))
                self.max_label = max(self.max_label, int(label[-1].max(initial=-1)))
                self.labeled.add(i)
            else:
                label.append(np.full(n, -1, dtype=np.int64))
            for split in _SPLITS:
                masks[split].append(self._mask(file, ntype, getattr(keys, split), data, order,
                                               name is not None))
            used = {keys.feat, name, keys.train, keys.val, keys.test}
            seen[ntype] = sorted(k for k in data if k in used)
            other.update({f"{ntype}/{k}": t for k, t in data.items() if k not in used})
        self._same_names(file, seen)
        kept = {k: t for k, t in other.items() if keeps(k, t)}
        self.not_imported["node_data"].update(k for k in other if k not in kept)
        ndata = self.ndata.part(file, kept, np.repeat(np.arange(counts.size), counts),
                                np.concatenate(orders), counts)
        return {"label": np.concatenate(label), "type_feat": feats, "ndata": ndata,
                **{s: np.concatenate(m) for s, m in masks.items()}}

    def _required(self, file: Path, ntype: str, data: dict, label: str | None,
                  found: list[str]) -> None:
        """Without types, the features and the labels are required."""
        if self.typed:
            return
        for ours, name in (("feat", self.keys.feat), ("label", label)):
            if name is None or name not in data:
                key = f"{ntype}/{getattr(self.keys, ours)}"
                raise _ERR(f"{file}: no {key!r} (the {ours} key; found {found}); pass the name "
                           f"the graph's ndata used (NodeDataKeys / --key {ours}=NAME)")

    def _mask(self, file: Path, ntype: str, name: str, data: dict, order: np.ndarray,
              labeled: bool) -> np.ndarray:
        key = f"{ntype}/{name}"
        if name not in data:
            if labeled:
                self.absent.add(key)
            return np.zeros(order.size, dtype=bool)
        if not labeled:
            labels = " or ".join(f"{ntype}/{n}" for n in self._label_names())
            raise _ERR(f"{file}: {key!r} is a mask of node type {ntype!r}, which has no "
                       f"{labels}; expected masks only on labeled types")
        return _rows(file, key, data[name], order.size, order, True).reshape(-1) != 0

    def _same_names(self, file: Path, seen: dict[str, list[str]]) -> None:
        """With types, every part must have the node data part 0 has."""
        if self.names is None:
            self.names = (seen, file)
        elif seen != self.names[0] and self.typed:
            raise _ERR(f"{file}: node data {seen}; {self.names[1]} has {self.names[0]}; "
                       f"expected every part to have the same node data per type")

    def _feat(self, file: Path, i: int, key: str, t: torch.Tensor, n: int,
              order: np.ndarray) -> np.ndarray:
        feat = np.ascontiguousarray(_rows(file, key, t, n, order, False), dtype=np.float32)
        check_finite(feat, file, self.nonfinite, _ERR, key)
        if feat.shape[1] == 0 and self.typed:
            raise _ERR(f"{file}: {key!r} has no columns; expected at least one (leave the "
                       f"features out of a type that has none)")
        width = self.feat_dims.setdefault(i, feat.shape[1])
        if feat.shape[1] != width:
            raise _ERR(f"{file}: {key!r} has {feat.shape[1]} columns; expected {width}, as "
                       f"in the parts before")
        return feat

    # -- manifest ---------------------------------------------------------------------------
    def header(self, num_classes: int | None) -> dict[str, Any]:
        """The manifest's fields (a typed one's for a heterograph), once every part has been
        read."""
        cfg, typed = self.cfg, self.typed
        num_classes = checked_num_classes(self.max_label, num_classes, cfg.path)
        fmt, spec, nspec = self._format(), self.edata.spec(), self.ndata.spec()
        if typed:
            nspec = {n: {**v, "ntypes": [cfg.ntypes[i] for i in self.ndata.edge_data()[n]]}
                     for n, v in nspec.items()}
        return {
            "partitioner": {"name": "dgl", "options": {
                "part_method": cfg.part_method, "halo_hops": cfg.halo_hops,
                "graph_name": cfg.graph_name}},
            "num_parts": cfg.num_parts, "num_nodes": cfg.num_nodes, "num_edges": cfg.num_edges,
            "feat_dim": fmt["feat_dim"], "num_classes": num_classes,
            "relabeled": self.relabeled, "node_book": RangeBook(cfg.node_offsets).to_json(),
            "feature_layout": "rows", "feature_slices": fmt["feature_slices"],
            "dataset": self.provenance(), **fmt,
            "ndata_names": self._ndata_names(), **({"edge_data": spec} if spec else {}),
            **({"node_data": nspec} if nspec else {})}

    def _format(self) -> dict[str, Any]:
        """The manifest's format fields (:func:`~dglx_dist.partition.layout.format_fields`) of
        the types read so far."""
        names = self.cfg.types.ntypes
        labeled = tuple(t for i, t in enumerate(names) if i in self.labeled)
        types = dataclasses.replace(
            self.cfg.types, feat_dims={t: self.feat_dims.get(i, 0) for i, t in enumerate(names)},
            labeled=labeled, category=labeled[0] if len(labeled) == 1 else None,
            edge_data=self.edata.edge_data())
        return format_fields(types, self.cfg.num_parts, columns=False)

    def _ndata_names(self) -> dict[str, str]:
        """The manifest's ``ndata_names``: the node data names of the graph. Without types,
        those of the features and the labels; with types, the labels' where it is not
        ``label`` (``labels`` in DGL's R-GCN example)."""
        if not self.typed:
            return {k: getattr(self.keys, k) for k in USUAL_NAMES}
        seen = self.names[0].values() if self.names is not None else []
        used = {n for names in seen for n in names if n in self._label_names()}
        return {"label": used.pop()} if len(used) == 1 and "label" not in used else {}

    def provenance(self) -> dict[str, Any]:
        cfg, keys, typed = self.cfg, self.keys, self.typed
        per_type = (", per type", "per-type ") if typed else ("", "")
        given = f"given (partition_graph's return_mapping=True output{per_type[0]})"
        dgl_ids = f"DGL's relabelled {per_type[1]}ids: the input graph's ids were not given"
        prefix = "NTYPE" if typed else cfg.ntypes[0]
        return {
            "source": "dgl.distributed.partition_graph", "dgl_config": str(cfg.path),
            "dgl_config_sha256": cfg.sha256, "name": cfg.graph_name,
            "node_ids": given if self.given[0] else dgl_ids,
            "edge_ids": given if self.given[1] else dgl_ids,
            "node_data_keys": {**{k: f"{prefix}/{v}" for k, v in dataclasses.asdict(keys).items()},
                               "label": " or ".join(f"{prefix}/{n}" for n in self._label_names())},
            "absent_masks_as_false": sorted(self.absent),
            "not_imported": {k: sorted(v) for k, v in self.not_imported.items()},
            "edge_cut": self.edge_cut,
        }


def import_dgl_partitions(json_path: str | os.PathLike, out_dir: str | os.PathLike,
                          overwrite: bool = False, *, orig_nids=None, orig_eids=None,
                          num_classes: int | None = None,
                          keys: NodeDataKeys | dict[str, str] | None = None,
                          nonfinite: str = "reject", progress: bool = False) -> Path:
    """Turns DGL's ``partition_graph`` output into a dglx partition directory, keeping its
    node-to-part assignment and node ids (no repartitioning); a heterograph's into a typed
    one (see the module docstring).

    Args:
        json_path: the ``GRAPH_NAME.json`` file DGL wrote.
        out_dir: the partition directory to create (atomically).
        overwrite: replace ``out_dir`` if it is a dglx partition directory.
        orig_nids: the input graph's id of each DGL node id (``partition_graph(...,
            return_mapping=True)``'s first result; array, tensor, ``.npy`` or ``.pt`` file).
            Default: DGL's ids are the original ids. For a heterograph, its per-type dict
            ``{ntype: ids}`` (or a ``.pt`` / ``.npz`` file holding one).
        orig_eids: the same for edge ids (its second result; for a heterograph a dict by
            canonical edge type, keys ``(src, rel, dst)`` or ``"src:rel:dst"``); default
            DGL's edge ids.
        num_classes: default: the largest label over all parts, plus one.
        keys: the node data names in ``node_feat.dgl`` (:class:`NodeDataKeys` or a dict of
            its fields); absent masks are imported as all-false.
        nonfinite: NaN / Inf features: "reject" (an error) or "warn".
        progress: show a progress bar over the parts.

    Returns:
        ``out_dir``, which :class:`~dglx_dist.partition.PartitionDir` opens.

    Raises:
        PartitionFormatError: DGL's files are incomplete or inconsistent (the message
            names the file, the field and what was expected).
        PartitionError: a bad argument or output directory, before anything is written.
        MissingDependencyError: a part's graph is a ``graph.dgl`` (no GraphBolt file beside
            it) and DGL is not installed.
    """
    cfg = read_dgl_config(json_path)
    if any("part_graph" in files for files in cfg.files):
        require_dgl(f"{cfg.path}: reading its parts' graph.dgl", "DGL's GraphBolt parts, "
                    "dgl.distributed.dgl_partition_to_graphbolt, are read without it")
    out = Path(out_dir)
    check_target(out, overwrite, PARTITION_DIR, (cfg.path.parent,), PartitionError)
    importer = _Importer(cfg, node_data_keys(keys), orig_nids, orig_eids, nonfinite)
    with tqdm(total=cfg.num_parts, desc="import DGL parts", disable=None if progress else True,
              unit="part") as bar:
        write_partitions(out, lambda: importer.header(num_classes),
                         map(importer.part, range(cfg.num_parts)), overwrite=overwrite,
                         on_part=lambda _: bar.update(), inputs=(cfg.path.parent,))
    prov = importer.provenance()
    log.info("imported %d DGL parts of %s into %s (edge cut %d of %d edges)", cfg.num_parts,
             cfg.path, out, importer.edge_cut, cfg.num_edges)
    for kind, names in prov["not_imported"].items():
        if names:
            log.warning("not imported from the DGL partitions: %s %s", kind, names)
    return out
