"""Heterogeneous graphs in memory: node types and canonical edge types, as in DGL's heterograph.

A :class:`HeteroDataset` holds, per node type, its node count and what the type has (features,
labels and the train/val/test masks, each optional), and per canonical edge type
``(src_type, relation, dst_type)`` its edges in per-type ids and its edge data. Types are kept
in DGL's order (names sorted), so the *homogeneous view* numbers nodes the way
``dgl.to_homogeneous`` does: every node of the first type, then the second's, and so on; a
node's homogeneous id is its type's offset plus its per-type id. Edges are numbered the same
way by canonical edge type. Partitioning works on that view; the offsets map ids both ways.

The directory format is in :mod:`dglx_dist.data.hetero_format`.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

import numpy as np

from dglx_dist.errors import DatasetFormatError

__all__ = ["NodeTable", "EdgeTable", "HeteroDataset", "Etype", "check_type_name",
           "etype_key", "MASKS"]

Etype = tuple[str, str, str]
MASKS = ("train", "val", "test")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def check_type_name(name: Any, what: str) -> str:
    """``name`` if it can name a type's file; else one line saying what is accepted."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or len(name) > 100:
        raise DatasetFormatError(f"{what} name {name!r} cannot be stored; expected letters, "
                                 "digits, '_', '.' or '-' (not first), at most 100 characters")
    return name


def etype_key(etype: Etype) -> str:
    """``"src:rel:dst"``: a canonical edge type as one string (meta.json keys, messages)."""
    return ":".join(etype)


@dataclasses.dataclass(frozen=True, eq=False)
class NodeTable:
    """One node type: ``num_nodes`` and, each optional, ``feat`` (num_nodes, F) float32,
    ``label`` int64 and the masks (bool; present together with ``label``)."""

    num_nodes: int
    feat: np.ndarray | None = None
    label: np.ndarray | None = None
    train: np.ndarray | None = None
    val: np.ndarray | None = None
    test: np.ndarray | None = None

    @property
    def feat_dim(self) -> int:
        """Feature width; 0 for a type without features."""
        return 0 if self.feat is None else int(self.feat.shape[1])

    @property
    def labeled(self) -> bool:
        return self.label is not None

    def masks(self) -> dict[str, np.ndarray]:
        """The masks, all-false where the type has none."""
        return {m: (np.zeros(self.num_nodes, bool) if getattr(self, m) is None
                    else getattr(self, m)) for m in MASKS}


@dataclasses.dataclass(frozen=True, eq=False)
class EdgeTable:
    """One canonical edge type: ``src``/``dst`` per-type node ids, ``edata`` by name."""

    src: np.ndarray
    dst: np.ndarray
    edata: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    @property
    def num_edges(self) -> int:
        return int(self.src.shape[0])


@dataclasses.dataclass(frozen=True, eq=False)
class HeteroDataset:
    """A typed graph: ``nodes`` by type name, ``edges`` by canonical edge type.

    Attributes:
        nodes / edges: the tables, put in DGL's order (sorted) on construction.
        num_classes: classes of the labeled types' labels.
        category: the node type a node-classification run predicts (the one labeled type
            unless given).
        extra: free-form provenance (meta.json).
    """

    nodes: Mapping[str, NodeTable]
    edges: Mapping[Etype, EdgeTable]
    num_classes: int = 1
    category: str | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", {k: self.nodes[k] for k in sorted(self.nodes)})
        edges = {tuple(k): v for k, v in self.edges.items()}
        object.__setattr__(self, "edges", {k: edges[k] for k in sorted(edges)})
        if self.category is None:
            labeled = [t for t, n in self.nodes.items() if n.labeled]
            object.__setattr__(self, "category", labeled[0] if len(labeled) == 1 else None)
        _check(self)

    # -- DGL's names ------------------------------------------------------------------------
    @property
    def ntypes(self) -> list[str]:
        return list(self.nodes)

    @property
    def canonical_etypes(self) -> list[Etype]:
        return list(self.edges)

    @property
    def etypes(self) -> list[str]:
        return [rel for _, rel, _ in self.edges]

    def num_nodes(self, ntype: str | None = None) -> int:
        if ntype is None:
            return sum(n.num_nodes for n in self.nodes.values())
        return self.nodes[ntype].num_nodes

    def num_edges(self, etype: Etype | None = None) -> int:
        if etype is None:
            return sum(e.num_edges for e in self.edges.values())
        return self.edges[etype].num_edges

    # -- the homogeneous view -----------------------------------------------------------------
    def ntype_offsets(self) -> np.ndarray:
        """``[0, n_0, n_0 + n_1, ...]``: type ``i``'s homogeneous ids start at entry ``i``."""
        return np.concatenate([[0], np.cumsum([n.num_nodes for n in self.nodes.values()])]
                              ).astype(np.int64)

    def etype_offsets(self) -> np.ndarray:
        """The same for edges, by canonical edge type."""
        return np.concatenate([[0], np.cumsum([e.num_edges for e in self.edges.values()])]
                              ).astype(np.int64)

    def homogeneous_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Every edge's homogeneous (src, dst), edge types in order."""
        start = dict(zip(self.ntypes, self.ntype_offsets()[:-1]))
        src = [e.src + start[s] for (s, _, _), e in self.edges.items()]
        dst = [e.dst + start[d] for (_, _, d), e in self.edges.items()]
        empty = [np.zeros(0, np.int64)]
        return np.concatenate(src or empty), np.concatenate(dst or empty)

    def node_types(self) -> np.ndarray:
        """Every node's type index, in homogeneous order."""
        return np.repeat(np.arange(len(self.nodes), dtype=np.int64),
                         [n.num_nodes for n in self.nodes.values()])


def _check_rows(name: str, what: str, array: np.ndarray | None, rows: int) -> None:
    if array is not None and (array.ndim < 1 or array.shape[0] != rows):
        raise DatasetFormatError(f"node type {name!r}: {what} has {array.shape[:1]} rows; "
                                 f"expected {rows}, one per node")


def _check_nodes(ds: HeteroDataset) -> None:
    for name, n in ds.nodes.items():
        check_type_name(name, "node type")
        if n.num_nodes < 0:
            raise DatasetFormatError(f"node type {name!r}: num_nodes = {n.num_nodes}; "
                                     "expected >= 0")
        for what in ("feat", "label", *MASKS):
            _check_rows(name, what, getattr(n, what), n.num_nodes)
        if n.feat is not None and (n.feat.ndim != 2 or n.feat.shape[1] < 1):
            raise DatasetFormatError(f"node type {name!r}: feat has shape {n.feat.shape}; "
                                     "expected (num_nodes, F) with F >= 1")
        if n.label is not None and n.label.size and \
                (n.label.min() < 0 or n.label.max() >= ds.num_classes):
            raise DatasetFormatError(f"node type {name!r}: labels span [{n.label.min()}, "
                                     f"{n.label.max()}]; expected classes in "
                                     f"[0, {ds.num_classes})")
        if n.label is None and any(getattr(n, m) is not None for m in MASKS):
            raise DatasetFormatError(f"node type {name!r} has masks but no labels; expected "
                                     "labels wherever there are masks")


def _check(ds: HeteroDataset) -> None:
    if not ds.nodes:
        raise DatasetFormatError("a heterogeneous dataset needs at least one node type")
    _check_nodes(ds)
    if ds.category is not None and ds.category not in ds.nodes:
        raise DatasetFormatError(f"category {ds.category!r} is not a node type; expected one "
                                 f"of {ds.ntypes}")
    for etype, e in ds.edges.items():
        if len(etype) != 3:
            raise DatasetFormatError(f"edge type {etype!r}: expected (src type, relation, "
                                     "dst type)")
        check_type_name(etype[1], "relation")
        for end, ntype, ids in (("src", etype[0], e.src), ("dst", etype[2], e.dst)):
            if ntype not in ds.nodes:
                raise DatasetFormatError(f"edge type {etype_key(etype)}: {end} type {ntype!r} "
                                         f"is not a node type; expected one of {ds.ntypes}")
            if ids.shape != e.src.shape or ids.ndim != 1:
                raise DatasetFormatError(f"edge type {etype_key(etype)}: src and dst must be "
                                         f"1-d of one length; got {e.src.shape} and "
                                         f"{e.dst.shape}")
            n = ds.nodes[ntype].num_nodes
            if ids.size and (ids.min() < 0 or ids.max() >= n):
                bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
                raise DatasetFormatError(f"edge type {etype_key(etype)}: {end} id {bad} is "
                                         f"outside [0, {n}) of node type {ntype!r}")
        for name, values in e.edata.items():
            if values.shape[:1] != e.src.shape:
                raise DatasetFormatError(f"edge type {etype_key(etype)}: edge data {name!r} "
                                         f"has {values.shape[:1]} rows; expected "
                                         f"{e.num_edges}")
