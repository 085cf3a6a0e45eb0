"""Reading the files of DGL's ``partition_graph`` output for the importer
(:mod:`~dglx_dist.partition.dgl_import`), with or without types: the part graphs, the feature
files, the id maps ``partition_graph(..., return_mapping=True)`` returns, and the names of the
node data.

**Nothing is unpickled unchecked**: how each file is read (``graph.dgl`` by
``dgl.load_graphs`` after its magic, in DGL's door: :mod:`dglx_dist.dgl.graph_files`; the
feature files by
:mod:`~dglx_dist.partition.dgl_tensors`, GraphBolt's pickles by
:mod:`~dglx_dist.partition.dgl_graphbolt`, id maps by ``np.load(allow_pickle=False)`` or
``torch.load(weights_only=True)``) is docs/partition_format.md's.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from dglx_dist.data.checked import check_range
from dglx_dist.errors import PartitionError, PartitionFormatError
from dglx_dist.partition.dgl_graphbolt import read_graphbolt
from dglx_dist.partition.dgl_tensors import PartGraph

__all__ = ["NodeDataKeys", "node_data_keys", "found_keys", "keeps", "USUAL_NAMES", "load_id_maps",
           "load_part_graph"]

_ERR = PartitionFormatError


@dataclasses.dataclass(frozen=True)
class NodeDataKeys:
    """Names of the node data in DGL's ``node_feat.dgl``, without DGL's ``NTYPE/`` prefix
    (the defaults are the names DGL's node-classification datasets use; for a heterograph,
    the default label name also matches ``labels``, the name of DistDGL's R-GCN example)."""

    feat: str = "feat"
    label: str = "label"
    train: str = "train_mask"
    val: str = "val_mask"
    test: str = "test_mask"


USUAL_NAMES = {"feat": ("feat", "features"), "label": ("label", "labels")}
"""The names DGL's datasets (``feat``, ``label``) and DGL's distributed examples'
``partition_graph.py`` (``features``, ``labels``) give the features and the labels."""


def found_keys(keys: NodeDataKeys, tensors: Mapping[str, torch.Tensor]) -> NodeDataKeys:
    """``keys`` with the features' and the labels' names found among ``tensors`` (the
    ``node_feat.dgl`` entries without the ``NTYPE/`` prefix) where a default name is not
    there: the other usual name (:data:`USUAL_NAMES`); for the features, else the one
    floating-point 2-D tensor."""
    found = {}
    for role, usual in USUAL_NAMES.items():
        given = getattr(keys, role)
        if given in tensors or given != usual[0]:
            continue
        found.update({role: n for n in usual[1:] if n in tensors})
    if "feat" not in found and keys.feat == "feat" and keys.feat not in tensors:
        floats = [n for n, t in tensors.items() if t.is_floating_point() and t.dim() == 2]
        if len(floats) == 1:
            found["feat"] = floats[0]
    return dataclasses.replace(keys, **found)


def keeps(key: str, t: torch.Tensor) -> bool:
    """Whether node data ``key`` (``NTYPE/NAME``, not the features, labels or masks) can be
    imported as it is: a value or a vector per node, under a name our stored node data does
    not take."""
    taken = ("feat", "label", "train_mask", "val_mask", "test_mask")
    return t.dim() in (1, 2) and not t.is_complex() and key.partition("/")[2] not in taken


def node_data_keys(keys: NodeDataKeys | dict[str, str] | None) -> NodeDataKeys:
    """``keys`` as :class:`NodeDataKeys` (a dict names some of its fields)."""
    if not isinstance(keys, dict):
        return keys or NodeDataKeys()
    valid = [f.name for f in dataclasses.fields(NodeDataKeys)]
    bad = sorted(set(keys) - set(valid))
    if bad:
        raise PartitionError(f"node data key(s) {bad} not understood; valid: {valid}")
    return NodeDataKeys(**keys)


def load_id_maps(value, names: Sequence[str], counts: Sequence[int], what: str,
                 typed: bool) -> list[np.ndarray | None]:
    """The id maps ``partition_graph(..., return_mapping=True)`` returns, one per type in
    ``names`` order (all None when ``value`` is None), each checked to be a permutation of
    ``[0, count)``.

    Args:
        value: None; without types an array or tensor (or a ``.npy`` / ``.pt`` file holding
            one); for a heterograph a dict ``{node type: ids}`` / ``{canonical edge type:
            ids}``, edge types as ``(src, rel, dst)`` tuples or ``"src:rel:dst"`` (or a
            ``.pt`` (``torch.save``) / ``.npz`` (``np.savez``) file holding one).
        names: the types (``src:rel:dst`` for edge types); counts: each type's number of ids.
        what: its name in error messages (``orig_nids``, ``orig_eids``).
        typed: whether the graph has types (DGL returns dicts by type for it).

    Raises:
        PartitionError: not what the graph's kind takes (a dict of exactly its types, or one
            array), a bad map, or an unreadable file.
    """
    if value is None:
        return [None] * len(names)
    value, where = _given(value, what)
    if isinstance(value, Mapping) != typed:
        raise PartitionError(
            f"{where}: {type(value).__name__}; this graph has types: expected a dict "
            f"{{type: ids}}, as partition_graph(..., return_mapping=True) returns for a "
            f"heterograph" if typed else f"{where}: a dict by type "
            f"{sorted(map(str, value))[:4]}; this graph is homogeneous: expected one array of "
            f"{counts[0]} ids")
    keyed = {_type_name(k): v for k, v in value.items()} if typed else {names[0]: value}
    if sorted(keyed) != sorted(names):
        raise PartitionError(f"{where}: types {sorted(keyed)}; expected exactly "
                             f"{list(names)}")
    return [_id_map(keyed[t], c, f"{where}[{t!r}]" if typed else where)
            for t, c in zip(names, counts)]


def _id_map(value, n: int, where: str) -> np.ndarray:
    """One id map, checked to be a permutation of ``[0, n)``."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    arr = np.asarray(value)
    if arr.ndim != 1 or arr.size != n or not np.issubdtype(arr.dtype, np.integer):
        raise PartitionError(f"{where}: {arr.dtype} array of shape {arr.shape}; expected "
                             f"{n} integers (partition_graph's return_mapping=True output)")
    arr = arr.astype(np.int64)
    if n and (arr.min() < 0 or arr.max() >= n
              or np.any(np.bincount(arr, minlength=n) != 1)):
        raise PartitionError(f"{where}: not a permutation of [0, {n}); expected each id once "
                             f"(is it the map of another partitioning?)")
    return arr


def _type_name(key: Any) -> str:
    """A map's key: a node type, or a canonical edge type as a tuple or ``src:rel:dst``."""
    if isinstance(key, (tuple, list)) and all(isinstance(k, str) for k in key):
        return ":".join(key)
    return str(key)


def _given(value, what: str) -> tuple[Any, str]:
    """An id map as given, or read from the file it names; and its name in messages."""
    if not isinstance(value, (str, os.PathLike)):
        return value, what
    file, where = Path(value), f"{value} ({what})"
    if not file.is_file():
        raise PartitionError(f"{file}: missing ({what})")
    try:
        if file.suffix == ".npy":
            return np.load(file, allow_pickle=False), where
        if file.suffix == ".npz":
            with np.load(file, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}, where
        if file.suffix in (".pt", ".pth"):
            return torch.load(file, map_location="cpu", weights_only=True), where
    except Exception as exc:  # noqa: BLE001 - any reader failure is a bad file for the user
        raise PartitionError(f"{file}: could not be read as {what} ({exc})") from None
    raise PartitionError(f"{file}: {what} must be a .npy file (np.save), a .npz file of one "
                         f"array per type (np.savez) or a .pt file (torch.save)")


def load_part_graph(files: Mapping[str, Path], core: tuple[int, int],
                    typed: bool = False) -> PartGraph:
    """The part graph named in one part's ``files``: ``part_graph`` (``graph.dgl``) or
    ``part_graph_graphbolt`` (GraphBolt's file), whichever
    :func:`~dglx_dist.partition.dgl_config.read_dgl_config` chose; ``core`` is the part's
    range of DGL's new node ids."""
    if "part_graph" in files:
        from dglx_dist.dgl.graph_files import load_graph_file  # noqa: PLC0415 - DGL's door

        return load_graph_file(files["part_graph"], typed)
    return read_graphbolt(files["part_graph_graphbolt"], core)


def inner_edges(g: PartGraph, inner_dst: np.ndarray, lo: int, hi: int,
                where: str) -> tuple[np.ndarray, np.ndarray]:
    """The rows of a DGL part graph's edges into its inner nodes (``inner_dst``: whether each
    edge's destination is inner), ordered by DGL's new edge id, and those ids, which must be
    exactly ``[lo, hi)`` (``where``: the JSON field that says so, for the message)."""
    keep = np.flatnonzero(inner_dst)
    new_eid = g.edata["_ID"][keep]
    by_eid = np.argsort(new_eid, kind="stable")
    keep, new_eid = keep[by_eid], new_eid[by_eid]
    if not np.array_equal(new_eid, np.arange(lo, hi)):
        raise _ERR(f"{g.file}: its {keep.size} edges into inner nodes do not have the ids "
                   f"(edata['_ID']) [{lo}, {hi}) that {where}; expected each of those ids once")
    return keep, new_eid


def class_ids(a: np.ndarray, file: Path, key: str) -> np.ndarray:
    """DGL's label array ``key`` as int64 class ids >= 0 (one per node)."""
    if not (np.issubdtype(a.dtype, np.integer) or a.dtype == bool):
        raise _ERR(f"{file}: {key!r} has dtype {a.dtype}; expected integer class ids (one "
                   f"class per node; convert the labels before partition_graph)")
    label = a.reshape(-1).astype(np.int64)
    check_range(label, 0, np.iinfo(np.int64).max, file, key, "class id >= 0", _ERR)
    return label


def checked_num_classes(max_label: int, num_classes: int | None, path: Path) -> int:
    """``num_classes`` (default: the largest label + 1), refused below the labels seen."""
    if num_classes is None:
        return max(max_label + 1, 1)
    if max_label >= num_classes:
        raise _ERR(f"{path}: a part has label {max_label}; expected labels in "
                   f"[0, num_classes = {num_classes})")
    return num_classes

