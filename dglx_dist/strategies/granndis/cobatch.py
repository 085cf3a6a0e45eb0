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
from dglx_dist.graphcore.frames import NID
from dglx_dist.strategies.granndis.eas import capped, gather_with_members

__all__ = ["GroupNodes", "LayerPlan", "CoBatchPlan", "levels", "batch_edges", "build_cobatch",
           "outputs_only", "ETYPE"]

ETYPE = "_dglx_etype"
"""``block.edata`` key of each edge's type index, on a typed graph's co-batch blocks."""


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
    """One layer on one rank: its block and the exchange that completes its input rows.

    Attributes:
        block: destinations then sources as described in the module docstring.
        send_idx: per member, the rows of this rank's input it sends there.
        recv_rows: per member, the rows it sends here (appended in member order).
        out_degree: every source node's out-degree in the whole graph (float), in the
            block's source order.
        order: for a block whose sources are the exchange's rows reordered
            (:func:`outputs_only`), the exchange's row of each source; None: in that order.
    """

    block: Block
    send_idx: list[torch.Tensor]
    recv_rows: list[int]
    out_degree: torch.Tensor
    order: torch.Tensor | None = None

    def own_rows(self) -> int:
        """The sources that are this rank's own rows (the others are received)."""
        return self.block.num_src_nodes() - sum(self.recv_rows)

    def to(self, device: torch.device) -> "LayerPlan":
        order = None if self.order is None else self.order.to(device)
        return LayerPlan(self.block.to(device), [idx.to(device) for idx in self.send_idx],
                         self.recv_rows, self.out_degree.to(device), order)


@dataclasses.dataclass(eq=False)
class CoBatchPlan:
    """One rank's share of a cooperative batch (on a typed graph, a
    :class:`~dglx_dist.strategies.granndis.heteroconv.TypedCoBatch`).

    Attributes:
        nodes: its nodes in the batch, by (level, id): the input rows of layer 0.
        num_targets: the first rows that are targets (level 0): the model's output rows.
        layers: one plan per layer, input first (shared where the blocks are the same).
    """

    nodes: torch.Tensor
    num_targets: int
    layers: list[LayerPlan]

    def to(self, device: torch.device) -> "CoBatchPlan":
        """This plan with its layers' blocks, exchange indices and degrees on ``device`` (a
        GPU job's), layers that share a plan still sharing one; its node ids stay here."""
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
        src: global source ids of the edges; ``src_row`` / ``dst_row``: their rows.
    """

    own: torch.Tensor
    row: torch.Tensor
    ordered: torch.Tensor
    src: torch.Tensor
    src_row: torch.Tensor
    dst_row: torch.Tensor
    etype: torch.Tensor | None = None

    def rows_of(self, ids: torch.Tensor) -> torch.Tensor:
        return self.row[torch.searchsorted(self.own, ids)]


def build_cobatch(own: torch.Tensor, level: torch.Tensor,
                  edges: tuple[torch.Tensor, torch.Tensor], num_layers: int,
                  nodes: GroupNodes, group: Comm, out_degree: torch.Tensor) -> CoBatchPlan:
    """This rank's blocks and exchanges for the batch whose levels are ``level`` (collective
    over ``group``: one request round per distinct block).

    Args:
        own / level / edges: as for :func:`levels` (``level`` its result); on a typed graph
            ``edges`` has a third tensor, each edge's type, kept as ``block.edata[ETYPE]``.
        out_degree: every node's out-degree in the whole graph, indexed by global id.
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
                 etype[0] if etype else None)
    plans: dict[tuple[int, int], LayerPlan] = {}
    layers = []
    for i in range(L):
        key = (min(L - 1 - i, deepest), min(L - i, deepest))
        if key not in plans:
            plans[key] = _layer(rows, counts[key[0]], counts[key[1]], nodes, group, out_degree)
        layers.append(plans[key])
    return CoBatchPlan(rows.ordered, counts[0], layers)


def _layer(rows: _Rows, num_dst: int, num_in: int, nodes: GroupNodes, group: Comm,
           out_degree: torch.Tensor) -> LayerPlan:
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
    block = _block(src_ids, num_dst, block_src, ed)
    if rows.etype is not None:
        block.edata[ETYPE] = rows.etype[sel]
    asks = [remote[holder == m] for m in range(group.size)]
    send_idx = [rows.rows_of(ids) for ids in group.all_to_all_v(asks)]
    if any(bool((idx < 0).any() or (idx >= num_in).any()) for idx in send_idx):
        raise InternalError("a peer asked for a row this rank does not hold at that layer")
    return LayerPlan(block, send_idx, [a.numel() for a in asks],
                     out_degree.index_select(0, src_ids))


def outputs_only(lp: LayerPlan, rows: torch.Tensor) -> LayerPlan:
    """``lp`` computing only its destinations ``rows`` (sorted, distinct), as DGL's sampled
    last block holds only its batch's seeds: the block keeps their in-edges and lists those
    rows first among its sources (a conv takes its destinations' own rows as the first
    sources), then the other sources in their order; the exchange stays ``lp``'s."""
    block = lp.block
    n_src = block.num_src_nodes()
    others = torch.ones(n_src, dtype=torch.bool, device=rows.device)
    others[rows] = False
    order = torch.cat([rows, torch.nonzero(others).squeeze(1)])
    position = torch.empty_like(order)
    position[order] = torch.arange(n_src, device=order.device)
    dst_row = torch.full((block.num_dst_nodes(),), -1, dtype=torch.int64, device=rows.device)
    dst_row[rows] = torch.arange(rows.numel(), device=rows.device)
    src, dst, eid = block.edges(form="all")
    kept = dst_row[dst] >= 0
    # (the destinations kept, ``rows``, are the first sources, as ``order`` puts them)
    out = _block(block.srcdata[NID][order], rows.numel(), position[src[kept]],
                 dst_row[dst[kept]])
    for key, value in block.edata.items():
        out.edata[key] = value[eid[kept]]
    return LayerPlan(out, lp.send_idx, lp.recv_rows, lp.out_degree.index_select(0, order),
                     order)


def _block(src_ids: torch.Tensor, num_dst: int, src: torch.Tensor, dst: torch.Tensor) -> Block:
    """A block over the sources ``src_ids`` (the first ``num_dst`` are its destinations)
    with edges ``src -> dst`` (indices), without edge ids (the co-batch builds them)."""
    zeros = torch.zeros_like
    return Block(src_ids, zeros(src_ids), (num_dst,), src, dst, None, zeros(src))
