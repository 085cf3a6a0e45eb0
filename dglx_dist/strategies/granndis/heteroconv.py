"""``granndis`` and ``fullgraph`` on a graph with node and edge types: the co-batches' blocks as
heterogeneous blocks, and the row exchange of a ``HeteroGraphConv`` (``dglx_dist.nn``'s or
``dgl.nn``'s; what a script sees: docs/heterographs.md, "Under granndis and fullgraph").

Inside, everything stays homogeneous (each edge carrying its type: ``block.edata[ETYPE]``); at
the model, :func:`typed_cobatch` makes each layer's block heterogeneous: type ``t``'s sources
are the rank's own rows of type ``t`` in row order (own rows are ordered by level, so a type's
destinations are a prefix of them), then the rows of type ``t`` other ranks send, in the
homogeneous block's order, so one exchange per layer (:func:`halo_exchange_many`) fills
every type; each edge carries its source's out-degree by its type in the whole graph
(:data:`SOURCE_DEGREE`) for the relation convs that normalise by it (:class:`RelationDegrees`). :class:`HeteroHaloConv` completes a
``HeteroGraphConv``'s input dict with every type's boundary rows; :func:`target_types` are the
co-batches' targets, :class:`TypedRows` the featured types' rows pulled once.
"""
from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn

from dglx_dist.convs import ConvWrapper, adapter_for
from dglx_dist.errors import InvalidValueError, NotSupportedError
from dglx_dist.kvstore import typed_key
from dglx_dist.runtime.autograd import halo_exchange_many, tie
from dglx_dist.runtime.comm import Comm
from dglx_dist.graphcore.block import Block
from dglx_dist.graphcore.frames import NID
from dglx_dist.graphcore.ids import TypeIds
from dglx_dist.strategies.base import check_typed_store
from dglx_dist.strategies.granndis.cobatch import ETYPE, CoBatchPlan, LayerPlan
from dglx_dist.strategies.steps import Step

__all__ = ["TypedLayer", "TypedCoBatch", "typed_cobatch", "HeteroHaloConv", "typed_rows",
           "typed_step", "TypedRows", "edge_types", "out_degrees", "SOURCE_DEGREE", "typed_ids",
           "held_names", "RelationDegrees", "target_types"]


def typed_ids(pdir, store, who: str) -> TypeIds | None:
    """The id maps of a typed partition directory (None: a graph without types); a typed
    graph's rows live in the graph's KVStore, so ``store`` must be given."""
    check_typed_store(pdir, store, who)
    return None if pdir.types is None else TypeIds.of(pdir)


def held_names(types) -> frozenset[str]:
    """The store's names of the featured types' rows (what :class:`TypedRows` serves)."""
    return frozenset(typed_key(t, "feat") for t in types.ntypes if types.feat_dims[t])


SOURCE_DEGREE = "_dglx_source_out_degree"
"""``edata`` key, on a co-batch's heterogeneous block, of each edge's source's out-degree by
the edge's type in the whole graph: a relation's one-type block (DGL's or the package's) has
its own, whatever it knows of its type's name."""


def edge_types(types, eid) -> torch.Tensor:
    """The edge type index of each of a part's edges (original homogeneous ids ``eid``)."""
    offsets = torch.tensor([int(o) for o in types.etype_offsets])
    return torch.searchsorted(offsets, torch.from_numpy(eid).long(), right=True) - 1


def out_degrees(world: Comm, src: torch.Tensor, etype: torch.Tensor | None,
                pdir) -> torch.Tensor:
    """Every node's out-degree in the whole graph, per edge type (a row each; one row on a
    graph without types), from each rank's in-edges of its nodes ``src`` (collective)."""
    rows = 1 if etype is None else len(pdir.types.canonical_etypes)
    key = src if etype is None else etype * pdir.num_nodes + src
    deg = torch.bincount(key, minlength=rows * pdir.num_nodes).to(torch.int32)
    return world.all_reduce(deg).view(rows, pdir.num_nodes).double()


@dataclasses.dataclass(eq=False)
class TypedLayer:
    """One layer of a co-batch on a typed graph.

    Attributes:
        block: the heterogeneous block (see the module docstring).
        send_idx: per node type (in order), per member, the rows of this rank's input of that
            type it sends there.
        recv_rows: per node type, per member, the rows of that type it sends here.
    """

    block: Block
    send_idx: list[list[torch.Tensor]]
    recv_rows: list[list[int]]

    def to(self, device: torch.device) -> "TypedLayer":
        return TypedLayer(self.block.to(device),
                          [[i.to(device) for i in per] for per in self.send_idx], self.recv_rows)


@dataclasses.dataclass(eq=False)
class TypedCoBatch(CoBatchPlan):
    """One rank's share of a co-batch on a typed graph: the homogeneous plan's ``nodes`` and
    ``num_targets`` (partitioned ids in row order), its ``layers`` as :class:`TypedLayer` s
    (shared where the homogeneous plan shares one), and

    Attributes:
        inputs: per node type, the partitioned ids of the rank's own input rows of that type,
            in order (the model's input rows).
        targets: per node type, the partitioned ids of its target rows (the last layer's
            destinations of that type), in order.
    """

    inputs: dict[str, torch.Tensor]
    targets: dict[str, torch.Tensor]


def typed_cobatch(plan: CoBatchPlan, ids: TypeIds, etypes,
                  degree: torch.Tensor) -> TypedCoBatch:
    """``plan`` with heterogeneous blocks and exchanges split by node type; ``degree``: every
    node's out-degree per edge type (:func:`out_degrees`), kept on the blocks' edges
    (:data:`SOURCE_DEGREE`) for the relation convs that normalise by it."""
    ntype_of, _ = ids.of_gids(plan.nodes)
    inputs = {t: plan.nodes[ntype_of == i] for i, t in enumerate(ids.ntypes)}
    head = ntype_of[:plan.num_targets]
    targets = {t: plan.nodes[:plan.num_targets][head == i] for i, t in enumerate(ids.ntypes)}
    converted = {lp: _typed_layer(lp, ids, etypes, degree) for lp in dict.fromkeys(plan.layers)}
    return TypedCoBatch(plan.nodes, plan.num_targets, [converted[lp] for lp in plan.layers],
                        inputs, targets)


def _typed_layer(lp: LayerPlan, ids: TypeIds, etypes, degree: torch.Tensor) -> TypedLayer:
    block = lp.block
    src_ids = block.srcdata[NID]
    num_src, num_dst = block.num_src_nodes(), block.num_dst_nodes()
    num_in = num_src - sum(lp.recv_rows)
    ntype, per_type = ids.of_gids(src_ids)
    order = torch.argsort(ntype, stable=True)  # own rows before received ones, per type
    pos = torch.empty_like(order)
    counts = torch.bincount(ntype, minlength=len(ids.ntypes))
    starts = torch.cumsum(counts, 0) - counts
    pos[order] = torch.arange(num_src) - starts[ntype[order]]
    u, v = block.edges()
    by_type = torch.argsort(block.edata[ETYPE], stable=True)  # the edges in their types' order
    num_dst_of = torch.bincount(ntype[:num_dst], minlength=len(ids.ntypes)).tolist()
    etype = block.edata[ETYPE][by_type]
    hetero = Block(per_type[order], ntype[order], tuple(num_dst_of), pos[u[by_type]],
                   pos[v[by_type]], None, etype, tuple(ids.ntypes),
                   tuple(tuple(e) for e in etypes), all_etypes=True)
    source_degree = degree[etype, src_ids[u[by_type]]].float()  # (edges in type order)
    for e, et in enumerate(etypes):
        hetero.edges[tuple(et)].data[SOURCE_DEGREE] = source_degree[etype == e]
    member = torch.repeat_interleave(torch.arange(len(lp.recv_rows)),
                                     torch.tensor(lp.recv_rows, dtype=torch.int64))
    remote_type = ntype[num_in:]
    send_idx = [[pos[idx[ntype[idx] == i]] for idx in lp.send_idx]
                for i in range(len(ids.ntypes))]
    recv_rows = [[int(((member == m) & (remote_type == i)).sum())
                  for m in range(len(lp.recv_rows))] for i in range(len(ids.ntypes))]
    return TypedLayer(hetero, send_idx, recv_rows)


def _source_degrees(conv: nn.Module):
    """``conv``'s adapter when it normalises by its sources' out-degrees, else None."""
    try:
        adapter = adapter_for(conv)
    except InvalidValueError:
        return None
    one = Block.untyped(*(torch.zeros(1, dtype=torch.int64),) * 4)
    scale = adapter.degree_source_scale(conv, one, torch.ones(1, dtype=torch.float64))
    return None if scale is None else adapter


class RelationDegrees(ConvWrapper):
    """A relation's conv that normalises by its sources' out-degrees: given a co-batch's
    relation block (whose edges carry their sources' out-degrees by that edge type in the
    whole graph, :data:`SOURCE_DEGREE`), its source rows are rescaled by the adapter's
    factor, so the conv normalises by the whole graph's degrees, as on a graph without
    types."""

    def __init__(self, conv: nn.Module, adapter):
        super().__init__()
        self.conv, self._adapter = conv, adapter

    def forward(self, graph, inputs, *args, **kwargs):
        if SOURCE_DEGREE not in graph.edata or not isinstance(inputs, tuple):
            return self.conv(graph, inputs, *args, **kwargs)
        src_of = graph.edges()[0].long()  # a source without edges here: any degree (1)
        degree = torch.ones(graph.num_src_nodes(), dtype=torch.float64, device=src_of.device)
        degree[src_of] = graph.edata[SOURCE_DEGREE].to(degree)
        scale = self._adapter.degree_source_scale(self.conv, graph, degree)
        src, dst = inputs
        return self.conv(graph, (src * scale.to(src.dtype), dst), *args, **kwargs)


class HeteroHaloConv(ConvWrapper):
    """A ``HeteroGraphConv`` (``dglx_dist.nn``'s or ``dgl.nn``'s) whose input dict is first
    completed, per node type, with the rows other ranks hold (one exchange for all types,
    autograd through it).

    Args:
        conv: the user's HeteroGraphConv (kept as ``self.conv``).
        plan_of: the :class:`TypedLayer` of a block (None: a block of the caller's own).
        comm: the ranks exchanging rows.
        ntypes: the graph's node types, in order.
        name: the conv's name in the model, for messages.
    """

    def __init__(self, conv: nn.Module, plan_of, comm: Comm, ntypes, name: str):
        super().__init__()
        conv.mod_dict = dict(conv.mod_dict)  # the relations' convs, by the keys given
        for key, mod in list(conv.mod_dict.items()):
            adapter = _source_degrees(mod)
            if adapter is not None:  # the same wrapper under both of DGL's keys
                conv.mod_dict[key] = conv.mods[str(key)] = RelationDegrees(mod, adapter)
        self.conv, self._plan_of, self._comm = conv, plan_of, comm
        self._ntypes, self._name = list(ntypes), name
        self._widths: torch.Tensor | None = None  # each type's row width, once agreed

    @classmethod
    def of(cls, conv: nn.Module, plan_of, comm: Comm, ntypes, name: str) -> "HeteroHaloConv":
        """The wrapper of graph conv ``conv`` (``name``: how messages call it), which must be
        a HeteroGraphConv (a class of that name, or under it: ``dglx_dist.nn``'s or
        ``dgl.nn``'s): a typed graph's co-batches have heterogeneous blocks."""
        if not any(c.__name__ == "HeteroGraphConv" for c in type(conv).__mro__):
            raise NotSupportedError(f"{name} is a {type(conv).__name__}; on a graph with node "
                                    "types every graph conv must be a HeteroGraphConv "
                                    "(dglx_dist.nn's or dgl.nn's, of convs per relation)")
        return cls(conv, plan_of, comm, ntypes, name)

    def forward(self, block, h, *args, **kwargs):
        plan: TypedLayer | None = self._plan_of(block)
        if plan is None:
            return self.conv(block, h, *args, **kwargs)
        src = h[0] if isinstance(h, tuple) else h
        if not isinstance(src, dict):
            raise InvalidValueError(f"{self._name}: input of type {type(src).__name__}; a "
                                    "HeteroGraphConv on a graph with types takes a dict "
                                    "{node type: rows}")
        full = self._complete(plan, src)
        out = self.conv(block, (full, h[1]) if isinstance(h, tuple) else full, *args, **kwargs)
        return {t: tie(v, *full.values()) for t, v in out.items()}

    def _complete(self, plan: TypedLayer, src: dict) -> dict:
        """Every node type's rows with the rows other ranks send appended (collective). A
        type the input leaves out (a model drops the types a layer gives no rows, as DGL's
        R-GCN does) while this rank holds none of its rows here but receives some starts
        from no rows of the width the ranks agreed on at the first call."""
        if not src:
            raise InvalidValueError(f"{self._name}: the input has no rows of any node type; "
                                    f"pass a dict {{node type: rows}} over {self._ntypes}")
        if self._widths is None:  # the same first call on every rank
            widths = torch.tensor([math.prod(src[t].shape[1:]) if t in src else -1
                                   for t in self._ntypes])
            self._widths = self._comm.all_reduce(widths, op="max")
        like = next(iter(src.values()))
        hs, kept = [], []
        for i, t in enumerate(self._ntypes):
            own = plan.block.num_src_nodes(t) - sum(plan.recv_rows[i])
            sends, recvs = any(n.numel() for n in plan.send_idx[i]), any(plan.recv_rows[i])
            if t in src:
                hs.append(src[t])
            elif recvs and not own and int(self._widths[i]) >= 0:
                hs.append(like.new_zeros((0, int(self._widths[i]))))
            elif sends or recvs:
                raise InvalidValueError(f"{self._name}: the input has no rows of node type "
                                        f"{t!r}, which this layer's block reads ({own} of them "
                                        f"here); pass rows for every node type of the block "
                                        f"({self._ntypes})")
            else:
                continue
            kept.append((i, t))
        send = [plan.send_idx[i] for i, _ in kept]
        recv = [plan.recv_rows[i] for i, _ in kept]
        full = halo_exchange_many(self._comm, hs, send, recv)
        return {t: f for (_, t), f in zip(kept, full)}


class TypedRows:
    """The feature rows of a rank's nodes on a typed graph, pulled once through the graph's
    KVStore (collective) and served as ``g.nodes[t].data["feat"]`` reads by type rows.

    Args:
        store / pdir: the graph's KVStore and the typed partition directory.
        gids: the rank's nodes (partitioned ids).
        device: where the rows live.
    """

    def __init__(self, store, pdir, gids: torch.Tensor, device: torch.device):
        types = pdir.types
        tix, rows = (torch.from_numpy(a) for a in pdir.type_row_of(gids.numpy()))
        self.held: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for i, t in enumerate(types.ntypes):
            if types.feat_dims.get(t, 0):
                name, mine = typed_key(t, "feat"), rows[tix == i].sort().values
                self.held[name] = (mine, store.pull(name, mine, dedup=False).to(device))

    def get(self, name: str, rows: torch.Tensor) -> torch.Tensor | None:
        """Rows ``rows`` of store name ``name``, or None when some are not held here."""
        if name not in self.held:
            return None
        mine, feat = self.held[name]
        if mine.numel() == 0:
            return None if rows.numel() else feat[:0]
        at = torch.searchsorted(mine, rows).clamp(max=mine.numel() - 1)
        if not bool((mine[at] == rows).all()):
            return None
        return feat.index_select(0, at.to(feat.device))


def target_types(ids: TypeIds, labeled, own: torch.Tensor) -> torch.Tensor:
    """Which of the partitioned ids ``own`` may be co-batch targets: the nodes of the labeled
    types (every node when no type is), so that the last layer computes what a loss reads,
    and the layers before it what that needs, as DGL's blocks from labeled seeds do."""
    if not labeled:
        return torch.ones(own.numel(), dtype=torch.bool)
    ntype, _ = ids.of_gids(own)
    return torch.isin(ntype, torch.tensor([ids.ntypes.index(t) for t in labeled]))


def typed_rows(ids: TypeIds | None, gids: torch.Tensor, types, name: str) -> str | None:
    """The one node type of a loader's partitioned ids (its outputs are that type's rows),
    one of the types the co-batches target (:func:`target_types`); None without types."""
    if ids is None:
        return None
    labeled = types.labeled
    ntype, _ = ids.of_gids(gids)
    present = [ids.ntypes[i] for i in torch.unique(ntype).tolist()]
    if len(present) > 1:
        raise NotSupportedError(f"{name}: a DataLoader over node types {present}; the model "
                                "outputs the rows of one node type: build one loader per type")
    if labeled and present and present[0] not in labeled:
        raise NotSupportedError(f"{name}: a DataLoader over node type {present[0]!r}; the "
                                f"co-batches' outputs are the labeled types' {list(labeled)}")
    return present[0] if present else (list(labeled) or ids.ntypes)[-1]


def typed_step(cob: TypedCoBatch, ids: TypeIds, ntype: str, blocks) -> Step:
    """A co-batch's step on a typed graph: input and output nodes as dicts of per-type ids
    (DGL's shape on heterographs), the inputs this rank's own rows of each type, the outputs
    the step's rows of node type ``ntype``."""
    def per_type(gids: torch.Tensor) -> torch.Tensor:
        return ids.of_gids(gids)[1]

    inputs = {t: per_type(g) for t, g in cob.inputs.items()}
    outputs = {t: per_type(g[:0]) for t, g in cob.targets.items()}
    outputs[ntype] = per_type(cob.targets[ntype].index_select(0, blocks.state.rows))
    return Step(inputs, outputs, blocks)
