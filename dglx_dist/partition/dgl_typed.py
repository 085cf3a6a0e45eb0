"""Importing DGL's ``partition_graph`` output of a heterograph as a typed partition directory.

DGL partitions a heterograph as its homogeneous form and relabels the nodes: part ``p``'s new
(homogeneous) ids are one run, and inside it each node type's are one run, the types in type
order (``node_map[ntype][p]``, :class:`~dglx_dist.partition.dgl_config.DglTypedConfig`);
edges likewise. The part graphs (``graph.dgl``) are homogeneous graphs whose ``ndata["_TYPE"]``
and ``edata["_TYPE"]`` hold DGL's type ids (GraphBolt's ``fused_csc_sampling_graph.pt`` holds
the edges' as ``type_per_edge`` and no node types: those follow from ``node_map``). What
becomes what here:

* ownership: part ``p`` owns DGL's new node ids of its ``node_map`` ranges, which stay the
  partitioned ids (the ranges become the :class:`~dglx_dist.partition.book.RangeBook`
  offsets), so each part's core nodes of one type are one run of local ids, the types' runs
  in order, as the typed format needs; ``ntype_counts`` are the lengths of the ranges.
* original ids: a node's ``orig_id`` is its original homogeneous id, the offset of its type
  (types in DGL's sorted order, as ``dgl.to_homogeneous`` numbers them) plus its per-type id.
  DGL 2.1 keeps no map back to the input graph's ids in its files (``partition_graph`` drops
  the parts' ``orig_id`` before saving them); ``partition_graph(..., return_mapping=True)``
  returns it per type: ``orig_nids[ntype][i]`` is the input graph's id of the node that is
  ``i``-th of its type in DGL's new order (its *new per-type id*: its position in the type's
  ``node_map`` ranges, part after part), and ``orig_eids[(src, rel, dst)]`` the same for
  edges. Without it, the per-type ids are DGL's new per-type ids (those DGL's own
  ``DistGraph`` uses), and the manifest's ``dataset`` provenance says so.
* structure: the in-edges of every core node (DGL's ``inner_node``) with their sources, as
  for homogeneous graphs; an edge's type is ``edata["_TYPE"]`` (checked against
  ``edge_map`` and against its endpoints' ``ndata["_TYPE"]``), its ``eid`` the type's edge
  offset plus its per-type (original, else DGL's new) edge id.
* node data, ``node_feat.dgl`` keys ``NTYPE/NAME`` (rows: the part's inner nodes of that type):
  ``NTYPE/feat`` becomes the type's ``feat-<type index>.arrow`` (a type without one has no
  features); ``NTYPE/label`` or ``NTYPE/labels`` (the name DistDGL's R-GCN example uses) the
  labels, and a type with labels is *labeled*; ``NTYPE/train_mask``, ``val_mask``,
  ``test_mask`` its masks (absent: all false, recorded). Nodes of types without labels get
  label -1 and false masks; a mask on such a type is refused
  (:class:`~dglx_dist.partition.dgl_files.NodeDataKeys` renames these). Every other name
  becomes node data of that name over the core nodes, zeros on types without it, as edge
  data is (:mod:`~dglx_dist.partition.dgl_data`): the manifest's ``node_data`` lists each
  name with the types that have it (``ntypes``). Names that cannot be kept (rows of more than
  one dimension, or a name our stored data takes) are listed under ``not_imported``.
* edge data, ``edge_feat.dgl`` keys ``SRC:REL:DST/NAME``: one edge-data column per name
  (:mod:`~dglx_dist.partition.dgl_data`), the types that have it in the manifest's
  ``types.edge_data``.

Every part must have the same node data per type; a key naming a type the JSON does not list
is refused. Every refusal is a :class:`~dglx_dist.errors.PartitionFormatError` naming the
file and the field, raised while the output is still a temporary directory (removed).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dglx_dist.data.checked import check_finite, check_range
from dglx_dist.errors import PartitionFormatError
from dglx_dist.partition.book import RangeBook
from dglx_dist.partition.dgl_data import DataImport
from dglx_dist.partition.dgl_config import DglTypedConfig
from dglx_dist.partition.dgl_files import (NodeDataKeys, checked_num_classes, class_ids,
                                           inner_edges, keeps, load_part_graph)
from dglx_dist.partition.dgl_tensors import PartGraph, read_tensor_file
from dglx_dist.partition.layout import Partition

__all__ = ["TypedImporter"]

_ERR = PartitionFormatError
_SPLITS = ("train", "val", "test")


class _Ids:
    """DGL's new ids of one kind (nodes or edges) as types and per-type ids, and the original
    homogeneous ids, from the ``(types, parts, 2)`` ranges of DGL's layout."""

    def __init__(self, ranges: np.ndarray, maps: list[np.ndarray | None], offsets: np.ndarray):
        num_types, num_parts = ranges.shape[:2]
        counts = ranges[..., 1] - ranges[..., 0]
        self.starts = ranges.transpose(1, 0, 2).reshape(-1, 2)[:, 0]  # part by part
        self.type = np.tile(np.arange(num_types), num_parts)
        self.base = (np.cumsum(counts, axis=1) - counts).T.reshape(-1)  # per-type id at start
        self.maps, self.offsets = maps, offsets

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


class TypedImporter:
    """Turns DGL's parts of a heterograph into typed :class:`Partition` objects, one at a
    time, checking each (see the module docstring)."""

    def __init__(self, cfg: DglTypedConfig, keys: NodeDataKeys,
                 orig_nids: list[np.ndarray | None], orig_eids: list[np.ndarray | None],
                 nonfinite: str):
        self.cfg, self.keys, self.nonfinite = cfg, keys, nonfinite
        types = cfg.types
        self.nodes = _Ids(cfg.node_ranges, orig_nids, types.ntype_offsets)
        self.edges = _Ids(cfg.edge_ranges, orig_eids, types.etype_offsets)
        self.given = (any(m is not None for m in orig_nids),
                      any(m is not None for m in orig_eids))
        self.ends = np.array([[types.ntype_index(s), types.ntype_index(d)]
                              for s, _, d in types.canonical_etypes], dtype=np.int64)
        self.names: tuple[dict, Path] | None = None  # per type, the data part 0 has
        self.feat_dims: dict[int, int] = {}
        self.labeled: set[int] = set()
        self.max_label, self.edge_cut, self.relabeled = -1, 0, False
        self.absent: set[str] = set()
        self.not_imported: dict[str, set[str]] = {"node_data": set()}  # edge data all imported
        self.edata = DataImport([":".join(e) for e in types.canonical_etypes], cfg.path)
        self.ndata = DataImport(list(types.ntypes), cfg.path, "node")

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
        return Partition(part=p, core_gid=core, core_orig=core_orig, halo_gid=s.halo_gid,
                         halo_orig=self.nodes.original(s.halo_gid), src=s.src, dst=s.dst,
                         eid=s.eid, feat=np.zeros((core.size, 0), np.float32), feat_cols=(0, 0),
                         ntype_counts=counts.astype(np.int64), edata=edata, **data)

    # -- structure ------------------------------------------------------------------------
    def _structure(self, p: int, files: dict[str, Path]) -> _Structure:
        lo, hi = (int(x) for x in self.cfg.node_offsets[p:p + 2])
        g = load_part_graph(files, (lo, hi), typed=True)
        inner, gid, ntype = self._nodes(p, g)
        src, dst = g.src, g.dst
        keep, new_eid = self._edges(p, g, inner, ntype)
        src, dst = src[keep], dst[keep]
        remote = ~inner[src]
        halo_gid = np.unique(gid[src[remote]])
        local = np.empty(g.num_nodes, dtype=np.int64)
        local[inner] = gid[inner] - lo  # the core ids are exactly [lo, hi): checked
        local_src = local[src]
        local_src[remote] = (hi - lo) + np.searchsorted(halo_gid, gid[src[remote]])
        self.edge_cut += int(np.count_nonzero(remote))
        orders = [np.argsort(gid[inner & (ntype == t)], kind="stable")
                  for t in range(len(self.cfg.types.ntypes))]
        return _Structure(orders, halo_gid, local_src, local[dst], self.edges.original(new_eid),
                          new_eid)

    def _nodes(self, p: int, g: PartGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The part graph's inner mask, new ids and node types, checked against node_map
        (the types taken from node_map where the file has none: GraphBolt's)."""
        cfg, names, file = self.cfg, self.cfg.types.ntypes, g.file
        lo, hi = (int(x) for x in cfg.node_offsets[p:p + 2])
        inner, gid = g.ndata["inner_node"], g.ndata["_ID"]
        ranges = f"[{lo}, {hi}) that {cfg.path} gives it in field 'node_map' (part {p}'s ranges)"
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

    def _edges(self, p: int, g: PartGraph, inner: np.ndarray,
               ntype: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows of the part's edges into inner nodes by DGL's new edge id, and those ids;
        checked against edge_map and the endpoints' types."""
        cfg, etypes = self.cfg, [":".join(e) for e in self.cfg.types.canonical_etypes]
        file, src, dst = g.file, g.src, g.dst
        elo, ehi = (int(x) for x in cfg.edge_offsets[p:p + 2])
        keep, new_eid = inner_edges(g, inner[dst], elo, ehi,
                                    f"{cfg.path} gives it in field 'edge_map' (part {p}'s ranges)")
        if "_TYPE" not in g.edata:  # graph.dgl's absence is refused when it is read
            raise _ERR(f"{file}: no edge types (type_per_edge); expected them in the part "
                       f"graph of a heterograph ({len(etypes)} edge types in {cfg.path})")
        all_types = g.edata["_TYPE"]
        check_range(all_types, 0, len(etypes), file, "_TYPE", "edge type id of field 'etypes'",
                    _ERR)
        etype, (expected, _) = all_types[keep], self.edges.split(new_eid)
        ends = self.ends[expected]
        bad = np.flatnonzero((etype != expected) | (ntype[src[keep]] != ends[:, 0])
                             | (ntype[dst[keep]] != ends[:, 1]))
        if bad.size:
            r, e = int(bad[0]), int(new_eid[bad[0]])
            names, want = cfg.types.ntypes, etypes[expected[r]]
            found = (f"edata['_TYPE'] = {etype[r]} ({etypes[etype[r]]!r})" if etype[r] !=
                     expected[r] else f"its ends are of types {names[ntype[src[keep[r]]]]!r} "
                     f"and {names[ntype[dst[keep[r]]]]!r} (ndata['_TYPE'])")
            raise _ERR(f"{file}: edge {e} (edata['_ID']): {found}; field 'edge_map' of "
                       f"{cfg.path} puts it in edge type {want!r}; expected that type and its "
                       f"ends")
        return keep, new_eid

    # -- node and edge data ---------------------------------------------------------------
    def _by_type(self, file: Path, tensors: dict[str, torch.Tensor]) -> list[dict]:
        """The tensors of each node type, by name; a key of no listed type is refused."""
        names = self.cfg.types.ntypes
        out: list[dict[str, torch.Tensor]] = [{} for _ in names]
        for key, t in tensors.items():
            ntype, sep, name = key.partition("/")
            if not sep or ntype not in names:
                raise _ERR(f"{file}: key {key!r}: {ntype!r} is not one of the node types "
                           f"{list(names)} of field 'ntypes' of {self.cfg.path}; expected "
                           f"keys NTYPE/NAME")
            out[names.index(ntype)][name] = t
        return out

    def _label_names(self) -> tuple[str, ...]:
        return ("label", "labels") if self.keys.label == "label" else (self.keys.label,)

    def _label_name(self, file: Path, ntype: str, data: dict) -> str | None:
        found = [n for n in self._label_names() if n in data]
        if len(found) > 1:
            raise _ERR(f"{file}: node type {ntype!r} has both {ntype}/label and {ntype}/labels; "
                       f"expected one (choose with --key label=NAME / keys={{'label': NAME}})")
        return found[0] if found else None

    def _node_data(self, file: Path, counts: np.ndarray, orders: list[np.ndarray]) -> dict:
        """Labels, masks (type after type) and per-type features of the part's core nodes."""
        by_type, keys, seen = self._by_type(file, read_tensor_file(file)), self.keys, {}
        label, feats, other = [], {}, {}
        masks: dict[str, list[np.ndarray]] = {s: [] for s in _SPLITS}
        for i, ntype in enumerate(self.cfg.types.ntypes):
            data, n, order = by_type[i], int(counts[i]), orders[i]
            name = self._label_name(file, ntype, data)
            if keys.feat in data:
                feats[i] = self._feat(file, i, f"{ntype}/{keys.feat}", data[keys.feat], n, order)
            if name is not None:
                label.append(self._label(file, f"{ntype}/{name}", data[name], n, order))
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
        if self.names is None:
            self.names = (seen, file)
        elif seen != self.names[0]:
            raise _ERR(f"{file}: node data {seen}; {self.names[1]} has {self.names[0]}; "
                       f"expected every part to have the same node data per type")

    def _feat(self, file: Path, i: int, key: str, t: torch.Tensor, n: int,
              order: np.ndarray) -> np.ndarray:
        feat = np.ascontiguousarray(_rows(file, key, t, n, order, False), dtype=np.float32)
        check_finite(feat, file, self.nonfinite, _ERR, key)
        if feat.shape[1] == 0:
            raise _ERR(f"{file}: {key!r} has no columns; expected at least one (leave the "
                       f"features out of a type that has none)")
        width = self.feat_dims.setdefault(i, feat.shape[1])
        if feat.shape[1] != width:
            raise _ERR(f"{file}: {key!r} has {feat.shape[1]} columns; expected {width}, as "
                       f"in the parts before")
        return feat

    def _label(self, file: Path, key: str, t: torch.Tensor, n: int,
               order: np.ndarray) -> np.ndarray:
        label = class_ids(_rows(file, key, t, n, order, True), file, key)
        self.max_label = max(self.max_label, int(label.max(initial=-1)))
        return label

    # -- manifest ---------------------------------------------------------------------------
    def header(self, num_classes: int | None) -> dict[str, Any]:
        """The typed manifest's fields, once every part has been read."""
        cfg = self.cfg
        num_classes = checked_num_classes(self.max_label, num_classes, cfg.path)
        names = cfg.types.ntypes
        labeled = tuple(t for i, t in enumerate(names) if i in self.labeled)
        types = dataclasses.replace(
            cfg.types, feat_dims={t: self.feat_dims.get(i, 0) for i, t in enumerate(names)},
            labeled=labeled, category=labeled[0] if len(labeled) == 1 else None,
            edge_data=self.edata.edge_data())
        spec = self.edata.spec()
        nspec = {n: {**v, "ntypes": [names[i] for i in self.ndata.edge_data()[n]]}
                 for n, v in self.ndata.spec().items()}
        return {
            "partitioner": {"name": "dgl", "options": {
                "part_method": cfg.part_method, "halo_hops": cfg.halo_hops,
                "graph_name": cfg.graph_name}},
            "num_parts": cfg.num_parts, "num_nodes": cfg.num_nodes, "num_edges": cfg.num_edges,
            "feat_dim": 0, "num_classes": num_classes, "relabeled": self.relabeled,
            "node_book": RangeBook(cfg.node_offsets).to_json(), "feature_layout": "rows",
            "feature_slices": [0, 0], "dataset": self.provenance(), "types": types.to_json(),
            "ndata_names": self._ndata_names(), **({"edge_data": spec} if spec else {}),
            **({"node_data": nspec} if nspec else {})}

    def _ndata_names(self) -> dict[str, str]:
        """The graph's own name of the labels where it is not ``label`` (``labels`` in DGL's
        R-GCN example): the manifest's ``ndata_names``."""
        seen = self.names[0].values() if self.names is not None else []
        used = {n for names in seen for n in names if n in self._label_names()}
        return {"label": used.pop()} if len(used) == 1 and "label" not in used else {}

    def provenance(self) -> dict[str, Any]:
        cfg, keys = self.cfg, self.keys
        given = "given (partition_graph's return_mapping=True output, per type)"
        dgl_ids = "DGL's relabelled per-type ids: the input graph's ids were not given"
        label = "NTYPE/label or NTYPE/labels" if keys.label == "label" else f"NTYPE/{keys.label}"
        return {
            "source": "dgl.distributed.partition_graph", "dgl_config": str(cfg.path),
            "dgl_config_sha256": cfg.sha256, "name": cfg.graph_name,
            "node_ids": given if self.given[0] else dgl_ids,
            "edge_ids": given if self.given[1] else dgl_ids,
            "node_data_keys": {**{k: f"NTYPE/{v}" for k, v in dataclasses.asdict(keys).items()},
                               "label": label},
            "absent_masks_as_false": sorted(self.absent),
            "not_imported": {k: sorted(v) for k, v in self.not_imported.items()},
            "edge_cut": self.edge_cut,
        }
