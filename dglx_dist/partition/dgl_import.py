"""Importing the output of DGL's ``dgl.distributed.partition_graph`` without repartitioning.

A DistDGL user's partitions (``graph_name.json`` plus ``part{i}/graph.dgl``, ``node_feat.dgl``,
``edge_feat.dgl``, see :mod:`dglx_dist.partition.dgl_config`) become a dglx partition directory
(:mod:`dglx_dist.partition.io`) with the same decisions:

* ownership and ids: part ``p`` owns DGL's new node ids ``node_map[p]``; these stay the global
  ids (what a DistGraph user sees), so ``node_map``'s ranges become the
  :class:`~dglx_dist.partition.book.RangeBook` offsets;
* structure: every edge whose destination is a core node (DGL's ``inner_node``) with its
  sources, i.e. all in-edges of the core nodes; sources owned elsewhere are the HALO nodes. Edges
  DGL keeps for deeper HALO hops (``num_hops > 1``) are left out, as our HALO rule has one hop;
* node data: features, labels and train/val/test masks from ``node_feat.dgl`` (keys
  ``NTYPE/NAME``, e.g. ``_N/feat``; the names are :class:`NodeDataKeys`); every other name
  (``trainer_id``, which ``partition_graph(num_trainers_per_machine=N)`` adds, or the user's
  own) becomes node data of that name, dtype and row shape kept
  (:mod:`~dglx_dist.partition.dgl_data`);
* original ids: DGL stores no map back to the input graph's ids; ``partition_graph(...,
  return_mapping=True)`` returns it (``orig_nids``, ``orig_eids``) and the user may pass it
  here. Without it, the original ids are DGL's new ids, and the manifest's ``dataset``
  provenance says so.

* edge data: each ``edge_feat.dgl`` tensor (keys ``SRC:REL:DST/NAME``, e.g. ``_N:_E:_N/w``)
  becomes the edge-data column ``NAME`` (:mod:`~dglx_dist.partition.dgl_data`).

Node data that cannot be kept (more than one dimension per row, or a name that our stored
names already take, such as ``label`` beside labels named ``labels``) is not imported: its
names are recorded under ``not_imported`` in the provenance and logged, and nothing is
refused.

A heterograph's partitions (more than one node or edge type in the JSON) become a *typed*
partition directory the same way; what differs (per-type ids, features and labels) is in
:mod:`~dglx_dist.partition.dgl_typed`.

**Nothing is unpickled unchecked** (how DGL's files are read:
:mod:`~dglx_dist.partition.dgl_files`).

The directory is written into a temporary sibling and renamed into place
(:func:`~dglx_dist.partition.io.write_partitions`); an existing output is replaced only with
``overwrite`` and only when it is itself a dglx partition directory.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from dglx_dist.data.atomic import check_target
from dglx_dist.data.checked import check_finite, check_range
from dglx_dist.errors import PartitionError, PartitionFormatError
from dglx_dist.partition.book import RangeBook
from dglx_dist.partition.dgl_config import DglConfig, DglTypedConfig, read_dgl_config
from dglx_dist.partition.dgl_data import DataImport
from dglx_dist.partition.dgl_files import (USUAL_NAMES, NodeDataKeys, checked_num_classes,
                                           class_ids, found_keys, inner_edges, keeps,
                                           load_id_map, load_part_graph, load_typed_id_maps,
                                           node_data_keys)
from dglx_dist.partition.dgl_tensors import read_tensor_file
from dglx_dist.partition.dgl_typed import TypedImporter
from dglx_dist.partition.io import PARTITION_DIR, write_partitions
from dglx_dist.partition.layout import Partition

__all__ = ["import_dgl_partitions", "NodeDataKeys", "load_id_map", "load_typed_id_maps"]

log = logging.getLogger(__name__)
_ERR = PartitionFormatError


@dataclasses.dataclass(frozen=True, eq=False)
class _Structure:
    """One part's structure in our local ids. ``core_order`` sorts DGL's inner-node rows (the
    rows of ``node_feat.dgl``) into our core order (increasing global id)."""

    core_order: np.ndarray
    halo_gid: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    eid: np.ndarray
    new_eid: np.ndarray  # DGL's new edge ids of the part's edges


class _Importer:
    """Turns DGL's parts into :class:`Partition` objects, one at a time, checking each."""

    def __init__(self, cfg: DglConfig, keys: NodeDataKeys, orig_nids: np.ndarray | None,
                 orig_eids: np.ndarray | None, nonfinite: str):
        self.cfg, self.keys, self.nonfinite = cfg, keys, nonfinite
        self.orig_nids, self.orig_eids = orig_nids, orig_eids
        self.feat_dim: int | None = None
        self.max_label = -1
        self.edge_cut = 0
        self.absent: set[str] = set()
        self.not_imported: dict[str, set[str]] = {"node_data": set()}  # edge data all imported
        self.edata = DataImport([cfg.etype], cfg.path)
        self.ndata = DataImport([cfg.ntype], cfg.path, "node")

    def part(self, p: int) -> Partition:
        files = self.cfg.files[p]
        s = self._structure(p, files)
        nc = s.core_order.size
        data, ndata = self._node_data(files["node_feats"], nc, s.core_order)
        lo, hi = (int(x) for x in self.cfg.edge_offsets[p:p + 2])
        edata = self.edata.part(files["edge_feats"], read_tensor_file(files["edge_feats"]),
                                np.zeros(s.new_eid.size, np.int64), s.new_eid - lo,
                                np.array([hi - lo]))
        core = np.arange(self.cfg.node_offsets[p], self.cfg.node_offsets[p + 1], dtype=np.int64)
        return Partition(part=p, core_gid=core, core_orig=self._orig(core), halo_gid=s.halo_gid,
                         halo_orig=self._orig(s.halo_gid), src=s.src, dst=s.dst, eid=s.eid,
                         feat_cols=(0, data["feat"].shape[1]), edata=edata, ndata=ndata, **data)

    def _orig(self, gids: np.ndarray) -> np.ndarray:
        return gids.copy() if self.orig_nids is None else self.orig_nids[gids]

    def _structure(self, p: int, files: dict[str, Path]) -> _Structure:
        cfg = self.cfg
        lo, hi = (int(x) for x in cfg.node_offsets[p:p + 2])
        g = load_part_graph(files, (lo, hi))
        file, inner, gid = g.file, g.ndata["inner_node"], g.ndata["_ID"]
        node_map = f"[{lo}, {hi}) that {cfg.path} gives it in field 'node_map'[{cfg.ntype!r}][{p}]"
        core_rows = np.flatnonzero(inner)
        order = np.argsort(gid[core_rows], kind="stable")
        if core_rows.size != hi - lo or not np.array_equal(gid[core_rows][order],
                                                            np.arange(lo, hi)):
            raise _ERR(f"{file}: its {core_rows.size} inner nodes (ndata['inner_node']) do not "
                       f"have the ids (ndata['_ID']) {node_map}; expected exactly those "
                       f"{hi - lo} ids (the part does not belong to this JSON)")
        check_range(gid[~inner], 0, cfg.num_nodes, file, "_ID", "node id of a HALO node", _ERR)
        if np.any((gid[~inner] >= lo) & (gid[~inner] < hi)):
            raise _ERR(f"{file}: a HALO node (inner_node = 0) has an id in the range "
                       f"{node_map}; expected HALO nodes to be owned by other parts")
        src, dst = g.src, g.dst
        elo, ehi = (int(x) for x in cfg.edge_offsets[p:p + 2])
        keep, new_eid = inner_edges(g, inner[dst], elo, ehi,  # core nodes' in-edges
                                    f"{cfg.path} gives it in field 'edge_map'[{cfg.etype!r}][{p}]")
        src, dst = src[keep], dst[keep]
        remote = ~inner[src]
        halo_gid = np.unique(gid[src[remote]])
        local = np.empty(g.num_nodes, dtype=np.int64)
        local[core_rows[order]] = np.arange(hi - lo, dtype=np.int64)
        local_src = local[src]
        local_src[remote] = (hi - lo) + np.searchsorted(halo_gid, gid[src[remote]])
        self.edge_cut += int(np.count_nonzero(remote))
        eid = new_eid if self.orig_eids is None else self.orig_eids[new_eid]
        return _Structure(order, halo_gid, local_src, local[dst], eid, new_eid)

    def _node_data(self, file: Path, nc: int, order: np.ndarray) -> tuple[dict, dict]:
        """Features, labels and masks of the core nodes, in our core order; and the other node
        data by name."""
        tensors, prefix = read_tensor_file(file), f"{self.cfg.ntype}/"
        if self.feat_dim is None:  # the first part names the features and labels for all
            self.keys = found_keys(self.keys, {k[len(prefix):]: t for k, t in tensors.items()
                                               if k.startswith(prefix)})
        wanted = {f"{prefix}{k}": ours for ours, k in dataclasses.asdict(self.keys).items()}
        out: dict[str, np.ndarray] = {}
        for key, ours in wanted.items():
            t = tensors.get(key)
            if t is None and ours in ("feat", "label"):
                raise _ERR(f"{file}: no {key!r} (the {ours} key; found {sorted(tensors)}); pass "
                           f"the name the graph's ndata used (NodeDataKeys / --key {ours}=NAME)")
            if t is None:
                self.absent.add(key)
                out[ours] = np.zeros(nc, dtype=bool)
                continue
            if t.shape[:1] != (nc,) or (ours != "feat" and t.dim() > 1 and t[0].numel() != 1):
                raise _ERR(f"{file}: {key!r} has shape {tuple(t.shape)}; expected {nc} rows (the "
                           f"part's inner nodes){'' if ours == 'feat' else ', one value each'}")
            out[ours] = self._convert(ours, t.reshape(nc, -1).numpy()[order], file, key)
        other = {k: t for k, t in tensors.items()
                 if k not in wanted and k.startswith(prefix) and keeps(k, t)}
        self.not_imported["node_data"].update(k for k in tensors if k not in wanted and
                                              k not in other)
        return out, self.ndata.part(file, other, np.zeros(nc, np.int64), order,
                                    np.array([nc]))

    def _convert(self, ours: str, a: np.ndarray, file: Path, key: str) -> np.ndarray:
        if ours == "feat":
            feat = np.ascontiguousarray(a, dtype=np.float32)
            check_finite(feat, file, self.nonfinite, _ERR, key)
            if self.feat_dim is not None and feat.shape[1] != self.feat_dim:
                raise _ERR(f"{file}: {key!r} has {feat.shape[1]} columns; the parts before have "
                           f"{self.feat_dim}")
            self.feat_dim = feat.shape[1]
            return feat
        a = a.reshape(-1)
        if ours != "label":
            return a != 0
        label = class_ids(a, file, key)
        self.max_label = max(self.max_label, int(label.max(initial=-1)))
        return label

    def header(self, num_classes: int | None) -> dict[str, Any]:
        """The manifest fields, once every part has been read."""
        cfg = self.cfg
        num_classes = checked_num_classes(self.max_label, num_classes, cfg.path)
        ident = np.arange(cfg.num_nodes, dtype=np.int64)
        relabeled = self.orig_nids is not None and not np.array_equal(self.orig_nids, ident)
        return {
            "partitioner": {"name": "dgl", "options": {
                "part_method": cfg.part_method, "halo_hops": cfg.halo_hops,
                "graph_name": cfg.graph_name}},
            "num_parts": cfg.num_parts, "num_nodes": cfg.num_nodes, "num_edges": cfg.num_edges,
            "feat_dim": self.feat_dim, "num_classes": num_classes, "relabeled": relabeled,
            "node_book": RangeBook(cfg.node_offsets).to_json(), "feature_layout": "rows",
            "feature_slices": [0, self.feat_dim], "dataset": self.provenance(),
            "ndata_names": {k: getattr(self.keys, k) for k in USUAL_NAMES},
            **({"edge_data": self.edata.spec()} if self.edata.kinds else {}),
            **({"node_data": self.ndata.spec()} if self.ndata.kinds else {}),
        }

    def provenance(self) -> dict[str, Any]:
        cfg, given = self.cfg, "given (partition_graph's return_mapping=True output)"
        dgl_ids = "DGL's relabelled ids: the input graph's ids were not given"
        return {
            "source": "dgl.distributed.partition_graph", "dgl_config": str(cfg.path),
            "dgl_config_sha256": cfg.sha256, "name": cfg.graph_name,
            "node_ids": given if self.orig_nids is not None else dgl_ids,
            "edge_ids": given if self.orig_eids is not None else dgl_ids,
            "node_data_keys": {k: f"{cfg.ntype}/{v}"
                               for k, v in dataclasses.asdict(self.keys).items()},
            "absent_masks_as_false": sorted(self.absent),
            "not_imported": {k: sorted(v) for k, v in self.not_imported.items()},
            "edge_cut": self.edge_cut,
        }


def _importer(cfg: DglConfig | DglTypedConfig, keys: NodeDataKeys, orig_nids, orig_eids,
              nonfinite: str) -> _Importer | TypedImporter:
    if not isinstance(cfg, DglTypedConfig):
        return _Importer(cfg, keys, load_id_map(orig_nids, cfg.num_nodes, "orig_nids"),
                         load_id_map(orig_eids, cfg.num_edges, "orig_eids"), nonfinite)
    types = cfg.types
    nids = load_typed_id_maps(orig_nids, types.ntypes, np.diff(types.ntype_offsets),
                              "orig_nids")
    eids = load_typed_id_maps(orig_eids, [":".join(e) for e in types.canonical_etypes],
                              np.diff(types.etype_offsets), "orig_eids")
    return TypedImporter(cfg, keys, nids, eids, nonfinite)


def import_dgl_partitions(json_path: str | os.PathLike, out_dir: str | os.PathLike,
                          overwrite: bool = False, *, orig_nids=None, orig_eids=None,
                          num_classes: int | None = None,
                          keys: NodeDataKeys | dict[str, str] | None = None,
                          nonfinite: str = "reject", progress: bool = False) -> Path:
    """Turns DGL's ``partition_graph`` output into a dglx partition directory, keeping its
    node-to-part assignment and node ids (no repartitioning); a heterograph's into a typed
    one (:mod:`~dglx_dist.partition.dgl_typed`).

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
    """
    cfg = read_dgl_config(json_path)
    out = Path(out_dir)
    check_target(out, overwrite, PARTITION_DIR, (cfg.path.parent,), PartitionError)
    importer = _importer(cfg, node_data_keys(keys), orig_nids, orig_eids, nonfinite)
    with tqdm(total=cfg.num_parts, desc="import DGL parts", disable=not progress,
              unit="part") as bar:
        def parts():
            for p in range(cfg.num_parts):
                yield importer.part(p)
                bar.update()

        write_partitions(out, lambda: importer.header(num_classes), parts(), overwrite=overwrite,
                         inputs=(cfg.path.parent,))
    prov = importer.provenance()
    log.info("imported %d DGL parts of %s into %s (edge cut %d of %d edges)", cfg.num_parts,
             cfg.path, out, importer.edge_cut, cfg.num_edges)
    for kind, names in prov["not_imported"].items():
        if names:
            log.warning("not imported from the DGL partitions: %s %s", kind, names)
    return out
