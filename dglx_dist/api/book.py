"""``g.get_partition_book()``: DGL's ``GraphPartitionBook`` of a :class:`DistGraph`, in the
graph's own ids.

DGL's book speaks its relabeled ids; here every id is the one the user knows (the graph given
to ``distribute``, the dataset's rows), per type on a graph with types. Homogeneous ids are
the original ones, types in DGL's order (``dgl.to_homogeneous``'s numbering), as
``map_to_homo_nid`` and ``map_to_per_ntype`` use them. ``graph`` is the DistGraph, not
imported here (:mod:`~dglx_dist.api.ndata`).
"""
from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np
import torch

from dglx_dist.api.ndata import as_node_ids
from dglx_dist.errors import InvalidTypeError, InvalidValueError, NotSupportedError

__all__ = ["PartitionBook", "by_type", "given_edge_ids", "given_node_ids", "of_type"]


class PartitionBook:
    """Which part holds which nodes (DGL's ``GraphPartitionBook`` surface)."""

    def __init__(self, graph, partid: int):
        self.graph, self.partid = graph, int(partid)

    def num_partitions(self) -> int:
        return self.graph.pdir.num_parts

    @property
    def ntypes(self) -> list[str]:
        return self.graph.ntypes

    @property
    def canonical_etypes(self) -> list[tuple[str, str, str]]:
        return self.graph.canonical_etypes

    @property
    def etypes(self) -> list[str]:
        return self.graph.etypes

    @property
    def is_homogeneous(self) -> bool:
        return not self.graph.is_typed

    def to_canonical_etype(self, etype) -> tuple[str, str, str]:
        return self.graph.to_canonical_etype(etype)

    @functools.cached_property
    def _in_row_order(self) -> dict[str, torch.Tensor]:
        """Each node type's ids in row order."""
        return {t: torch.arange(s.num_nodes) if s.to_rows is None else torch.argsort(s.to_rows)
                for t, s in self.graph.spaces.items()}

    def partid2nids(self, partid: int, ntype: str | None = None) -> torch.Tensor:
        """The ids (of ``ntype`` on a graph with types) of the nodes part ``partid`` holds."""
        space = self.graph.space(ntype)
        rows = torch.from_numpy(np.asarray(space.policy.book.core_ids(int(partid))))
        return self._in_row_order[space.ntype][rows]

    def nid2partid(self, nids, ntype: str | None = None) -> torch.Tensor:
        """The part holding each node of ``nids`` (of ``ntype`` on a graph with types)."""
        space = self.graph.space(ntype)
        ids = space.check(nids, "nid2partid")
        return torch.as_tensor(space.policy.book.owner(space.rows(ids)))

    def partid2eids(self, partid: int, etype=None) -> torch.Tensor:
        """The ids (of edge type ``etype`` on a graph with types), sorted, of the edges part
        ``partid`` stores: the in-edges of its nodes."""
        book = self.graph.pdir.edge_book()
        lo, hi = (int(book.offsets[i]) for i in (int(partid), int(partid) + 1))
        ids = self.graph.edata.ids(torch.arange(lo, hi)).sort().values
        first = int(_etype_offsets(self.graph)[self.graph.get_etype_id(etype)])
        return ids[(ids >= first) & (ids < first + self.graph.num_edges(etype))] - first

    def eid2partid(self, eids, etype=None) -> torch.Tensor:
        """The part storing each edge of ``eids`` (of edge type ``etype`` on a graph with
        types): its destination's owner."""
        ids = given_edge_ids(self.graph, {etype: eids}, "eid2partid")
        book = self.graph.pdir.edge_book()
        return torch.as_tensor(book.owner(self.graph.edata.part_ids(ids).numpy()))

    def nid2localnid(self, nids, partid: int, ntype: str | None = None) -> torch.Tensor:
        """Each node's local id in part ``partid``, which must hold it (DGL's: core nodes
        number from 0 in the part; per node type on a graph with types, each type's from 0)."""
        space = self.graph.space(ntype)
        rows = space.rows(space.check(nids, "nid2localnid")).numpy()  # the type's rows
        self._held(space.policy.book.owner(rows), partid, "nid2localnid", "node")
        return torch.as_tensor(np.asarray(space.policy.book.to_local(rows), dtype=np.int64))

    def eid2localeid(self, eids, partid: int, etype=None) -> torch.Tensor:
        """Each edge's local id in part ``partid``, which must store it (DGL's: the part's
        edges number from 0; per edge type on a graph with types, each type's from 0, in the
        part's order)."""
        graph = self.graph
        ids = given_edge_ids(graph, {etype: eids}, "eid2localeid")
        part_ids = graph.edata.part_ids(ids).numpy()
        book = graph.pdir.edge_book()
        self._held(book.owner(part_ids), partid, "eid2localeid", "edge")
        lo, hi = (int(book.offsets[i]) for i in (int(partid), int(partid) + 1))
        local = part_ids - lo  # its rank among the part's edges of the same type:
        kind = np.searchsorted(graph.types.etype_offsets,
                               graph.edata.ids(torch.arange(lo, hi)).numpy(), side="right") - 1
        asked, out = kind[local], np.empty_like(local)
        for t in np.unique(asked):
            out[asked == t] = np.searchsorted(np.flatnonzero(kind == t), local[asked == t])
        return torch.from_numpy(out)

    @staticmethod
    def _held(owners, partid: int, what: str, kind: str) -> None:
        wrong = np.flatnonzero(np.asarray(owners) != int(partid))
        if wrong.size:
            raise InvalidValueError(f"{what}: {wrong.size} {kind}(s) (the first at position "
                                    f"{int(wrong[0])}) are not in part {int(partid)}; expected "
                                    f"the {kind}s of that part ({kind[0]}id2partid tells)")

    def shared_memory(self, graph_name: str) -> None:
        """DGL's: moves the book into shared memory for its servers. There are none here."""
        raise NotSupportedError("GraphPartitionBook.shared_memory: dglx_dist runs no servers; "
                                "every rank reads the book from the partitions by itself")

    def metadata(self) -> list[dict[str, int]]:
        """Per part (DGL's): ``machine_id`` (the part), ``num_nodes`` and ``num_edges`` it
        holds (its nodes, their in-edges)."""
        pdir = self.graph.pdir
        nodes, edges = pdir.book.part_sizes(), pdir.edge_book().part_sizes()
        return [{"machine_id": p, "num_nodes": int(nodes[p]), "num_edges": int(edges[p])}
                for p in range(pdir.num_parts)]

    def map_to_homo_nid(self, ids, ntype: str) -> torch.Tensor:
        """Homogeneous ids of node type ``ntype``'s ``ids``."""
        return given_node_ids(self.graph, {ntype: ids}, "map_to_homo_nid")

    def map_to_per_ntype(self, ids) -> tuple[torch.Tensor, torch.Tensor]:
        """(node type id, per-type id) of homogeneous ``ids``."""
        ids = as_node_ids(ids, self.graph.num_nodes(), "map_to_per_ntype")
        offsets = torch.tensor([s.hom_offset for s in self.graph.spaces.values()])
        t = torch.searchsorted(offsets, ids, right=True) - 1
        return t, ids - offsets[t]

    def map_to_homo_eid(self, ids, etype) -> torch.Tensor:
        """Homogeneous ids of edge type ``etype``'s ``ids``."""
        return given_edge_ids(self.graph, {etype: ids}, "map_to_homo_eid")

    def map_to_per_etype(self, ids) -> tuple[torch.Tensor, torch.Tensor]:
        """(edge type id, per-type id) of homogeneous edge ``ids``."""
        ids = as_node_ids(ids, self.graph.num_edges(), "map_to_per_etype", kind="edge")
        offsets = _etype_offsets(self.graph)
        t = torch.searchsorted(offsets, ids, right=True) - 1
        return t, ids - offsets[t]

    def __repr__(self) -> str:
        return f"PartitionBook(partid={self.partid}, parts={self.num_partitions()})"


def by_type(value, types: list, error: Exception) -> Mapping:
    """``value`` by type: as it is when a dict (DGL's per-type form), else the one type's (a
    graph of one type, with or without types, takes either: DGL's rule); ``error`` is
    raised on a graph of several types."""
    if isinstance(value, Mapping):
        return value
    if len(types) != 1:
        raise error
    return {types[0]: value}


def given_node_ids(graph, indices, what: str = "DataLoader") -> torch.Tensor:
    """The original homogeneous ids of the user's node ``indices``: ids or a boolean mask, or
    DGL's dict {node type: per-type ids or mask} (:func:`by_type`)."""
    indices = by_type(indices, graph.ntypes, InvalidTypeError(
        f"{what}: this graph has node types {graph.ntypes}; pass the ids as a dict {{node "
        f"type: ids}}, e.g. {{{graph.ntypes[-1]!r}: train_ids}}"))
    out = [torch.zeros(0, dtype=torch.int64)]
    for ntype, ids in indices.items():
        space = graph.space(ntype)
        out.append(space.check(ids, what) + space.hom_offset)
    return torch.cat(out)


def given_edge_ids(graph, indices, what: str = "DataLoader") -> torch.Tensor:
    """The original homogeneous edge ids of the user's edge ``indices``: ids or a boolean
    mask, or DGL's dict {edge type: per-type ids or mask} (:func:`by_type`)."""
    indices = by_type(indices, graph.canonical_etypes, InvalidTypeError(
        f"{what}: this graph has edge types {graph.canonical_etypes}; pass the edge ids as a "
        f"dict {{edge type: ids}}, e.g. {{{graph.etypes[0]!r}: eids}}"))
    out, offsets = [torch.zeros(0, dtype=torch.int64)], _etype_offsets(graph)
    for key, ids in indices.items():
        etype = graph.to_canonical_etype(key)
        ids = as_node_ids(ids, graph.num_edges(etype), of_type(graph, what, etype), kind="edge")
        out.append(ids + offsets[graph.get_etype_id(etype)])
    return torch.cat(out)


def _etype_offsets(graph) -> torch.Tensor:
    """Each edge type's first homogeneous edge id."""
    return torch.as_tensor(graph.types.etype_offsets[:-1], dtype=torch.int64)


def of_type(graph, what: str, etype) -> str:
    """``what`` naming edge type ``etype`` on a graph with types (a message on a graph
    without leaves its one type out, as DGL's)."""
    return f"{what} (edge type {etype})" if graph.is_typed else what
