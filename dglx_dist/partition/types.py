"""The node and edge types of a typed partitioning, and the id maps between its spaces.

A typed graph is partitioned as one homogeneous graph numbered as ``dgl.to_homogeneous``
numbers it: a node's *original homogeneous id* is its type's offset plus its *per-type id*
(docs/partition_format.md, "Typed (heterogeneous) partitions"). :class:`GraphTypes` holds those
offsets (the manifest's ``types`` object) and maps ids both ways; it needs numpy only. A graph
without types is the one-type case (:meth:`GraphTypes.one_type`: DGL's ``_N`` and ``_N:_E:_N``).
"""
from __future__ import annotations

import dataclasses
import re
import types as _pytypes
from typing import Any, Mapping, Sequence

import numpy as np

from dglx_dist.errors import IdOutOfRangeError, PartitionFormatError, UnknownNameError
from dglx_dist.graphcore.types import ONE_ETYPE, ONE_NTYPE, Etype

__all__ = ["GraphTypes", "Etype"]

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")


def _offsets(values: Any, count: int, field: str, where: str) -> np.ndarray:
    ok = (isinstance(values, list) and len(values) == count + 1 and
          all(isinstance(v, int) and not isinstance(v, bool) for v in values))
    if ok:
        arr = np.asarray(values, dtype=np.int64)
        ok = arr[0] == 0 and bool(np.all(np.diff(arr) >= 0))
    if not ok:
        raise PartitionFormatError(f"{where}: field 'types.{field}' = {values!r:.80}; expected "
                                   f"{count + 1} non-decreasing integers from 0, one more "
                                   f"than there are types")
    return arr


def _name(value: Any, field: str, where: str) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise PartitionFormatError(f"{where}: field 'types.{field}' has the name {value!r:.60}; "
                                   f"expected letters, digits, '_', '.' or '-'")
    return value


@dataclasses.dataclass(frozen=True, eq=False)
class GraphTypes:
    """Node types, canonical edge types and where each type's ids start.

    Attributes:
        ntypes: node type names, in order (DGL's: sorted).
        ntype_offsets: type ``i``'s original homogeneous ids are
            ``[ntype_offsets[i], ntype_offsets[i+1])``.
        canonical_etypes: ``(src type, relation, dst type)``, in order.
        etype_offsets: the same for edges (the ``eid`` a part stores).
        feat_dims: feature width per node type (0: the type has no features).
        labeled: the node types that have labels and masks.
        category: the node type a node-classification run predicts, or None.
        edge_data: per edge-data name, the indices of the edge types that have it (the
            others hold zeros in its rows); None: every edge type has every name.
        untyped: the one-type case of a graph without types (DGL's names only), whose
            partitions keep the format without types (``feat.arrow``, no ``types``); not part
            of the manifest.
    """

    ntypes: tuple[str, ...]
    ntype_offsets: np.ndarray
    canonical_etypes: tuple[Etype, ...]
    etype_offsets: np.ndarray
    feat_dims: Mapping[str, int]
    labeled: tuple[str, ...]
    category: str | None = None
    edge_data: Mapping[str, tuple[int, ...]] | None = None
    untyped: bool = False

    @classmethod
    def one_type(cls, num_nodes: int, num_edges: int, feat_dim: int) -> "GraphTypes":
        """A graph without types as the one-type case: DGL's ``_N`` and ``_N:_E:_N``."""
        return cls((ONE_NTYPE,), [0, num_nodes], (ONE_ETYPE,), [0, num_edges],
                   {ONE_NTYPE: feat_dim}, (ONE_NTYPE,), untyped=True)

    @classmethod
    def of(cls, ntypes: Mapping[str, tuple[int, int, bool]],
           etypes: Mapping[Etype, tuple[int, Sequence[str]]],
           category: str | None) -> "GraphTypes":
        """The types of a typed dataset, in DGL's (sorted) order: ``ntypes`` {name: (num_nodes,
        feat_dim, labeled)}, ``etypes`` {canonical edge type: (num_edges, edge-data names)}."""
        names, ets = sorted(ntypes), sorted(etypes)
        offsets = [np.concatenate([[0], np.cumsum(c, dtype=np.int64)])
                   for c in ([ntypes[t][0] for t in names], [etypes[e][0] for e in ets])]
        edge_data = {}
        for i, et in enumerate(ets):
            for name in etypes[et][1]:
                edge_data.setdefault(name, []).append(i)
        return cls(tuple(names), offsets[0], tuple(ets), offsets[1],
                   {t: ntypes[t][1] for t in names}, tuple(t for t in names if ntypes[t][2]),
                   category, {k: tuple(v) for k, v in sorted(edge_data.items())},
                   (names, ets) == ([ONE_NTYPE], [ONE_ETYPE]))

    def __post_init__(self) -> None:  # frozen all the way down: shared by every reader
        for name in ("ntype_offsets", "etype_offsets"):
            arr = np.array(getattr(self, name), dtype=np.int64)
            arr.flags.writeable = False
            object.__setattr__(self, name, arr)
        object.__setattr__(self, "feat_dims", _pytypes.MappingProxyType(dict(self.feat_dims)))
        if self.edge_data is not None:
            object.__setattr__(self, "edge_data", _pytypes.MappingProxyType(
                {k: tuple(int(i) for i in v) for k, v in self.edge_data.items()}))

    def __reduce__(self):
        """Pickled as its fields, the read-only mappings as dicts (a loader's sampler process
        gets the types by value; a mapping proxy does not pickle)."""
        values = [getattr(self, f.name) for f in dataclasses.fields(self)]
        return type(self), tuple(dict(v) if isinstance(v, _pytypes.MappingProxyType) else v
                                 for v in values)

    @property
    def num_nodes(self) -> int:
        return int(self.ntype_offsets[-1])

    @property
    def num_edges(self) -> int:
        return int(self.etype_offsets[-1])

    @property
    def feat_dim(self) -> int:
        """The mean feature width over all nodes, rounded up (what memory estimates size
        features by: ``sum(n_t * F_t)`` floats); the one type's width without types."""
        floats = sum(int(n) * self.feat_dims[t] for t, n in zip(self.ntypes,
                                                               np.diff(self.ntype_offsets)))
        return -(-floats // max(self.num_nodes, 1))

    # -- names ------------------------------------------------------------------------------
    def ntype_index(self, ntype: str) -> int:
        """The index of node type ``ntype`` (its position in :attr:`ntypes`)."""
        try:
            return self.ntypes.index(ntype)
        except ValueError:
            raise UnknownNameError(f"node type {ntype!r} is not one of {list(self.ntypes)}"
                                   ) from None

    def etype_index(self, etype: str | Sequence[str]) -> int:
        """The index of an edge type given as a canonical triple or, as DGL accepts, a
        relation name that only one canonical edge type has."""
        if isinstance(etype, str):
            found = [i for i, (_, rel, _) in enumerate(self.canonical_etypes) if rel == etype]
            if len(found) == 1:
                return found[0]
            why = "is not a relation of" if not found else "names several of"
        else:
            key = tuple(etype)
            if key in self.canonical_etypes:
                return self.canonical_etypes.index(key)
            why = "is not one of"
        raise UnknownNameError(f"edge type {etype!r} {why} the canonical edge types "
                               f"{[list(e) for e in self.canonical_etypes]}")

    def predicted(self) -> str | None:
        """The node type node classification predicts: :attr:`category`, else the one
        labeled type; None when neither says."""
        if self.category is not None:
            return self.category
        return self.labeled[0] if len(self.labeled) == 1 else None

    def has_edge_data(self, etype_index: int, name: str) -> bool:
        """Whether edge type ``etype_index`` has edge data ``name`` (a name the partitions
        store)."""
        return self.edge_data is None or etype_index in self.edge_data.get(name, ())

    # -- ids --------------------------------------------------------------------------------
    def to_homogeneous(self, ntype: str, ids) -> np.ndarray:
        """Original homogeneous ids of node type ``ntype``'s per-type ``ids``."""
        return _to_homogeneous(self.ntype_offsets, self.ntype_index(ntype), ids,
                               f"node type {ntype!r}")

    def to_per_type(self, ids) -> tuple[np.ndarray, np.ndarray]:
        """(node type index, per-type id) of each original homogeneous id."""
        return _to_per_type(self.ntype_offsets, ids, "node")

    def etype_to_homogeneous(self, etype: str | Sequence[str], ids) -> np.ndarray:
        """Original homogeneous edge ids (rows of the homogeneous edge list, the ``eid`` of
        a part's edges) of edge type ``etype``'s per-type edge ``ids``."""
        i = self.etype_index(etype)
        return _to_homogeneous(self.etype_offsets, i, ids,
                               f"edge type {list(self.canonical_etypes[i])}")

    def etype_of(self, eids) -> tuple[np.ndarray, np.ndarray]:
        """(edge type index, per-type edge id) of each original homogeneous edge id."""
        return _to_per_type(self.etype_offsets, eids, "edge")

    # -- the manifest's ``types`` object ------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"ntypes": list(self.ntypes),
                "ntype_offsets": [int(o) for o in self.ntype_offsets],
                "canonical_etypes": [list(e) for e in self.canonical_etypes],
                "etype_offsets": [int(o) for o in self.etype_offsets],
                "feat_dims": dict(self.feat_dims), "labeled": list(self.labeled),
                "category": self.category,
                **({} if self.edge_data is None else
                   {"edge_data": {k: list(v) for k, v in self.edge_data.items()}})}

    @classmethod
    def from_json(cls, d: Any, where: str) -> "GraphTypes":
        """Parses and checks a manifest's ``types`` object.

        Raises:
            PartitionFormatError: naming ``where`` and the field that is wrong.
        """
        if not isinstance(d, dict) or not isinstance(d.get("ntypes"), list) or \
                not d["ntypes"] or not isinstance(d.get("canonical_etypes"), list):
            raise PartitionFormatError(f"{where}: field 'types' = {d!r:.80}; expected an object "
                                       "with ntypes, ntype_offsets, canonical_etypes, "
                                       "etype_offsets, feat_dims, labeled and category")
        ntypes = tuple(_name(t, "ntypes", where) for t in d["ntypes"])
        if list(ntypes) != sorted(set(ntypes)):
            raise PartitionFormatError(f"{where}: field 'types.ntypes' = {list(ntypes)}; "
                                       "expected distinct names in sorted order")
        etypes = tuple(_etype(e, i, ntypes, where) for i, e in enumerate(d["canonical_etypes"]))
        if list(etypes) != sorted(set(etypes)):
            raise PartitionFormatError(f"{where}: field 'types.canonical_etypes' must list "
                                       "distinct edge types in sorted order")
        return cls(ntypes, _offsets(d.get("ntype_offsets"), len(ntypes), "ntype_offsets", where),
                   etypes, _offsets(d.get("etype_offsets"), len(etypes), "etype_offsets", where),
                   _feat_dims(d.get("feat_dims"), ntypes, where),
                   _labeled(d.get("labeled"), ntypes, where), _category(d, ntypes, where),
                   _edge_data(d.get("edge_data"), len(etypes), where))


def _etype(e: Any, i: int, ntypes: tuple[str, ...], where: str) -> Etype:
    if not (isinstance(e, list) and len(e) == 3 and e[0] in ntypes and e[2] in ntypes):
        raise PartitionFormatError(f"{where}: field 'types.canonical_etypes[{i}]' = {e!r:.80}; "
                                   f"expected [src type, relation, dst type] over the node "
                                   f"types {list(ntypes)}")
    return (e[0], _name(e[1], f"canonical_etypes[{i}]", where), e[2])


def _feat_dims(d: Any, ntypes: tuple[str, ...], where: str) -> Mapping[str, int]:
    ok = isinstance(d, dict) and sorted(d) == list(ntypes) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in d.values())
    if not ok:
        raise PartitionFormatError(f"{where}: field 'types.feat_dims' = {d!r:.80}; expected "
                                   f"a width >= 0 (0: no features) for each of {list(ntypes)}")
    return {t: d[t] for t in ntypes}


def _labeled(values: Any, ntypes: tuple[str, ...], where: str) -> tuple[str, ...]:
    if not isinstance(values, list) or any(v not in ntypes for v in values):
        raise PartitionFormatError(f"{where}: field 'types.labeled' = {values!r:.80}; expected "
                                   f"a list of node types among {list(ntypes)}")
    return tuple(t for t in ntypes if t in values)


def _category(d: dict, ntypes: tuple[str, ...], where: str) -> str | None:
    category = d.get("category")
    if category is not None and category not in ntypes:
        raise PartitionFormatError(f"{where}: field 'types.category' = {category!r:.60}; "
                                   f"expected null or one of {list(ntypes)}")
    return category


def _edge_data(d: Any, count: int, where: str) -> Mapping[str, tuple[int, ...]] | None:
    if d is None:  # written before edge data could differ between edge types
        return None
    ok = isinstance(d, dict) and all(
        isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool)
                                    and 0 <= i < count for i in v) for v in d.values())
    if not ok:
        raise PartitionFormatError(f"{where}: field 'types.edge_data' = {d!r:.80}; expected "
                                   f"{{name: [edge type index, ...]}} with indices in "
                                   f"[0, {count})")
    return {k: tuple(v) for k, v in d.items()}


def _to_homogeneous(offsets: np.ndarray, i: int, ids, what: str) -> np.ndarray:
    ids = np.asarray(ids, dtype=np.int64)
    lo, hi = int(offsets[i]), int(offsets[i + 1])
    if ids.size and (ids.min() < 0 or ids.max() >= hi - lo):
        bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
        raise IdOutOfRangeError(f"id {bad} is outside [0, {hi - lo}) of {what}")
    return ids + lo


def _to_per_type(offsets: np.ndarray, ids, kind: str) -> tuple[np.ndarray, np.ndarray]:
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= offsets[-1]):
        bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
        raise IdOutOfRangeError(f"homogeneous {kind} id {bad} is outside [0, {int(offsets[-1])})")
    index = np.searchsorted(offsets, ids, side="right") - 1
    return index, ids - offsets[index]
