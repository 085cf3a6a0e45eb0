"""Typed datasets in the partitioner: the homogeneous view partitioners plan on, and what a
typed part adds to a homogeneous one.

A :class:`~dglx_dist.data.hetero.HeteroDataset` is partitioned as the :class:`TypedGraph` it
flattens to: a :class:`~dglx_dist.data.format.GraphDataset` over the original homogeneous ids
(:mod:`dglx_dist.partition.types`), so every partitioner plans it unchanged. Labels of node
types without labels are -1 (masks false); the features stay per type, because the types'
widths differ: the view's ``feat`` has no columns, and :class:`TypedLayout` cuts each part's
rows of every type out of the type's own matrix. Under a column layout (``feature_dim``),
part ``p`` holds instead column slice ``p`` of *every* node of each featured type
(:func:`type_feature_slices`: each type's width split evenly), rows in per-type id order.

Because every partitioner keeps the original order within a part (``hash`` does not relabel,
``metis`` relabels by a stable sort by part), a part's core nodes of one type form one run,
the types' runs in type order; :class:`TypedLayout` checks it, and records each part's
``ntype_counts`` so that a node's per-type row in its part is its local id minus the start
of its type's run.

Edge data is one homogeneous column per name, in edge order, in the parts' edges files: an
edge type may lack a name (its rows hold zeros, and ``GraphTypes.edge_data`` records which
edge types have each name), but the types that have it must agree on its dtype and row shape.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
import pyarrow.parquet as pq

from dglx_dist.data.edge_data import edge_data_columns
from dglx_dist.data.format import DatasetMeta, GraphDataset
from dglx_dist.data.hetero import Etype, HeteroDataset, etype_key
from dglx_dist.data.hetero_format import HeteroMeta, edge_file, read_hetero_dataset, \
    read_hetero_meta
from dglx_dist.errors import DatasetFormatError, PartitionError
from dglx_dist.partition.book import FeatureSlices
from dglx_dist.partition.layout import Layout, Partition
from dglx_dist.partition.quality import imbalance
from dglx_dist.partition.types import GraphTypes

__all__ = ["TypedMeta", "TypedGraph", "TypedLayout", "TypeTally", "open_typed", "graph_types",
           "type_feature_slices"]


@dataclasses.dataclass(frozen=True)
class TypedMeta(DatasetMeta):
    """A typed dataset's sizes, what partitioners validate and estimate from: nodes and edges
    of every type; ``feat_dim`` the mean feature width over all nodes (what the memory
    estimate sizes features by: the per-type matrices hold ``sum(n_t * F_t)`` floats)."""

    types: GraphTypes | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class TypedGraph(GraphDataset):
    """The homogeneous view of a typed dataset (see the module docstring).

    Attributes:
        types: the types and their offsets.
        node_type: every node's type index, by original homogeneous id.
        type_feat: the features of each node type that has them, by type index
            (row = per-type id).
    """

    types: GraphTypes | None = None
    node_type: np.ndarray | None = None
    type_feat: Mapping[int, np.ndarray] = dataclasses.field(default_factory=dict)

    def type_feat_bytes(self) -> int:
        return int(sum(f.nbytes for f in self.type_feat.values()))


def graph_types(ntypes: Mapping[str, tuple[int, int, bool]], etypes: Sequence[Etype],
                num_edges: Sequence[int], category: str | None,
                edge_names: Sequence[Sequence[str]] = ()) -> GraphTypes:
    """The types of a typed dataset: ``ntypes`` {name: (num_nodes, feat_dim, labeled)},
    the canonical edge types with their edge counts and (optionally) their edge-data names;
    put in DGL's (sorted) order."""
    names = sorted(ntypes)
    named = dict(zip(map(tuple, etypes), edge_names)) if edge_names else {}
    pairs = sorted(zip(map(tuple, etypes), num_edges))
    offsets = [np.concatenate([[0], np.cumsum(c, dtype=np.int64)])
               for c in ([ntypes[t][0] for t in names], [n for _, n in pairs])]
    edge_data = {}
    for i, (et, _) in enumerate(pairs):
        for name in named.get(et, ()):
            edge_data.setdefault(name, []).append(i)
    return GraphTypes(tuple(names), offsets[0], tuple(e for e, _ in pairs), offsets[1],
                      {t: ntypes[t][1] for t in names},
                      tuple(t for t in names if ntypes[t][2]), category,
                      {k: tuple(v) for k, v in sorted(edge_data.items())})


def _types_of(ds: HeteroDataset) -> GraphTypes:
    return graph_types({t: (n.num_nodes, n.feat_dim, n.labeled) for t, n in ds.nodes.items()},
                       ds.canonical_etypes, [e.num_edges for e in ds.edges.values()],
                       ds.category, [list(e.edata) for e in ds.edges.values()])


def _typed_meta(types: GraphTypes, num_classes: int, extra: dict) -> TypedMeta:
    floats = sum((int(types.ntype_offsets[i + 1] - types.ntype_offsets[i])) * types.feat_dims[t]
                 for i, t in enumerate(types.ntypes))
    return TypedMeta(types.num_nodes, types.num_edges, -(-floats // max(types.num_nodes, 1)),
                     num_classes, dict(extra), types=types)


def _check_edge_data(specs: dict[Etype, dict[str, str]], where: str) -> None:
    """Refuses an edge-data name whose dtype or row shape differs between edge types."""
    seen: dict[str, tuple[Etype, str]] = {}
    for etype, spec in specs.items():
        for name, kind in spec.items():
            first, want = seen.setdefault(name, (etype, kind))
            if kind != want:
                raise PartitionError(
                    f"{where}: edge data {name!r} is {kind} in edge type {etype_key(etype)} "
                    f"but {want} in {etype_key(first)}; typed partitions store one column per "
                    f"name: give it one dtype and row shape in every edge type, or rename one")


def _hetero_meta_types(meta: HeteroMeta, specs: dict[Etype, dict[str, str]]) -> GraphTypes:
    return graph_types({t: (s["num_nodes"], s["feat_dim"], s["labeled"])
                        for t, s in meta.ntypes.items()}, meta.etypes, meta.num_edges,
                       meta.category, [list(specs.get(tuple(e), {})) for e in meta.etypes])


def open_typed(data: str | os.PathLike | HeteroDataset,
               nonfinite: str) -> tuple[TypedMeta, Callable[[], TypedGraph]]:
    """A typed dataset (directory or in memory): its sizes, read and checked without loading
    it (edge data that differs between edge types is refused here), and what loads its
    homogeneous view."""
    if isinstance(data, HeteroDataset):
        _check_edge_data({et: {k: f"{v.dtype}{list(v.shape[1:])}" for k, v in e.edata.items()}
                          for et, e in data.edges.items()}, "the dataset")
        return (_typed_meta(_types_of(data), data.num_classes, data.extra),
                lambda: typed_graph(data))
    path = Path(data)
    meta = read_hetero_meta(path)
    specs = {}
    for i, etype in enumerate(meta.etypes):
        file = path / edge_file(i, etype)
        try:
            schema = pq.read_schema(file)
        except (OSError, ValueError) as exc:
            raise DatasetFormatError(f"{file}: not a readable Parquet file ({exc})") from None
        specs[etype] = {n: str(schema.field(n).type)
                        for n in edge_data_columns(schema, file, DatasetFormatError)}
    _check_edge_data(specs, str(path))
    return (_typed_meta(_hetero_meta_types(meta, specs), meta.num_classes, meta.extra),
            lambda: typed_graph(read_hetero_dataset(path, nonfinite)))


def typed_graph(ds: HeteroDataset) -> TypedGraph:
    """The homogeneous view of ``ds`` (edges and node data in original homogeneous ids)."""
    src, dst = ds.homogeneous_edges()
    nodes = list(ds.nodes.values())
    label = np.concatenate([np.full(n.num_nodes, -1, np.int64) if n.label is None
                            else np.asarray(n.label, np.int64) for n in nodes])
    masks = {m: np.concatenate([np.asarray(n.masks()[m], bool) for n in nodes])
             for m in ("train", "val", "test")}
    edata = _edge_columns(ds)
    return TypedGraph(src.astype(np.int64), dst.astype(np.int64),
                      np.zeros((label.size, 0), np.float32), label, masks["train"],
                      masks["val"], masks["test"], ds.num_classes, dict(ds.extra), edata,
                      types=_types_of(ds), node_type=ds.node_types(),
                      type_feat={i: np.asarray(n.feat, np.float32) for i, n in enumerate(nodes)
                                 if n.feat is not None})


def type_feature_slices(types: GraphTypes, num_parts: int) -> dict[str, FeatureSlices]:
    """The column slices of each featured node type under a column layout: its width split
    into ``num_parts`` even slices (one line naming a type narrower than ``num_parts``)."""
    narrow = {t: w for t, w in types.feat_dims.items() if 0 < w < num_parts}
    if narrow:
        t, w = min(narrow.items(), key=lambda kv: kv[1])
        raise PartitionError(f"feature_dim: node type {t!r} has {w} feature columns; expected "
                             f"num_parts = {num_parts} <= the width of every node type with "
                             f"features (at most {w} parts)")
    return {t: FeatureSlices.even(w, num_parts) for t, w in types.feat_dims.items() if w}


def _edge_columns(ds: HeteroDataset) -> dict[str, np.ndarray]:
    """Each edge-data name as one column over every edge (zeros for edge types without it)."""
    first = {}
    for e in ds.edges.values():
        for name, values in e.edata.items():
            first.setdefault(name, values)
    return {name: np.concatenate([e.edata[name] if name in e.edata else
                                  np.zeros((e.num_edges, *v.shape[1:]), v.dtype)
                                  for e in ds.edges.values()]) for name, v in first.items()}


class TypedLayout(Layout):
    """A :class:`Layout` whose parts also carry ``ntype_counts`` and per-type features (the
    part's rows of each type, or under a column layout its column slice of every row)."""

    ds: TypedGraph

    def part(self, p: int) -> Partition:
        pc = super().part(p)
        types, node_type = self.ds.types, self.ds.node_type[pc.core_orig]
        after = np.flatnonzero(np.diff(node_type) < 0)
        if after.size:  # a plan that reordered nodes within a part
            i = int(after[0])
            raise PartitionError(
                f"part {p}: core node {i + 1} is of type {types.ntypes[node_type[i + 1]]!r} "
                f"after one of type {types.ntypes[node_type[i]]!r}; typed partitions need "
                f"each part's core nodes in original-id order (a partitioner that relabels "
                f"must keep the order within a part, as a stable sort by part does)")
        counts = np.bincount(node_type, minlength=len(types.ntypes)).astype(np.int64)
        starts = np.concatenate([[0], np.cumsum(counts)])
        if self.plan.feature_slices is None:
            feats = {i: f[pc.core_orig[starts[i]:starts[i + 1]] - types.ntype_offsets[i]]
                     for i, f in self.ds.type_feat.items()}
        else:  # column slice p of every node of the type
            slices = type_feature_slices(types, self.book.num_parts)
            feats = {i: np.ascontiguousarray(f[:, slices[types.ntypes[i]].slice(p)])
                     for i, f in self.ds.type_feat.items()}
        return dataclasses.replace(pc, ntype_counts=counts, type_feat=feats)


class TypeTally:
    """The per-type part of a typed partitioning's quality report, tallied part by part:
    core nodes per node type, and per canonical edge type its edges, edge cut (edges whose
    source is owned by another part than the one storing them) and HALO nodes per part
    (distinct sources owned elsewhere of the part's edges of that type)."""

    def __init__(self, types: GraphTypes):
        self.types = types
        k = len(types.canonical_etypes)
        self.cut = np.zeros(k, np.int64)
        self.counts: list[np.ndarray] = []
        self.halo: list[np.ndarray] = []

    def add(self, pc: Partition) -> None:
        k = len(self.types.canonical_etypes)
        etype, _ = self.types.etype_of(pc.eid)
        remote = pc.src >= pc.num_core
        self.cut += np.bincount(etype[remote], minlength=k)
        pairs = np.unique(etype[remote] * (pc.num_core + pc.num_halo) + pc.src[remote])
        self.halo.append(np.bincount(pairs // max(pc.num_core + pc.num_halo, 1), minlength=k))
        self.counts.append(pc.ntype_counts)

    def to_json(self) -> dict:
        types, counts = self.types, np.array(self.counts).reshape(len(self.counts), -1)
        halo = np.array(self.halo).reshape(len(self.halo), -1)
        ntypes = {t: {"core_per_part": [int(c) for c in counts[:, i]],
                      "imbalance": round(imbalance(counts[:, i]), 4)}
                  for i, t in enumerate(types.ntypes)}
        etypes = {}
        for i, et in enumerate(types.canonical_etypes):
            n = int(types.etype_offsets[i + 1] - types.etype_offsets[i])
            etypes[etype_key(et)] = {"edges": n, "edge_cut": int(self.cut[i]),
                                     "edge_cut_frac": int(self.cut[i]) / max(n, 1),
                                     "halo_per_part": [int(h) for h in halo[:, i]]}
        return {"ntypes": ntypes, "etypes": etypes}
