"""The KVStore a :class:`~dglx_dist.api.DistGraph` reads its data from: what each rank puts
into it (node data by rows, edge data and endpoints by edges, nodes' degrees) and which part
is whose. Node rows live in one :class:`~dglx_dist.api.ndata.NodeSpace` per node type
(DistDGL's per-type partition policies; a graph without types has one, ``"_N"``;
docs/architecture.md)."""
from __future__ import annotations

import numpy as np
import torch

from dglx_dist.api.edata import PREFIX as EDGE_PREFIX
from dglx_dist.api.ndata import MASKS, NodeSpace
from dglx_dist.api.structure import store_structure
from dglx_dist.errors import InvalidValueError
from dglx_dist.kvstore import ColumnPolicy, DistKVStore, RowPolicy
from dglx_dist.partition.book import RangeBook
from dglx_dist.partition.load import PartitionDir
from dglx_dist.runtime.session import Session

__all__ = ["node_data_store", "type_spaces", "part_of", "part_comm"]


def part_of(session: Session, pdir: PartitionDir) -> int:
    """The part whose rows this rank passes to the KVStore (its server's or its own)."""
    if pdir.num_parts == session.world_size:
        return session.rank
    if pdir.num_parts == session.topology.num_servers:
        return session.server_id
    raise InvalidValueError(f"{pdir.path} has {pdir.num_parts} parts; a job of "
                            f"{session.topology.num_servers} servers x "
                            f"{session.topology.ranks_per_server} ranks needs one per server or "
                            "one per rank")


def part_comm(session: Session, pdir: PartitionDir, part_id: int):
    """The ranks that hold one part each, in part order (``part_id``: this rank's)."""
    per_rank = part_id == session.rank and pdir.num_parts == session.world_size
    return session.world if per_rank else session.cross


def type_spaces(pdir: PartitionDir) -> dict[str, NodeSpace]:
    """One :class:`NodeSpace` per node type of a typed partition directory (a graph without
    types has one, every node: the graph's own)."""
    types = pdir.types
    counts = np.stack([np.asarray(pdir.ntype_counts(p), np.int64)
                       for p in range(pdir.num_parts)])  # (parts, types)
    spaces = {}
    for t, ntype in enumerate(types.ntypes):
        offsets = np.concatenate([[0], np.cumsum(counts[:, t])]).astype(np.int64)
        lo, hi = int(types.ntype_offsets[t]), int(types.ntype_offsets[t + 1])
        to_rows = np.full(hi - lo, -1, np.int64)
        to_rows[pdir.type_rows(ntype)] = np.arange(offsets[-1], dtype=np.int64)
        if (to_rows < 0).any():  # every node is some part's core node, once
            raise InvalidValueError(f"{pdir.path}: node type {ntype!r} has nodes no part owns")
        spaces[ntype] = NodeSpace(ntype, RowPolicy(RangeBook(offsets)), hi - lo,
                                  torch.from_numpy(to_rows), lo, typed=True,
                                  names=pdir.ndata_names)
    return spaces


def node_data_store(session: Session, pdir: PartitionDir,
                    spaces: dict[str, NodeSpace]) -> DistKVStore:
    """A KVStore with the node data by rows: "feat" (when the partitions store rows), "label"
    and the masks (per node type, in ``spaces``, for a typed partitioning), the edge data and
    endpoints by edges, and (without types) every node's degrees (collective). It serves rows to one rank at a time, so that
    ``g.ndata`` / ``g.edata`` reads and writes need no other rank to take part."""
    part_id = part_of(session, pdir)
    part = pdir.load_part(part_id)
    store = DistKVStore(session, serve=True)
    if pdir.types is not None:
        _store_typed_node_data(store, pdir, part_id, part, spaces)
    else:
        _store_node_data(store, pdir, part_id, part)
    edge_policy = RowPolicy(pdir.edge_book())
    for name, values in pdir.load_edge_data(part_id).items():
        store.init_data(EDGE_PREFIX + name, edge_policy, {part_id: torch.from_numpy(values)})
    store_structure(store, pdir, part_id, part, part_comm(session, pdir, part_id))
    return store


def _store_node_data(store: DistKVStore, pdir: PartitionDir, part_id: int, part) -> None:
    """Part ``part_id``'s node rows of a graph without types: "feat" (rows, or P3's column
    slices, one per rank: its own training never pulls rows from here), "label", the masks,
    and the partitions' other node data by its name."""
    policy = RowPolicy(pdir.book)
    feat_policy = policy if pdir.feature_layout == "rows" else \
        ColumnPolicy(pdir.feature_slices, pdir.num_nodes)
    store.init_data("feat", feat_policy, {part_id: torch.from_numpy(part.feat)})
    store.init_data("label", policy, {part_id: torch.from_numpy(part.label.astype("int64"))})
    for name, split in MASKS.items():
        mask = torch.from_numpy(getattr(part, split).astype("uint8"))
        store.init_data(name, policy, {part_id: mask})
    for name, values in pdir.load_node_data(part_id).items():  # what else DGL's had
        store.init_data(name, policy, {part_id: torch.from_numpy(values)})


def _store_typed_node_data(store, pdir: PartitionDir, part_id: int, part,
                          spaces: dict[str, NodeSpace]) -> None:
    """Puts part ``part_id``'s rows of every node type into ``store`` (collective): the
    features of each type that has them (under a column layout, the part's column slice of
    every row, in the type's row order), the labels and masks of each labeled type, and the
    partitions' other node data of the types that have it."""
    types, other = pdir.types, pdir.load_node_data(part_id)
    counts = np.asarray(pdir.ntype_counts(part_id), np.int64)
    starts = np.cumsum(counts) - counts
    for t, ntype in enumerate(types.ntypes):
        space, run = spaces[ntype], slice(int(starts[t]), int(starts[t] + counts[t]))
        if types.feat_dims.get(ntype, 0):
            feat = torch.from_numpy(pdir.load_type_feat(part_id, ntype))
            policy = space.policy
            if ntype in pdir.type_slices:  # per-type id order -> row order
                policy = ColumnPolicy(pdir.type_slices[ntype], space.num_nodes)
                feat = feat[torch.argsort(space.to_rows)]
            store.init_data(space.key("feat"), policy, {part_id: feat})
        if ntype in types.labeled:
            label = part.label[run].astype("int64")
            store.init_data(space.key("label"), space.policy, {part_id: torch.from_numpy(label)})
            for name, split in MASKS.items():
                mask = getattr(part, split)[run].astype("uint8")
                store.init_data(space.key(name), space.policy, {part_id: torch.from_numpy(mask)})
        for name, values in other.items():  # what else DGL's partitions had, by type
            if ntype in pdir.node_data[name].get("ntypes", ()):
                rows = torch.from_numpy(np.ascontiguousarray(values[run]))
                store.init_data(space.key(name), space.policy, {part_id: rows})
