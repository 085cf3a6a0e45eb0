"""The graph conv of ``granndis`` and ``fullgraph``: its input completed, per node type, with the
boundary rows other ranks hold, before the user's conv runs (see
:mod:`dglx_dist.strategies.granndis`). A graph without types is the one-type case; only the
model's presentation differs, as DGL's: a conv on a graph without types takes a tensor, one on
a typed graph (a ``HeteroGraphConv``, ``dglx_dist.nn``'s or ``dgl.nn``'s; docs/heterographs.md,
"Under granndis and fullgraph") a dict by node type."""
from __future__ import annotations

import math

import torch
from torch import nn

from dglx_dist.convs import ConvWrapper, adapter_for
from dglx_dist.errors import InvalidValueError, NotSupportedError
from dglx_dist.graphcore.block import UNTYPED, Block
from dglx_dist.runtime.autograd import halo_exchange_many, tie
from dglx_dist.runtime.comm import Comm
from dglx_dist.strategies.granndis.cobatch import SOURCE_DEGREE, LayerPlan

__all__ = ["HaloConv", "RelationDegrees", "complete_rows"]


def _source_degrees(conv: nn.Module):
    """``conv``'s adapter when it normalises by its sources' out-degrees, else None."""
    try:
        adapter = adapter_for(conv)
    except (InvalidValueError, ValueError):
        return None
    one = Block.untyped(*(torch.zeros(1, dtype=torch.int64),) * 4)
    scale = adapter.degree_source_scale(conv, one, torch.ones(1, dtype=torch.float64))
    return None if scale is None else adapter


def _source_scale(adapter, conv: nn.Module, graph) -> torch.Tensor:
    """The factor per source row of one-relation ``graph`` (whose edges carry their sources'
    out-degrees in the whole graph, :data:`SOURCE_DEGREE`) that makes ``conv`` normalise by
    those degrees; a source without edges here: any degree (1)."""
    src_of = graph.edges()[0].long()
    degree = torch.ones(graph.num_src_nodes(), dtype=torch.float64, device=src_of.device)
    degree[src_of] = graph.edata[SOURCE_DEGREE].to(degree)
    return adapter.degree_source_scale(conv, graph, degree)


class RelationDegrees(ConvWrapper):
    """A relation's conv (inside a ``HeteroGraphConv``) that normalises by its sources'
    out-degrees: given a co-batch's relation block, its source rows are rescaled by the
    adapter's factor, so the conv normalises by the whole graph's degrees."""

    def __init__(self, conv: nn.Module, adapter):
        super().__init__()
        self.conv, self._adapter = conv, adapter

    def forward(self, graph, inputs, *args, **kwargs):
        if SOURCE_DEGREE not in graph.edata or not isinstance(inputs, tuple):
            return self.conv(graph, inputs, *args, **kwargs)
        src, dst = inputs
        scale = _source_scale(self._adapter, self.conv, graph)
        return self.conv(graph, (src * scale.to(src.dtype), dst), *args, **kwargs)


class HaloConv(ConvWrapper):
    """A graph conv whose input is first completed, per node type, with the rows other ranks
    hold (one exchange for all types, autograd through it).

    Args:
        conv: the user's graph conv (kept as ``self.conv``); on a typed graph a
            HeteroGraphConv (:meth:`of` checks).
        plan_of: the :class:`~dglx_dist.strategies.granndis.cobatch.LayerPlan` of a block
            (None: a block of the caller's own).
        comm: the ranks exchanging rows.
        ntypes / etypes: the graph's node and (canonical) edge types, in order.
        name: the conv's name in the model, for messages.
    """

    def __init__(self, conv: nn.Module, plan_of, comm: Comm, ntypes=UNTYPED[0],
                 etypes=UNTYPED[1], name: str = "the graph conv"):
        super().__init__()
        self._tensor = (tuple(ntypes), tuple(tuple(e) for e in etypes)) == UNTYPED  # DGL's rule
        if hasattr(conv, "mod_dict"):  # a HeteroGraphConv: the relations' convs, by their keys
            conv.mod_dict = dict(conv.mod_dict)
            for key, mod in list(conv.mod_dict.items()):
                if (adapter := _source_degrees(mod)) is not None:  # one wrapper, both keys
                    conv.mod_dict[key] = conv.mods[str(key)] = RelationDegrees(mod, adapter)
        self.conv, self._plan_of, self._comm = conv, plan_of, comm
        self._ntypes, self._name = list(ntypes), name
        self._adapter = _source_degrees(conv) if self._tensor else None
        self._widths: torch.Tensor | None = None  # each type's row width, once agreed
        self._scales: dict[LayerPlan, torch.Tensor | None] = {}  # plans hash by identity

    @classmethod
    def of(cls, conv: nn.Module, plan_of, comm: Comm, ntypes, etypes, name: str) -> "HaloConv":
        """The wrapper of graph conv ``conv`` (``name``: how messages call it); on a graph
        with types it must be a HeteroGraphConv (a class of that name, or under it:
        ``dglx_dist.nn``'s or ``dgl.nn``'s): the co-batches' blocks are heterogeneous."""
        if (tuple(ntypes), tuple(tuple(e) for e in etypes)) != UNTYPED and \
                not any(c.__name__ == "HeteroGraphConv" for c in type(conv).__mro__):
            raise NotSupportedError(f"{name} is a {type(conv).__name__}; on a graph with node "
                                    "types every graph conv must be a HeteroGraphConv "
                                    "(dglx_dist.nn's or dgl.nn's, of convs per relation)")
        return cls(conv, plan_of, comm, ntypes, etypes, name)

    def forward(self, block, h, *args, **kwargs):
        plan: LayerPlan | None = self._plan_of(block)
        if plan is None:  # a block of the caller's own (e.g. layer-wise inference): its
            return self.conv(block, h, *args, **kwargs)  # input rows are all given
        src = h[0] if isinstance(h, tuple) else h
        if isinstance(src, dict) == self._tensor:
            want = "a tensor" if self._tensor else "a dict {node type: rows}"
            raise InvalidValueError(f"{self._name}: input of type {type(src).__name__}; a "
                                    f"graph conv on this graph takes {want}")
        full = self._complete(plan, {self._ntypes[0]: src} if self._tensor else src)
        given = self._scaled(plan, full[self._ntypes[0]]) if self._tensor else full
        out = self.conv(block, (given, h[1]) if isinstance(h, tuple) else given, *args, **kwargs)
        if isinstance(out, dict):
            return {t: tie(v, *full.values()) for t, v in out.items()}
        return tie(out, *full.values())

    def _scaled(self, plan: LayerPlan, x: torch.Tensor) -> torch.Tensor:
        """``x`` rescaled for a conv that normalises by source degrees (else as it is)."""
        if self._adapter is None:
            return x
        if plan not in self._scales:
            self._scales[plan] = _source_scale(self._adapter, self.conv, plan.block)
        return x * self._scales[plan]

    def _complete(self, plan: LayerPlan, src: dict) -> dict:
        """Every node type's rows with the rows other ranks send appended (collective). A
        type the input leaves out (a model drops the types a layer gives no rows, as DGL's
        R-GCN does) while this rank holds none of its rows here but receives some starts
        from no rows of the width the ranks agreed on at the first call."""
        if not src:
            raise InvalidValueError(f"{self._name}: the input has no rows of any node type; "
                                    f"pass a dict {{node type: rows}} over {self._ntypes}")
        if self._widths is None and not self._tensor:  # the same first call on every rank
            widths = torch.tensor([math.prod(src[t].shape[1:]) if t in src else -1
                                   for t in self._ntypes])
            self._widths = self._comm.all_reduce(widths, op="max")
        like = next(iter(src.values()))
        hs = {}
        for i, t in enumerate(self._ntypes):
            own = plan.own_rows(i)
            sends, recvs = any(n.numel() for n in plan.send_idx[i]), any(plan.recv_rows[i])
            if t in src:
                hs[i] = src[t]
            elif recvs and not own and int(self._widths[i]) >= 0:
                hs[i] = like.new_zeros((0, int(self._widths[i])))
            elif sends or recvs:
                raise InvalidValueError(f"{self._name}: the input has no rows of node type "
                                        f"{t!r}, which this layer's block reads ({own} of them "
                                        f"here); pass rows for every node type of the block "
                                        f"({self._ntypes})")
        return {self._ntypes[i]: f for i, f in complete_rows(self._comm, plan, hs).items()}


def complete_rows(comm: Comm, plan: LayerPlan,
                  hs: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
    """Every source row of ``plan``'s block of each node type (by index) of ``hs``, in the
    block's order: ``hs[i]`` (this rank's own rows of type ``i``, or every source's row
    already, as the loader's ``blocks[0].srcdata`` prefetch gives them) completed with the
    rows its peers hold, in one exchange. Every rank exchanges either way (the group's
    exchange is collective); rows given whole are sent without a gradient and the received
    ones dropped."""
    keys, order, sent, given = list(hs), plan.order, [], {}
    for i in keys:
        t, own = hs[i], plan.own_rows(i)
        given[i] = t.shape[0] == plan.block.num_src[i] and own != t.shape[0]
        if given[i]:
            mine = t if order is None else t.index_select(0, torch.argsort(order[i]))
            t = mine[:own].detach()
        sent.append(t)
    full = halo_exchange_many(comm, sent, [plan.send_idx[i] for i in keys],
                              [plan.recv_rows[i] for i in keys]) if keys else ()
    return {i: hs[i] if given[i] else f if order is None else f.index_select(0, order[i])
            for i, f in zip(keys, full)}
