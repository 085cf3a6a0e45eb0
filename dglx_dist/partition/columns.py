"""A partition directory whose features are stored by rows, rewritten with them by columns.

P3 (``feature_dim``) needs each part to hold a column slice of *every* node's features; DGL's
``partition_graph`` and the row partitioners store whole rows. :func:`by_columns` keeps
everything else as it is and lays the features out as ``feature_dim`` would have (per node type
on a typed partitioning, :func:`~dglx_dist.partition.base.type_feature_slices`), so that DGL's
partitions train under ``p3`` without repartitioning (docs/porting.md). The whole feature
matrix is gathered in memory once (of each featured type, one type at a time): the same peak
as partitioning with ``feature_dim``.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from dglx_dist.errors import PartitionError
from dglx_dist.partition.base import type_feature_slices
from dglx_dist.partition.book import FeatureSlices
from dglx_dist.partition.io import MANIFEST, write_partitions
from dglx_dist.partition.layout import Partition
from dglx_dist.partition.load import PartitionDir
from dglx_dist.partition.types import GraphTypes

__all__ = ["by_columns"]

log = logging.getLogger(__name__)


def _header(pdir: PartitionDir, types: GraphTypes,
            slices: dict[str, FeatureSlices]) -> dict[str, Any]:
    m = {k: v for k, v in pdir.manifest.items() if k not in ("format", "version", "parts")}
    m["partitioner"] = {"name": m["partitioner"]["name"],
                        "options": {**m["partitioner"].get("options", {}),
                                    "feature_layout": "columns (by_columns)"}}
    m["feature_layout"] = "columns"
    if types.untyped:
        m["feature_slices"] = slices["_N"].to_json()
    else:  # the typed view has no columns
        m["feature_slices"] = [0] * (pdir.num_parts + 1)
        m["type_feature_slices"] = {t: s.to_json() for t, s in slices.items()}
    return m


def _whole(pdir: PartitionDir, types: GraphTypes, ntype: str) -> np.ndarray:
    """Every row of node type ``ntype``'s features, in the order a column layout keeps them:
    by partitioned id without types, by per-type id with them (gathered part by part)."""
    k, i = pdir.num_parts, types.ntype_index(ntype)
    if types.untyped:
        rows = [pdir.book.core_ids(p) for p in range(k)]
    else:
        counts = [int(pdir.ntype_counts(p)[i]) for p in range(k)]
        rows = np.split(pdir.type_rows(ntype), np.cumsum(counts)[:-1])
    full = np.empty((int(types.ntype_offsets[i + 1] - types.ntype_offsets[i]),
                     types.feat_dims[ntype]), dtype=np.float32)
    for p in range(k):
        full[rows[p]] = pdir.load_feat(p)[0] if types.untyped else pdir.load_type_feat(p, ntype)
    return full


def _parts(pdir: PartitionDir, types: GraphTypes, slices: dict[str, FeatureSlices],
           full: dict[int, np.ndarray]) -> Iterator[Partition]:
    for p in range(pdir.num_parts):
        pc = pdir.load_part(p, features=False)
        feats = {i: np.ascontiguousarray(mat[:, slices[types.ntypes[i]].slice(p)])
                 for i, mat in full.items()}
        if types.untyped:
            sl = slices["_N"].slice(p)
            pc = dataclasses.replace(pc, feat=feats[0], feat_cols=(sl.start, sl.stop))
        yield dataclasses.replace(pc, type_feat={} if types.untyped else feats,
                                  edata=pdir.load_edge_data(p), ndata=pdir.load_node_data(p))


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
    types = pdir.types or GraphTypes.one_type(pdir.num_nodes, pdir.num_edges, pdir.feat_dim)
    slices = type_feature_slices(types, pdir.num_parts)  # one line naming a type too narrow
    full = {types.ntype_index(t): _whole(pdir, types, t) for t in slices}
    write_partitions(out, _header(pdir, types, slices), _parts(pdir, types, slices, full),
                     overwrite=overwrite, inputs=(pdir.path,))
    log.info("laid the features of %s out by columns in %s", pdir.path / MANIFEST, out)
    return Path(out)
