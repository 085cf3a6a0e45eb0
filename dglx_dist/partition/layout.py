"""From a plan to per-part contents: the rule shared by every partitioner (docs/partitioners.md):
every edge is stored once, with the owner of its destination node; sources owned elsewhere are
the part's HALO nodes; local ids are the core nodes, then the HALO nodes, each by global id.

Features are cut per node type (a graph without types is the one-type case,
:func:`~dglx_dist.partition.base.graph_types`). Every partitioner keeps the original order
within a part (``metis`` relabels by a stable sort by part), so a part's core nodes of one type
form one run, the types' runs in type order (checked): a typed part's ``ntype_counts`` give a
node's per-type row as its local id minus the start of its type's run. Under a column layout
part ``p`` holds column slice ``p`` of *every* node of each featured type (in per-type id
order). Every writer makes its parts so; :func:`stored` lays one out in the format the
manifest's fields say (:func:`format_fields`): a graph without types keeps the format without
types (its features as ``feat``; under a column layout in global-id order).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterator

import numpy as np

from dglx_dist.data.dataset import GraphDataset
from dglx_dist.errors import PartitionError
from dglx_dist.graphcore.types import ONE_NTYPE
from dglx_dist.partition.base import PartitionPlan, graph_types, type_feature_slices
from dglx_dist.partition.book import FeatureSlices
from dglx_dist.partition.types import GraphTypes

__all__ = ["Partition", "Layout", "format_fields", "stored"]


@dataclasses.dataclass(frozen=True, eq=False)
class Partition:
    """One part's arrays: what the layout writes and what ``PartitionDir.load_part`` returns.

    Local ids: core nodes ``0 .. num_core-1``, then HALO nodes.

    Attributes:
        part: part index.
        core_gid / core_orig: global (partitioned) and original ids of core nodes.
        halo_gid / halo_orig: the same for HALO nodes.
        src / dst: local ids of the part's edges; ``eid`` their row in the dataset's edges.
        label, train, val, test: node data of core nodes.
        feat: core rows (row layout) or every node's columns ``feat_cols`` in global-id order
            (column layout).
        feat_cols: the half-open column range stored in ``feat``.
        edata: edge data by name, row j for the part's edge j (empty when the dataset has
            none, and when a part is loaded: :meth:`PartitionDir.load_edge_data` reads it).
        ndata: node data other than labels and masks by name, row i for core node i (empty
            when a part is loaded: :meth:`PartitionDir.load_node_data` reads it).
        ntype_counts: typed partitions only (else None): core nodes per node type, in type
            order; each type's core nodes are one run of local ids, the types' runs in order.
        type_feat: typed partitions only: the features of each node type that has them, by
            type index, rows = the part's core nodes of that type in local order (empty when
            a part is loaded: :meth:`PartitionDir.load_type_feat` reads them).
    """

    part: int
    core_gid: np.ndarray
    core_orig: np.ndarray
    halo_gid: np.ndarray
    halo_orig: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    eid: np.ndarray
    label: np.ndarray
    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    feat: np.ndarray
    feat_cols: tuple[int, int]
    edata: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    ndata: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    ntype_counts: np.ndarray | None = None
    type_feat: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)

    @property
    def num_core(self) -> int:
        return int(self.core_gid.size)

    @property
    def num_halo(self) -> int:
        return int(self.halo_gid.size)

    @property
    def local_gid(self) -> np.ndarray:
        """Global id of every local node (core then HALO)."""
        return np.concatenate([self.core_gid, self.halo_gid])

    def source_counts(self, num_nodes: int) -> np.ndarray:
        """Per global id, how many of this part's edges leave it (summed over the parts,
        which store every edge once: its out-degree)."""
        return np.bincount(self.local_gid[self.src], minlength=num_nodes)


def format_fields(types: GraphTypes, num_parts: int, columns: bool) -> dict[str, Any]:
    """The manifest's fields that say how features are stored: per node type (``types``,
    ``feat_dim`` 0, and ``type_feature_slices`` under a column layout: each featured type's
    width split evenly), or for a graph without types (the one-type case) the format without
    types, its one type's width as ``feat_dim`` and its column bounds as ``feature_slices``."""
    slices = ({t: s.to_json() for t, s in type_feature_slices(types, num_parts).items()}
              if columns else {})
    none = [0] * (num_parts + 1 if columns else 2)
    if types.untyped:  # the format without types (DGL's one type, ``_N``)
        width = types.feat_dims[ONE_NTYPE]
        return {"feat_dim": width, "feature_slices": slices.get(ONE_NTYPE, none[:-1] + [width])}
    return {"feat_dim": 0, "feature_slices": none, "types": types.to_json(),
            **({"type_feature_slices": slices} if columns else {})}


def stored(pc: Partition, fields: dict[str, Any], columns: bool,
           orig_ids: np.ndarray | None = None) -> Partition:
    """Part ``pc`` as every writer makes it (typed: ``ntype_counts``, ``type_feat``) in the
    format of the manifest ``fields`` (:func:`format_fields`). Without ``types`` its one type's
    features become ``feat``: the core rows, or under a column layout its slice of every node
    in partitioned-id order (``orig_ids[gid]``: the original id of each; None: the same)."""
    if "types" in fields:  # the format with types keeps the part as it is
        return pc
    feat = pc.type_feat.get(0, np.zeros((pc.num_core, 0), np.float32))
    bounds = FeatureSlices(fields["feature_slices"])
    sl = bounds.slice(pc.part) if columns else slice(0, bounds.feat_dim)
    if columns and orig_ids is not None:
        feat = feat[orig_ids]
    return dataclasses.replace(pc, feat=feat, feat_cols=(sl.start, sl.stop), ntype_counts=None,
                               type_feat={})


class Layout:
    """Edges grouped by destination owner, computed once and sliced per part.

    Owners and local ids of all nodes are computed once here as lookup arrays (cheaper than
    asking the book per edge; the book stays table-free for everyone else).
    """

    def __init__(self, ds: GraphDataset, plan: PartitionPlan, owner: np.ndarray | None = None):
        """``owner``: every node's owner if already computed (else asked from the book)."""
        self.ds, self.plan, self.book = ds, plan, plan.book
        self.types = graph_types(ds)
        self.type_feat = ds.type_feat
        self.columns = plan.feature_slices is not None
        self.fields = format_fields(self.types, plan.book.num_parts, self.columns)
        k, n = self.book.num_parts, ds.num_nodes
        new_ids = plan.new_ids()
        self.src = ds.src if new_ids is None else new_ids[ds.src]
        self.dst = ds.dst if new_ids is None else new_ids[ds.dst]
        if owner is None:
            owner = np.asarray(self.book.owner(np.arange(n, dtype=np.int64)))
        self.owner = owner.astype(np.int16 if k < 2**15 else np.int32)  # radix-sortable
        self.node_order = np.argsort(self.owner, kind="stable")  # core ids of part 0, 1, ...
        self.node_bounds = np.concatenate([[0], np.cumsum(np.bincount(self.owner, minlength=k))])
        self.local = np.empty(n, dtype=np.int64)
        self.local[self.node_order] = (np.arange(n, dtype=np.int64)
                                       - self.node_bounds[self.owner[self.node_order]])
        self.src_owner = self.owner[self.src]
        self.dst_owner = self.owner[self.dst]
        self.edge_order = np.argsort(self.dst_owner, kind="stable")
        self.edges_per_part = np.bincount(self.dst_owner, minlength=k)
        self.edge_bounds = np.concatenate([[0], np.cumsum(self.edges_per_part)])
        self._mark = np.zeros(n, dtype=bool)

    def orig(self, gids: np.ndarray) -> np.ndarray:
        """Original ids of partitioned-graph ids."""
        return gids if self.plan.orig_ids is None else self.plan.orig_ids[gids]

    def node_owner_orig(self) -> np.ndarray:
        """Owner of every node, indexed by original id."""
        owner = self.owner.astype(np.int64)
        return owner if self.plan.orig_ids is None else owner[self.plan.new_ids()]

    def edge_cut(self) -> int:
        """Edges whose endpoints have different owners."""
        return int(np.count_nonzero(self.src_owner != self.dst_owner))

    def parts(self) -> Iterator[Partition]:
        """Each part's contents, one at a time (only one part's copies live at once)."""
        for p in range(self.book.num_parts):
            yield self.part(p)

    def _halo(self, remote_src: np.ndarray) -> np.ndarray:
        """Sorted unique ids of ``remote_src`` (a mark array instead of a sort)."""
        self._mark[remote_src] = True
        halo = np.flatnonzero(self._mark)
        self._mark[halo] = False
        return halo

    def part(self, p: int) -> Partition:
        idx = self.edge_order[self.edge_bounds[p]:self.edge_bounds[p + 1]]
        src, dst = self.src[idx], self.dst[idx]
        remote = self.src_owner[idx] != p
        halo = self._halo(src[remote])
        core = self.node_order[self.node_bounds[p]:self.node_bounds[p + 1]].astype(np.int64)
        local_src = self.local[src]
        # HALO local ids: num_core + rank among the part's HALO nodes (self.local is reused
        # as scratch for them and restored afterwards)
        saved = self.local[halo]
        self.local[halo] = core.size + np.arange(halo.size, dtype=np.int64)
        local_src[remote] = self.local[src[remote]]
        self.local[halo] = saved
        core_orig = self.orig(core)
        ds = self.ds
        counts, feats = self._features(p, core_orig)
        pc = Partition(
            part=p, core_gid=core, core_orig=core_orig, halo_gid=halo, halo_orig=self.orig(halo),
            src=local_src, dst=self.local[dst], eid=idx.astype(np.int64),
            label=ds.label[core_orig], train=ds.train[core_orig], val=ds.val[core_orig],
            test=ds.test[core_orig], feat=np.zeros((core.size, 0), np.float32), feat_cols=(0, 0),
            edata={name: values[idx] for name, values in ds.edata.items()},
            ntype_counts=counts, type_feat=feats)
        return stored(pc, self.fields, self.columns, self.plan.orig_ids)

    def _features(self, p: int, core_orig: np.ndarray) -> tuple[np.ndarray, dict]:
        """Part ``p``'s core nodes per node type, and each featured type's features: the
        part's rows of the type, or under a column layout its column slice of every row."""
        types = self.types
        node_type, _ = types.to_per_type(core_orig)
        after = np.flatnonzero(np.diff(node_type) < 0)
        if after.size:  # a plan that reordered nodes within a part
            i = int(after[0])
            raise PartitionError(
                f"part {p}: core node {i + 1} is of type {types.ntypes[node_type[i + 1]]!r} "
                f"after one of type {types.ntypes[node_type[i]]!r}; typed partitions need "
                f"each part's core nodes in original-id order (a partitioner that relabels "
                f"must keep the order within a part, as a stable sort by part does)")
        counts = np.bincount(node_type, minlength=len(types.ntypes)).astype(np.int64)
        if not self.columns:
            starts = np.concatenate([[0], np.cumsum(counts)])
            return counts, {i: f[core_orig[starts[i]:starts[i + 1]] - types.ntype_offsets[i]]
                            for i, f in self.type_feat.items()}
        slices = type_feature_slices(types, self.book.num_parts)  # of every node, per-type order
        return counts, {i: np.ascontiguousarray(f[:, slices[types.ntypes[i]].slice(p)])
                        for i, f in self.type_feat.items()}
