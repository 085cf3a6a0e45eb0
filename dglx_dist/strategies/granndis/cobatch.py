"""Cooperative batches: one server-level batch of target nodes, its dependencies split over the
server's ranks (fetch-then-split, GraNNDis), as per-rank blocks (the package's
:class:`~dglx_dist.graphcore.block.Block`) plus the row exchanges between layers.

A group of ranks (a server, or the whole job for plain full-graph training) holds a node set
(:class:`GroupNodes`), each node on one member. For a batch of targets, every node's *level* is
its distance to the nearest target along in-edges inside the set (:func:`levels`); a model of
``L`` layers needs at layer ``i`` (input first) the nodes of level ``<= L-1-i`` as outputs and
those of level ``<= L-i`` as inputs. Each rank orders its nodes by (level, id), so every layer's
outputs are a prefix of its inputs: the rows a layer produces are the first rows the next one
reads, and ``h[:block.num_dst_nodes()]`` means what it does in DGL.

Rank ``r``'s block for layer ``i``: destinations its nodes of level ``<= L-1-i``; sources its
nodes of level ``<= L-i`` (the rows the previous layer left it), then the other members' nodes
its destinations read, grouped by member and in the order it asked for them (one request round
at build time). :func:`~dglx_dist.runtime.autograd.halo_exchange` fetches those rows before the
layer runs. Layers whose level cut-offs are the same (clipped at the deepest level present)
share one block.
"""
from __future__ import annotations

import dataclasses

import torch

from dglx_dist.errors import InternalError
from dglx_dist.runtime.comm import Comm
from dglx_dist.graphcore.block import Block
from dglx_dist.graphcore.ids import TypeIds
from dglx_dist.strategies.granndis.eas import capped, gather_with_members

__all__ = ["GroupNodes", "LayerPlan", "CoBatchPlan", "levels", "batch_edges", "build_cobatch",
           "outputs_only", "SOURCE_DEGREE"]

SOURCE_DEGREE = "_dglx_source_out_degree"
"""``edata`` key, on a co-batch's block, of each edge's source's out-degree by the edge's type
in the whole graph: a relation's one-type block (DGL's or the package's) has its own, whatever
it knows of its type's name."""


@dataclasses.dataclass(frozen=True)
class GroupNodes:
    """Every node a group holds (sorted global ids) and the member index holding each."""

    ids: torch.Tensor
    holder: torch.Tensor

    @classmethod
    def gather(cls, group: Comm, mine: torch.Tensor) -> "GroupNodes":
        """Collective over ``group``: each member passes the ids it holds (disjoint)."""
        ids, holder = gather_with_members(group, mine)
        order = torch.argsort(ids)
        return cls(ids[order], holder[order])

    def contains(self, ids: torch.Tensor) -> torch.Tensor:
        if self.ids.numel() == 0:
            return torch.zeros(ids.shape, dtype=torch.bool)
        pos = torch.searchsorted(self.ids, ids).clamp(max=self.ids.numel() - 1)
        return self.ids[pos] == ids

    def holder_of(self, ids: torch.Tensor) -> torch.Tensor:
        """Member holding each id (every id must be in the group)."""
        return self.holder[torch.searchsorted(self.ids, ids)]


@dataclasses.dataclass(eq=False)
class LayerPlan:
    """One layer on one rank: its block and the exchange, per node type, that completes its
    input rows (a graph without types has one, DGL's ``_N``).

    Attributes:
        block: per node type, the rank's own rows of that type in row order (its destinations
            first), then the rows of that type other ranks send, in member order; each edge
            carries its source's out-degree by the edge's type in the whole graph
            (:data:`SOURCE_DEGREE`).
        send_idx: per node type, per member, the rows of this rank's input of that type it
            sends there.
        recv_rows: per node type, per member, the rows of that type it sends here.
        order: for a block whose sources are the exchange's rows reordered
            (:func:`outputs_only`), per node type the exchange's row of each source; None:
            in that order.
    """

    block: Block
    send_idx: list[list[torch.Tensor]]
    recv_rows: list[list[int]]
    order: list[torch.Tensor] | None = None

    def own_rows(self, ntype: int = 0) -> int:
        """The sources of node type ``ntype`` that are this rank's own rows."""
        return self.block.num_src[ntype] - sum(self.recv_rows[ntype])

    def to(self, device: torch.device) -> "LayerPlan":
        order = None if self.order is None else [o.to(device) for o in self.order]
        return LayerPlan(self.block.to(device),
                         [[i.to(device) for i in per] for per in self.send_idx],
                         self.recv_rows, order)


@dataclasses.dataclass(eq=False)
class CoBatchPlan:
    """One rank's share of a cooperative batch.

    Attributes:
        nodes: its nodes in the batch (partitioned ids), by (level, id): the rows of layer 0.
        num_targets: the first rows that are targets (level 0): the model's output rows.
        layers: one plan per layer, input first (shared where the blocks are the same).
        inputs: per node type, the partitioned ids of ``nodes`` of that type, in order (the
            model's input rows of that type).
        targets: per node type, the partitioned ids of its targets of that type, in order.
    """

    nodes: torch.Tensor
    num_targets: int
    layers: list[LayerPlan]
    inputs: dict[str, torch.Tensor]
    targets: dict[str, torch.Tensor]

    def to(self, device: torch.device) -> "CoBatchPlan":
        """This plan with its layers' blocks and exchange indices on ``device`` (a GPU
        job's), layers that share a plan still sharing one; its node ids stay here."""
        if device.type == "cpu":
            return self
        moved = {lp: lp.to(device) for lp in dict.fromkeys(self.layers)}  # by identity
        return dataclasses.replace(self, layers=[moved[lp] for lp in self.layers])

    def num_rows(self) -> int:
        """Rows over all distinct blocks (sources), a measure of the batch's size."""
        return sum(p.block.num_src_nodes() for p in dict.fromkeys(self.layers))


def levels(own: torch.Tensor, edges: tuple[torch.Tensor, torch.Tensor], targets: torch.Tensor,
           num_layers: int, nodes: GroupNodes, group: Comm, fanout: int = -1,
           gen: torch.Generator | None = None) -> torch.Tensor:
    """Distance of each of this rank's nodes to the batch's targets along in-edges (collective
    over ``group``; ``num_layers + 1`` where farther than ``num_layers``).

    Args:
        own: this rank's nodes (sorted global ids).
        edges: ``(src, dst)``: in-edges of ``own`` whose sources are in the group (a third
            tensor, the edges' types, is carried along where the caller has one).
        targets: a mask over ``own``.
        fanout / gen: with ``fanout`` >= 0, each step follows at most ``fanout`` in-edges of a
            node from sources that are not targets, sampled with ``gen`` (EAS around a batch).
    """
    src, dst = edges[:2]
    level = torch.full((own.numel(),), num_layers + 1, dtype=torch.int64)
    level[targets] = 0
    dst_pos = torch.searchsorted(own, dst)
    is_target = GroupNodes.gather(group, own[targets]) if fanout >= 0 else None
    for t in range(1, num_layers + 1):
        frontier = level[dst_pos] == t - 1
        s, d = src[frontier], dst[frontier]
        if is_target is not None:
            outside = ~is_target.contains(s)
            s, _ = capped(s[outside], d[outside], fanout, gen)
        reached = torch.unique(s)
        holder = nodes.holder_of(reached)
        got = torch.cat(group.all_to_all_v([reached[holder == m] for m in range(group.size)]))
        pos = torch.searchsorted(own, got)
        level[pos] = torch.clamp(level[pos], max=t)
    return level


def batch_edges(own: torch.Tensor, edges: tuple[torch.Tensor, torch.Tensor],
                targets: torch.Tensor, nodes: GroupNodes, group: Comm, max_hop: int,
                fanout: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """The edges of one cooperative batch (collective over ``group``): its targets plus the
    nodes expansion-aware sampling reaches from them (``max_hop`` steps, ``fanout`` non-target
    in-neighbours per node and step), and every edge among those nodes (types kept where
    ``edges`` has them)."""
    reach = levels(own, edges, targets, max_hop, nodes, group, fanout, gen)
    inside = GroupNodes.gather(group, own[reach <= max_hop])
    keep = inside.contains(edges[0]) & inside.contains(edges[1])
    return tuple(t[keep] for t in edges)


@dataclasses.dataclass(frozen=True)
class _Rows:
    """This rank's nodes of one batch in row order, and its edges in rows (-1: not its own).

    Attributes:
        own: the rank's nodes (sorted ids); ``row[i]``: the row of ``own[i]`` (-1: outside).
        ordered: the batch's nodes in row order.
        src: global source ids of the edges; ``src_row`` / ``dst_row``: their rows;
            ``etype``: their types.
        ids / degree: the graph's node types (:class:`TypeIds`) and every node's out-degree
            in the whole graph per edge type (a row each).
    """

    own: torch.Tensor
    row: torch.Tensor
    ordered: torch.Tensor
    src: torch.Tensor
    src_row: torch.Tensor
    dst_row: torch.Tensor
    etype: torch.Tensor
    ids: TypeIds
    degree: torch.Tensor

    def rows_of(self, ids: torch.Tensor) -> torch.Tensor:
        return self.row[torch.searchsorted(self.own, ids)]


def build_cobatch(own: torch.Tensor, level: torch.Tensor, edges: tuple[torch.Tensor, ...],
                  num_layers: int, nodes: GroupNodes, group: Comm, ids: TypeIds,
                  degree: torch.Tensor) -> CoBatchPlan:
    """This rank's blocks and exchanges for the batch whose levels are ``level`` (collective
    over ``group``: one request round per distinct block).

    Args:
        own / level / edges: as for :func:`levels` (``level`` its result); ``edges`` may have
            a third tensor, each edge's type (none: the one type).
        ids: the graph's node types; ``degree``: every node's out-degree in the whole graph,
            per edge type (a row each, indexed by global id).
    """
    L = num_layers
    inside = torch.nonzero(level <= L).squeeze(1)  # increasing id, as ``own``
    order = inside[torch.argsort(level[inside], stable=True)]
    row = torch.full((own.numel(),), -1, dtype=torch.int64)
    row[order] = torch.arange(order.numel())
    counts = [int((level <= j).sum()) for j in range(L + 1)]
    deepest = int(group.all_reduce(torch.tensor([int(level[inside].max()) if inside.numel()
                                                 else 0]), op="max"))
    src, dst, *etype = edges
    mine = nodes.holder_of(src) == group.group_rank
    src_row = torch.full_like(src, -1)
    src_row[mine] = row[torch.searchsorted(own, src[mine])]
    rows = _Rows(own, row, own[order], src, src_row, row[torch.searchsorted(own, dst)],
                 etype[0] if etype else torch.zeros_like(src), ids, degree)
    plans: dict[tuple[int, int], LayerPlan] = {}
    layers = []
    for i in range(L):
        key = (min(L - 1 - i, deepest), min(L - i, deepest))
        if key not in plans:
            plans[key] = _layer(rows, counts[key[0]], counts[key[1]], nodes, group)
        layers.append(plans[key])
    ntype = ids.of_gids(rows.ordered)[0]
    inputs, targets = ({t: ids_[ntype[:len(ids_)] == i] for i, t in enumerate(ids.ntypes)}
                       for ids_ in (rows.ordered, rows.ordered[:counts[0]]))
    return CoBatchPlan(rows.ordered, counts[0], layers, inputs, targets)


def _layer(rows: _Rows, num_dst: int, num_in: int, nodes: GroupNodes,
           group: Comm) -> LayerPlan:
    """The block whose destinations are the first ``num_dst`` rows and whose own sources are
    the first ``num_in``; the other sources are asked for from their holders."""
    sel = (rows.dst_row >= 0) & (rows.dst_row < num_dst)
    es, ed, esr = rows.src[sel], rows.dst_row[sel], rows.src_row[sel]
    local = esr >= 0
    if bool((esr[local] >= num_in).any()):
        raise InternalError("a layer reads an own row the previous layer did not produce")
    remote, inverse = torch.unique(es[~local], return_inverse=True)
    holder = nodes.holder_of(remote)
    by_holder = torch.argsort(holder, stable=True)
    remote, holder = remote[by_holder], holder[by_holder]
    where = torch.empty_like(by_holder)
    where[by_holder] = torch.arange(by_holder.numel())
    block_src = esr.clone()
    block_src[~local] = num_in + where[inverse]
    src_ids = torch.cat([rows.ordered[:num_in], remote])  # the destinations first
    asks = [remote[holder == m] for m in range(group.size)]
    send_idx = [rows.rows_of(ids) for ids in group.all_to_all_v(asks)]
    if any(bool((idx < 0).any() or (idx >= num_in).any()) for idx in send_idx):
        raise InternalError("a peer asked for a row this rank does not hold at that layer")
    return _by_type(rows, src_ids, num_dst, (block_src, ed, rows.etype[sel]), send_idx,
                    [a.numel() for a in asks])


def _by_type(rows: _Rows, src_ids: torch.Tensor, num_dst: int, edges, send_idx,
             recv_rows: list[int]) -> LayerPlan:
    """The layer whose sources are ``src_ids`` (rows, the destinations first, then the
    received ones) and edges ``edges`` (row indices, types) numbered per node type: a type's
    sources are its own rows in row order, then its received rows; the exchange split by
    type (one type: as it is)."""
    ids, num_src = rows.ids, src_ids.numel()
    num_in, n = num_src - sum(recv_rows), len(rows.ids.ntypes)
    ntype, per_type = ids.of_gids(src_ids)
    order = torch.argsort(ntype, stable=True)  # own rows before received ones, per type
    counts = torch.bincount(ntype, minlength=n)
    pos = torch.empty_like(order)
    pos[order] = torch.arange(num_src) - (torch.cumsum(counts, 0) - counts)[ntype[order]]
    u, v, etype = edges
    by_type = torch.argsort(etype, stable=True)  # the edges in their types' order
    u, v, etype = u[by_type], v[by_type], etype[by_type]
    num_dst_of = torch.bincount(ntype[:num_dst], minlength=n).tolist()
    block = Block(per_type[order], ntype[order], tuple(num_dst_of), pos[u], pos[v], None, etype,
                  tuple(ids.ntypes), ids.etypes, all_etypes=True)
    source_degree = rows.degree[etype, src_ids[u]].float()  # (edges in type order)
    for e, et in enumerate(ids.etypes):
        block.edges[et].data[SOURCE_DEGREE] = source_degree[etype == e]
    member = torch.repeat_interleave(torch.arange(len(recv_rows)),
                                     torch.tensor(recv_rows, dtype=torch.int64))
    remote_type = ntype[num_in:]
    return LayerPlan(block, [[pos[idx[ntype[idx] == i]] for idx in send_idx] for i in range(n)],
                     [[int(((member == m) & (remote_type == i)).sum())
                       for m in range(len(recv_rows))] for i in range(n)])


def outputs_only(lp: LayerPlan, rows: torch.Tensor, ntype: int = 0) -> LayerPlan:
    """``lp`` computing only its destinations ``rows`` of node type ``ntype`` (sorted,
    distinct; none of the other types), as DGL's sampled last block holds only its batch's
    seeds: the block keeps their in-edges and lists those rows first among the type's
    sources (a conv takes its destinations' own rows as the first sources), then the other
    sources in their order; the exchange stays ``lp``'s."""
    block, device = lp.block, rows.device
    order = [torch.arange(n, device=device) for n in block.num_src]
    others = torch.ones(block.num_src[ntype], dtype=torch.bool, device=device)
    others[rows] = False
    order[ntype] = torch.cat([rows, torch.nonzero(others).squeeze(1)])
    flat = torch.cat([torch.empty_like(o).index_copy_(0, o, torch.arange(o.numel(), device=device))
                      for o in order])  # each old source's new position within its type
    starts = torch.tensor([0, *block.num_src], device=device).cumsum(0)[:-1]
    ends = [[block.ntype_index(e[end]) for e in block.canonical_etypes] for end in (0, 2)]
    src_t, dst_t = (torch.tensor(e, device=device)[block.etype] for e in ends)
    dst_row = torch.full((block.num_dst[ntype],), -1, dtype=torch.int64, device=device)
    dst_row[rows] = torch.arange(rows.numel(), device=device)
    kept = (dst_t == ntype) & (dst_row[torch.where(dst_t == ntype, block.dst, 0)] >= 0)
    nodes = [block.nodes_of(t)[o] for t, o in enumerate(order)]
    out = Block(torch.cat(nodes), torch.cat([torch.full_like(x, t) for t, x in enumerate(nodes)]),
                tuple(rows.numel() if t == ntype else 0 for t in range(len(order))),
                flat[starts[src_t[kept]] + block.src[kept]], dst_row[block.dst[kept]], None,
                block.etype[kept], block.ntypes, block.canonical_etypes, all_etypes=True)
    for e in range(len(block.canonical_etypes)):
        keep = kept.index_select(0, block.edges_of(e))
        out.frame("edge", e).update({k: v[keep] for k, v in block.frame("edge", e).items()})
    return LayerPlan(out, lp.send_idx, lp.recv_rows, order)
