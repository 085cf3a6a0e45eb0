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
from dglx_dist.partition.io import MANIFEST, write_partitions
from dglx_dist.partition.layout import Partition, format_fields, stored
from dglx_dist.partition.load import PartitionDir
from dglx_dist.partition.types import GraphTypes

__all__ = ["by_columns"]

log = logging.getLogger(__name__)


def _header(pdir: PartitionDir, types: GraphTypes) -> dict[str, Any]:
    m = {k: v for k, v in pdir.manifest.items() if k not in ("format", "version", "parts")}
    m["partitioner"] = {"name": m["partitioner"]["name"],
                        "options": {**m["partitioner"].get("options", {}),
                                    "feature_layout": "columns (by_columns)"}}
    m["feature_layout"] = "columns"
    return {**m, **format_fields(types, pdir.num_parts, columns=True)}


def _whole(pdir: PartitionDir, types: GraphTypes, ntype: str) -> np.ndarray:
    """Every row of node type ``ntype``'s features, by per-type id (gathered part by part:
    a part's core nodes of one type are one run, their rows in local order)."""
    i = types.ntype_index(ntype)
    lo, hi = (int(x) for x in types.ntype_offsets[i:i + 2])
    full = np.empty((hi - lo, types.feat_dims[ntype]), dtype=np.float32)
    for p in range(pdir.num_parts):
        orig = pdir.to_original(pdir.book.core_ids(p))
        rows = orig[(orig >= lo) & (orig < hi)] - lo
        full[rows] = pdir.load_feat(p)[0] if pdir.types is None else \
            pdir.load_type_feat(p, ntype)  # the format without types, or with them
    return full


def _parts(pdir: PartitionDir, types: GraphTypes, fields: dict[str, Any],
           full: dict[int, np.ndarray]) -> Iterator[Partition]:
    slices = type_feature_slices(types, pdir.num_parts)
    orig_ids = pdir.relabeling[0] if pdir.relabeling is not None else None
    for p in range(pdir.num_parts):
        pc = pdir.load_part(p, features=False)
        feats = {i: np.ascontiguousarray(mat[:, slices[types.ntypes[i]].slice(p)])
                 for i, mat in full.items()}
        pc = dataclasses.replace(pc, type_feat=feats, edata=pdir.load_edge_data(p),
                                 ndata=pdir.load_node_data(p))
        yield stored(pc, fields, True, orig_ids)


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
    header = _header(pdir, types)
    write_partitions(out, header, _parts(pdir, types, header, full), overwrite=overwrite,
                     inputs=(pdir.path,))
    log.info("laid the features of %s out by columns in %s", pdir.path / MANIFEST, out)
    return Path(out)
