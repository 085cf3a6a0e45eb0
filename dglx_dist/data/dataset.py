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
from typing import Any, Collection, Mapping

import numpy as np

from dglx_dist.errors import DatasetFormatError, InvalidValueError
from dglx_dist.graphcore.types import ONE_ETYPE, ONE_NTYPE, Etype

__all__ = ["GraphDataset", "DatasetMeta", "NodeTable", "EdgeTable", "check_type_name",
           "check_etype", "etype_key", "MASKS", "META_SIZES"]

MASKS = ("train", "val", "test")
META_SIZES = ("num_nodes", "num_edges", "feat_dim", "num_classes")  # meta.json's sizes
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def check_type_name(name: Any, what: str) -> str:
    """``name`` if it can name a type's file; else one line saying what is accepted."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or len(name) > 100:
        raise DatasetFormatError(f"{what} name {name!r} cannot be stored; expected letters, "
                                 "digits, '_', '.' or '-' (not first), at most 100 characters")
    return name


def check_etype(value: Any, ntypes: Collection[str], where: str) -> Etype:
    """``value`` as a canonical edge type over the node types ``ntypes``; else one line
    naming ``where`` and what is wrong."""
    ends = value[::2] if isinstance(value, (list, tuple)) and len(value) == 3 else [None]
    for end, name in zip(("src", "dst"), ends):
        if name not in ntypes:
            raise DatasetFormatError(f"{where} {value!r}: {end} type {name!r} is not a node "
                                     f"type; expected (src type, relation, dst type) over the "
                                     f"node types {sorted(ntypes)}")
    check_type_name(value[1], f"{where} {value!r}: relation")
    return tuple(value)


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
    what it holds), computed once."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, ds: "GraphDataset | None", owner: type | None = None) -> Any:
        return self if ds is None else ds._view[self.name]


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """``parts`` end to end; one part is itself (no copy of a one-type graph's arrays)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


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
    src, dst, label, train, val, test, edata = (_View() for _ in range(7))

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
        edges = {tuple(k): v for k, v in edges.items()}
        if category is None:
            labeled = [t for t in sorted(nodes) if nodes[t].labeled]
            category = labeled[0] if len(labeled) == 1 else None
        ds = cls.__new__(cls)
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
        """This graph of one node type and one edge type with some of its tables' arrays
        (``src``, ``dst``, ``edata``, ``feat``, ``label``, the masks) or ``num_classes``,
        ``extra`` replaced, checked."""
        if len(self.nodes) != 1 or len(self.edges) != 1:
            raise InvalidValueError(f"replace takes a graph of one node type and one edge "
                                    f"type; this one has {self.ntypes} and "
                                    f"{self.canonical_etypes} (build it with GraphDataset.typed)")
        [(ntype, node)], [(etype, edge)] = self.nodes.items(), self.edges.items()
        parts = {t: {k: v for k, v in changes.items() if k in t.__dataclass_fields__}
                 for t in (NodeTable, EdgeTable)}
        unknown = set(changes) - {*parts[NodeTable], *parts[EdgeTable], "num_classes", "extra"}
        if unknown:
            raise InvalidValueError(f"replace: {sorted(unknown)} cannot be replaced; expected "
                                    f"the tables' arrays, num_classes, extra")
        node = dataclasses.replace(node, **parts[NodeTable])
        edge = dataclasses.replace(edge, **parts[EdgeTable])
        out = GraphDataset.__new__(GraphDataset)  # typed(), keeping the category as it is
        out._set({ntype: node}, {etype: edge}, changes.get("num_classes", self.num_classes),
                 self.category, changes.get("extra", self.extra))
        _check(out)
        return out

    @property
    def untyped(self) -> bool:
        """Whether this is DGL's graph without types as it is stored: node type ``_N`` (with
        features and labels) and edge type ``_N:_E:_N`` only; any other graph, one of those
        names without features or labels too, is stored with its types."""
        one = self.nodes.get(ONE_NTYPE)
        return list(self.nodes) == [ONE_NTYPE] and list(self.edges) == [ONE_ETYPE] and \
            one.feat is not None and one.labeled

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
    def feat(self) -> np.ndarray:
        """The view's features: a graph without types hands its one type's, as DGL's
        ``g.ndata`` does; a typed one none (its types' are :attr:`type_feat`)."""
        if self.untyped:
            return self.nodes[ONE_NTYPE].feat
        return np.zeros((self.num_nodes, 0), np.float32)

    @property
    def feat_dim(self) -> int:
        """The view's feature width (0 with types)."""
        return int(self.feat.shape[1])

    @property
    def meta(self) -> DatasetMeta:
        return DatasetMeta(self.num_nodes, self.num_edges, self.feat_dim, self.num_classes,
                           dict(self.extra))

    @property
    def type_feat(self) -> dict[int, np.ndarray]:
        """The features of each node type that has them, by type index (row = per-type id)."""
        return {i: np.asarray(n.feat, np.float32) for i, n in enumerate(self.nodes.values())
                if n.feat is not None}

    @functools.cached_property
    def _view(self) -> dict[str, Any]:
        src, dst = self.homogeneous_edges()
        nodes, edges = list(self.nodes.values()), list(self.edges.values())
        label = _joined([np.full(n.num_nodes, -1, np.int64) if n.label is None
                         else np.asarray(n.label, np.int64) for n in nodes])
        masks = {m: _joined([np.asarray(n.masks()[m], bool) for n in nodes]) for m in MASKS}
        first = {}
        for e in edges:
            for name, values in e.edata.items():
                first.setdefault(name, values)
        edata = {name: _joined([e.edata[name] if name in e.edata else
                                np.zeros((e.num_edges, *v.shape[1:]), v.dtype)
                                for e in edges]) for name, v in first.items()}
        return {"src": src, "dst": dst, "edata": edata, "label": label, **masks}

    def ntype_offsets(self) -> np.ndarray:
        """``[0, n_0, n_0 + n_1, ...]``: type ``i``'s homogeneous ids start at entry ``i``."""
        return np.cumsum([0, *(n.num_nodes for n in self.nodes.values())], dtype=np.int64)

    def etype_offsets(self) -> np.ndarray:
        """The same for edges, by canonical edge type."""
        return np.cumsum([0, *(e.num_edges for e in self.edges.values())], dtype=np.int64)

    def homogeneous_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Every edge's homogeneous (src, dst) as int64, edge types in order."""
        start = dict(zip(self.ntypes, self.ntype_offsets()[:-1].tolist()))

        def shifted(ids: np.ndarray, ntype: str) -> np.ndarray:  # from 0: the table's own
            ids = np.asarray(ids, np.int64)
            return ids + start[ntype] if start[ntype] else ids

        empty = [np.zeros(0, np.int64)]
        return (_joined([shifted(e.src, s) for (s, _, _), e in self.edges.items()] or empty),
                _joined([shifted(e.dst, d) for (_, _, d), e in self.edges.items()] or empty))

    def node_types(self) -> np.ndarray:
        """Every node's type index, in homogeneous order."""
        return np.repeat(np.arange(len(self.nodes), dtype=np.int64),
                         [n.num_nodes for n in self.nodes.values()])


def _check_nodes(ds: GraphDataset) -> None:
    for name, n in ds.nodes.items():
        check_type_name(name, "node type")
        if n.num_nodes < 0:
            raise DatasetFormatError(f"node type {name!r}: num_nodes = {n.num_nodes}; "
                                     "expected >= 0")
        for what, array in ((w, getattr(n, w)) for w in ("feat", "label", *MASKS)):
            if array is not None and (array.ndim < 1 or array.shape[0] != n.num_nodes):
                raise DatasetFormatError(f"node type {name!r}: {what} has {array.shape[:1]} "
                                         f"rows; expected {n.num_nodes}, one per node")
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
    if ds.category is not None and ds.category not in ds.nodes:
        raise DatasetFormatError(f"category {ds.category!r} is not a node type; expected one "
                                 f"of {ds.ntypes}")
    for etype, e in ds.edges.items():
        check_etype(etype, ds.nodes, "edge type")
        for end, ntype, ids in (("src", etype[0], e.src), ("dst", etype[2], e.dst)):
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

