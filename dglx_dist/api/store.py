"""The KVStore a :class:`~dglx_dist.api.DistGraph` reads its data from: what each rank puts
into it (node data by rows, edge data and endpoints by edges, nodes' degrees) and which part
is whose."""
from __future__ import annotations

import torch

from dglx_dist.api.edata import PREFIX as EDGE_PREFIX
from dglx_dist.api.ndata import MASKS, NodeSpace
from dglx_dist.api.structure import store_structure
from dglx_dist.api.types import store_typed_node_data
from dglx_dist.errors import InvalidValueError
from dglx_dist.kvstore import ColumnPolicy, DistKVStore, RowPolicy
from dglx_dist.partition.load import PartitionDir
from dglx_dist.runtime.session import Session

__all__ = ["node_data_store", "part_of", "part_comm"]


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


def node_data_store(session: Session, pdir: PartitionDir,
                    spaces: dict[str, NodeSpace] | None = None) -> DistKVStore:
    """A KVStore with the node data by rows: "feat" (when the partitions store rows), "label"
    and the masks (per node type, in ``spaces``, for a typed partitioning), the edge data and
    endpoints by edges, and (without types) every node's degrees (collective). It serves rows to one rank at a time, so that
    ``g.ndata`` / ``g.edata`` reads and writes need no other rank to take part."""
    part_id = part_of(session, pdir)
    part = pdir.load_part(part_id)
    store = DistKVStore(session, serve=True)
    if spaces:
        store_typed_node_data(store, pdir, part_id, part, spaces)
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
