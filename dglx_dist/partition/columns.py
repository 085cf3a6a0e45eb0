"""A partition directory whose features are stored by rows, rewritten with them by columns.

P3 (``feature_dim``) needs each part to hold a column slice of *every* node's features; DGL's
``partition_graph`` and the row partitioners store each node's whole row with its owner.
:func:`by_columns` keeps everything else as it is (node ownership and ids, structure, labels,
masks, edge and other node data) and lays the features out as ``feature_dim`` would have: the
width split into even slices, one per part (per node type on a typed partitioning,
:func:`~dglx_dist.partition.typed.type_feature_slices`). This is how DGL's partitions train
under ``p3`` without repartitioning (:func:`dglx_dist.dgl.distributed.import_cached`).

The whole feature matrix is gathered in memory once (of each featured type, one type at a
time): the same peak as partitioning with ``feature_dim``.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from dglx_dist.errors import PartitionError
from dglx_dist.partition.book import FeatureSlices
from dglx_dist.partition.io import MANIFEST, write_partitions
from dglx_dist.partition.layout import Partition
from dglx_dist.partition.load import PartitionDir
from dglx_dist.partition.typed import type_feature_slices

__all__ = ["by_columns"]

log = logging.getLogger(__name__)


def _header(pdir: PartitionDir, slices: FeatureSlices,
            type_slices: dict[str, FeatureSlices] | None) -> dict[str, Any]:
    m = {k: v for k, v in pdir.manifest.items() if k not in ("format", "version", "parts")}
    m["partitioner"] = {"name": m["partitioner"]["name"],
                        "options": {**m["partitioner"].get("options", {}),
                                    "feature_layout": "columns (by_columns)"}}
    m["feature_layout"], m["feature_slices"] = "columns", slices.to_json()
    if type_slices is not None:
        m["type_feature_slices"] = {t: s.to_json() for t, s in type_slices.items()}
    return m


def _homogeneous(pdir: PartitionDir) -> tuple[FeatureSlices, Iterator[Partition]]:
    k, width = pdir.num_parts, pdir.feat_dim
    if k > width:
        raise PartitionError(f"{pdir.path}: {k} parts but the features have only {width} "
                             f"columns; laying them out by columns needs num_parts <= feat_dim")
    full = np.empty((pdir.num_nodes, width), dtype=np.float32)  # rows by partitioned id
    for p in range(k):
        full[pdir.book.core_ids(p)] = pdir.load_feat(p)[0]
    slices = FeatureSlices.even(width, k)

    def parts() -> Iterator[Partition]:
        for p in range(k):
            sl = slices.slice(p)
            pc = pdir.load_part(p, features=False)
            yield dataclasses.replace(pc, feat=np.ascontiguousarray(full[:, sl]),
                                      feat_cols=(sl.start, sl.stop),
                                      edata=pdir.load_edge_data(p),
                                      ndata=pdir.load_node_data(p))

    return slices, parts()


def _typed(pdir: PartitionDir) -> tuple[dict[str, FeatureSlices], Iterator[Partition]]:
    types, k = pdir.types, pdir.num_parts
    type_slices = type_feature_slices(types, k)  # one line naming a type too narrow
    full: dict[int, np.ndarray] = {}
    for t in type_slices:  # rows by per-type id, as a typed column layout keeps them
        rows = pdir.type_rows(t)
        mat = np.empty((rows.size, types.feat_dims[t]), dtype=np.float32)
        mat[rows] = np.concatenate([pdir.load_type_feat(p, t) for p in range(k)])
        full[types.ntype_index(t)] = mat

    def parts() -> Iterator[Partition]:
        for p in range(k):
            pc = pdir.load_part(p, features=False)
            feats = {i: np.ascontiguousarray(mat[:, type_slices[types.ntypes[i]].slice(p)])
                     for i, mat in full.items()}
            yield dataclasses.replace(pc, type_feat=feats, edata=pdir.load_edge_data(p),
                                      ndata=pdir.load_node_data(p))

    return type_slices, parts()


def by_columns(src: str | os.PathLike, out: str | os.PathLike,
               overwrite: bool = False) -> Path:
    """Writes ``src`` (a partition directory with features by rows) to ``out`` with its
    features by columns, everything else unchanged.

    Raises:
        PartitionError: ``src`` already stores columns, or has more parts than feature columns
            (of some featured node type).
    """
    pdir = PartitionDir(src)
    if pdir.feature_layout != "rows":
        raise PartitionError(f"{pdir.path} stores its features by {pdir.feature_layout} "
                             "already; expected a partition directory that stores rows")
    if pdir.types is None:
        slices, parts = _homogeneous(pdir)
        type_slices = None
    else:
        type_slices, parts = _typed(pdir)
        slices = FeatureSlices([0] * (pdir.num_parts + 1))  # the typed view has no columns
    header = _header(pdir, slices, type_slices)
    write_partitions(out, header, parts, overwrite=overwrite, inputs=(pdir.path,))
    log.info("laid the features of %s out by columns in %s", pdir.path / MANIFEST, out)
    return Path(out)
