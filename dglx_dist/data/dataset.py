"""A graph dataset in memory: node types and canonical edge types, as in DGL's heterograph.

A :class:`GraphDataset` holds, per node type, its node count and what the type has (features,
labels and the train/val/test masks, each optional: :class:`NodeTable`), and per canonical edge
type ``(src_type, relation, dst_type)`` its edges in per-type ids and its edge data
(:class:`EdgeTable`). A graph without types is the one-type case, as in DGL: node type ``_N``
and edge type ``("_N", "_E", "_N")`` (``GraphDataset(src, dst, feat, label, ...)`` builds it).

Types are kept in DGL's order (names sorted), so the *homogeneous view* numbers nodes and edges
as ``dgl.to_homogeneous`` does (docs/dataset_format.md, "Typed datasets"). The view's arrays
(``src``, ``dst``, ``label``, the masks, ``edata``) are what partitioners read: labels of types
without labels are -1 (masks false), an edge-data name one column over every edge (zeros for
edge types without it); features stay per type (``type_feat``), so a typed view's ``feat`` has
no columns. For the one-type case the view is the tables' own arrays.

The directory formats are in :mod:`dglx_dist.data.format`.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any, Mapping

import numpy as np

from dglx_dist.errors import DatasetFormatError, InvalidValueError
from dglx_dist.graphcore.types import ONE_ETYPE, ONE_NTYPE, Etype

__all__ = ["GraphDataset", "DatasetMeta", "NodeTable", "EdgeTable", "check_type_name",
           "etype_key", "MASKS", "META_SIZES"]

MASKS = ("train", "val", "test")
META_SIZES = ("num_nodes", "num_edges", "feat_dim", "num_classes")  # meta.json's sizes
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


@dataclasses.dataclass(frozen=True)
class DatasetMeta:
    """The sizes from meta.json; ``extra`` keeps the free-form provenance fields."""

    num_nodes: int
    num_edges: int
    feat_dim: int
    num_classes: int
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in META_SIZES}
        out.update({k: v for k, v in self.extra.items() if k not in out})
        return out


class _View:
    """One array of a :class:`GraphDataset`'s homogeneous view (the module docstring says
    what it holds): the one type's own array, or the typed view's, computed once."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, ds: "GraphDataset | None", owner: type | None = None) -> Any:
        if ds is None:
            return self
        if ds.untyped:
            table = ds.edges[ONE_ETYPE] if self.name in ("src", "dst", "edata") else \
                ds.nodes[ONE_NTYPE]
            return getattr(table, self.name)
        return ds._typed_view[self.name]


@dataclasses.dataclass(frozen=True, eq=False, init=False)
class GraphDataset:
    """A graph dataset: ``nodes`` by type name, ``edges`` by canonical edge type.

    ``GraphDataset(src, dst, feat, label, train, val, test, num_classes, extra, edata)`` builds
    a graph without types (node i is row i, edge j row j of ``edata``), :meth:`typed` one with
    types. The tables are not to be changed once the homogeneous view has been read.

    Attributes:
        nodes / edges: the tables, in DGL's order (sorted).
        num_classes: classes of the labeled types' labels.
        category: the node type a node-classification run predicts (the one labeled type of
            a typed graph unless given).
        extra: free-form provenance (meta.json).
    """

    nodes: Mapping[str, NodeTable]
    edges: Mapping[Etype, EdgeTable]
    num_classes: int
    category: str | None
    extra: dict[str, Any]
    src, dst, feat, label, train, val, test, edata = (_View() for _ in range(8))

    def __init__(self, src: np.ndarray, dst: np.ndarray, feat: np.ndarray, label: np.ndarray,
                 train: np.ndarray, val: np.ndarray, test: np.ndarray, num_classes: int,
                 extra: dict[str, Any] | None = None,
                 edata: dict[str, np.ndarray] | None = None):
        node = NodeTable(int(label.shape[0]), feat, label, train, val, test)
        self._set({ONE_NTYPE: node}, {ONE_ETYPE: EdgeTable(src, dst, {} if edata is None
                                                           else edata)},
                  num_classes, None, {} if extra is None else extra)

    @classmethod
    def typed(cls, nodes: Mapping[str, NodeTable], edges: Mapping[Etype, EdgeTable],
              num_classes: int = 1, category: str | None = None,
              extra: dict[str, Any] | None = None) -> "GraphDataset":
        """A graph with node and edge types, checked (one line naming what is wrong)."""
        ds = cls.__new__(cls)
        edges = {tuple(k): v for k, v in edges.items()}
        if category is None:
            labeled = [t for t in sorted(nodes) if nodes[t].labeled]
            category = labeled[0] if len(labeled) == 1 else None
        ds._set({k: nodes[k] for k in sorted(nodes)}, {k: edges[k] for k in sorted(edges)},
                num_classes, category, {} if extra is None else extra)
        _check(ds)
        return ds

    def _set(self, nodes: dict, edges: dict, num_classes: int, category: str | None,
             extra: dict[str, Any]) -> None:
        for name, value in (("nodes", nodes), ("edges", edges), ("num_classes", num_classes),
                            ("category", category), ("extra", extra)):
            object.__setattr__(self, name, value)

    def replace(self, **changes: Any) -> "GraphDataset":
        """This graph without types with some of its arrays (or ``num_classes``, ``extra``)
        replaced."""
        if not self.untyped:
            raise InvalidValueError(f"replace takes a graph without types; this one has node "
                                    f"types {self.ntypes} (build it with GraphDataset.typed)")
        keep = {k: getattr(self, k) for k in ("src", "dst", "feat", "label", *MASKS,
                                              "num_classes", "extra", "edata")}
        return GraphDataset(**(keep | changes))

    @property
    def untyped(self) -> bool:
        """Whether this is a graph without types: DGL's ``_N`` and ``_N:_E:_N`` only."""
        return list(self.nodes) == [ONE_NTYPE] and list(self.edges) == [ONE_ETYPE]

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

    @property
    def num_nodes(self) -> int:
        return sum(n.num_nodes for n in self.nodes.values())

    @property
    def num_edges(self) -> int:
        return sum(e.num_edges for e in self.edges.values())

    # -- the homogeneous view -----------------------------------------------------------------
    @property
    def feat_dim(self) -> int:
        """The view's feature width: the one type's; 0 with types (:attr:`type_feat`)."""
        return self.nodes[ONE_NTYPE].feat_dim if self.untyped else 0

    @property
    def meta(self) -> DatasetMeta:
        return DatasetMeta(self.num_nodes, self.num_edges, self.feat_dim, self.num_classes,
                           dict(self.extra))

    @property
    def type_feat(self) -> dict[int, np.ndarray]:
        """The features of each node type that has them, by type index (row = per-type id)."""
        return {i: n.feat if self.untyped else np.asarray(n.feat, np.float32)
                for i, n in enumerate(self.nodes.values()) if n.feat is not None}

    @functools.cached_property
    def _typed_view(self) -> dict[str, Any]:
        src, dst = self.homogeneous_edges()
        nodes, edges = list(self.nodes.values()), list(self.edges.values())
        label = np.concatenate([np.full(n.num_nodes, -1, np.int64) if n.label is None
                                else np.asarray(n.label, np.int64) for n in nodes])
        masks = {m: np.concatenate([np.asarray(n.masks()[m], bool) for n in nodes])
                 for m in MASKS}
        first = {}
        for e in edges:
            for name, values in e.edata.items():
                first.setdefault(name, values)
        edata = {name: np.concatenate([e.edata[name] if name in e.edata else
                                       np.zeros((e.num_edges, *v.shape[1:]), v.dtype)
                                       for e in edges]) for name, v in first.items()}
        return {"src": src.astype(np.int64), "dst": dst.astype(np.int64), "edata": edata,
                "feat": np.zeros((label.size, 0), np.float32), "label": label, **masks}

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


def _check_nodes(ds: GraphDataset) -> None:
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


def _check(ds: GraphDataset) -> None:
    if not ds.nodes:
        raise DatasetFormatError("a heterogeneous dataset needs at least one node type")
    _check_nodes(ds)
    one = ds.nodes.get(ONE_NTYPE)
    if ds.untyped and (one.feat is None or not one.labeled):
        raise DatasetFormatError(f"node type {ONE_NTYPE!r} with edge type "
                                 f"{etype_key(ONE_ETYPE)} is DGL's graph without types, which "
                                 "is stored with features and labels; give it both, or name "
                                 "the types otherwise")
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

