"""What a :class:`~dglx_dist.api.DataLoader` reads off DGL's samplers: the fanouts of
``NeighborSampler`` / ``MultiLayerFullNeighborSampler`` and how each layer draws (``prob``,
``mask``, ``replace``), or another DGL sampler (``BlockSampler``, ``ShaDowKHopSampler``)
to run over the distributed graph (:class:`UserSampler`; the graph's methods it calls are
:mod:`dglx_dist.api.structure`'s), checked against the graph and the strategy before any
step."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Sequence

import dgl
import torch
from dgl.dataloading import BlockSampler

from dglx_dist.api.structure import fanout_of
from dglx_dist.errors import (InvalidTypeError, InvalidValueError, NotSupportedError,
                              UnknownNameError)
from dglx_dist.kvstore.base import edge_key
from dglx_dist.sampling.options import UNIFORM, SampleOptions, check_weights

if TYPE_CHECKING:
    from dglx_dist.api.graph import DistGraph

__all__ = ["sampler_fanouts", "sampler_options", "user_sampler", "UserSampler",
           "OutNeighborSampler", "prefetched_edge_feats", "edge_rows"]


def _neighbor_sampler(sampler):
    from dgl.dataloading import NeighborSampler

    if not isinstance(sampler, NeighborSampler):
        raise InvalidTypeError(f"DataLoader: sampler {type(sampler).__name__} is not supported; "
                               "use dgl.dataloading.NeighborSampler(fanouts), "
                               "MultiLayerFullNeighborSampler(num_layers), LaborSampler, "
                               "ShaDowKHopSampler or a dgl.dataloading.BlockSampler "
                               "subclass of your own")
    return sampler


def user_sampler(graph: DistGraph, sampler) -> UserSampler | None:
    """``sampler`` to run over the distributed graph when it is a DGL sampler other than
    ``NeighborSampler`` of in-edges (whose fanouts the strategy draws itself; None then): a
    ``BlockSampler`` (the user's own, ``LaborSampler``, ``NeighborSampler`` of out-edges,
    whose every out-edge is gathered) or a sampler of subgraphs (``ShaDowKHopSampler``)."""
    from dgl.dataloading import NeighborSampler, Sampler

    if not isinstance(sampler, Sampler) or isinstance(sampler, NeighborSampler) and \
            getattr(sampler, "edge_dir", "in") == "in":
        return None
    what = f"DataLoader: sampler {type(sampler).__name__}"
    if isinstance(sampler, NeighborSampler):
        what += f"(edge_dir={sampler.edge_dir!r})"
    name = graph.strategy.registered_name
    if not graph.strategy.capabilities.draws_blocks:
        raise NotSupportedError(f"{what} under strategy {name!r}, which does not sample its "
                                "blocks; a sampler of your own runs under distdgl and p3")
    if not isinstance(sampler, BlockSampler) and not graph.strategy.capabilities.draws_subgraphs:
        raise NotSupportedError(f"{what} (its steps are subgraphs, not blocks) under strategy "
                                f"{name!r}, whose model's first layer runs on blocks; samplers "
                                "of subgraphs run under distdgl")
    if graph.is_typed:
        raise NotSupportedError(f"{what} on a graph with edge types: samplers of your own run "
                                "on graphs without types only (not yet)")
    if isinstance(sampler, NeighborSampler):  # of out-edges
        if sampler.prob is not None:
            _check_prob(graph, sampler.prob, what)
        sampler = OutNeighborSampler(sampler)
    return UserSampler(sampler, graph)


class OutNeighborSampler(BlockSampler):
    """DGL's ``NeighborSampler(fanouts, edge_dir="out")`` as its documentation describes it:
    the drawn out-edges reversed into each block, ``dgl.EID`` kept (docs/porting.md says
    how this differs from DGL 2.x's own ``sample_blocks``)."""

    def __init__(self, sampler):
        super().__init__()
        self.fanouts, self.prob, self.replace = sampler.fanouts, sampler.prob, sampler.replace

    def sample_blocks(self, g, seed_nodes, exclude_eids=None):
        output_nodes, blocks = seed_nodes, []
        for fanout in reversed(self.fanouts):
            frontier = g.sample_neighbors(seed_nodes, fanout, edge_dir="out", prob=self.prob,
                                          replace=self.replace, exclude_edges=exclude_eids)
            block = dgl.to_block(dgl.reverse(frontier), seed_nodes)
            block.edata[dgl.EID] = frontier.edata[dgl.EID]
            seed_nodes = block.srcdata[dgl.NID]
            blocks.insert(0, block)
        return seed_nodes, output_nodes, blocks


def sampler_fanouts(sampler, types=None) -> tuple:
    """The fanouts (input layer first) of DGL's ``NeighborSampler`` or
    ``MultiLayerFullNeighborSampler``; with the ``types`` of a typed partitioning, per
    layer one fanout per edge type (:func:`_typed_fanouts`).

    Raises:
        TypeError: another sampler type.
    """
    sampler = _neighbor_sampler(sampler)
    if types is not None:
        return _typed_fanouts(sampler.fanouts, types)
    if any(isinstance(f, dict) for f in sampler.fanouts):
        raise InvalidTypeError("DataLoader: per-edge-type fanouts need a graph with edge "
                               "types; this one has none")
    return tuple(map(fanout_of, sampler.fanouts))


def _typed_fanouts(fanouts: Sequence, types) -> tuple[tuple[int, ...], ...]:
    """Per layer (input first), the fanout of each edge type in order (-1: all), from DGL's
    per-layer fanouts: one number for every edge type, or a dict naming every edge type (by
    canonical type, or relation name when unique); ``types``: the partitioning's
    :class:`~dglx_dist.partition.types.GraphTypes`."""
    etypes, out = list(types.canonical_etypes), []
    for layer, f in enumerate(fanouts):
        where = f"NeighborSampler fanouts[{layer}]"
        if not isinstance(f, dict):
            out.append((fanout_of(f),) * len(etypes))
            continue
        per = {}
        for key, k in f.items():
            try:
                index = types.etype_index(key)
            except UnknownNameError as exc:
                raise InvalidValueError(f"{where}: {exc}") from None
            per[index] = fanout_of(k)
        missing = [etypes[i] for i in range(len(etypes)) if i not in per]
        if missing:
            raise InvalidValueError(f"{where}: no fanout for edge types {missing}; give every "
                                    "edge type one (0 samples none)")
        out.append(tuple(per[i] for i in range(len(etypes))))
    return tuple(out)


def sampler_options(graph: DistGraph, sampler) -> SampleOptions:
    """How ``sampler`` (DGL's ``NeighborSampler``) draws each layer, checked: its ``prob`` or
    ``mask`` names this graph's edge data, whose rows on this rank are finite weights >= 0
    (or booleans); the strategy draws with them (in-edges: :func:`user_sampler` takes
    samplers of out-edges)."""
    sampler = _neighbor_sampler(sampler)
    options = SampleOptions(getattr(sampler, "prob", None),
                            bool(getattr(sampler, "replace", False)))
    if options == UNIFORM:
        return options
    what = (f"NeighborSampler(prob={options.prob!r})" if options.prob is not None else
            "NeighborSampler(replace=True)")
    if not graph.strategy.capabilities.draws_blocks:
        raise NotSupportedError(f"DataLoader: {what} under strategy "
                                f"{graph.strategy.registered_name!r}, which does not sample "
                                "its blocks; weighted and with-replacement draws run under "
                                "distdgl and p3")
    if options.prob is not None:
        _check_prob(graph, options.prob, f"DataLoader: {what}")
    return options


def _check_prob(graph: DistGraph, name: str, what: str) -> None:
    """Refuses a ``prob`` that is no edge data of the graph (of no edge type, on a graph
    with types), or whose rows on this rank (of the edge types that have it) cannot weigh a
    draw."""
    names = graph.edata.stored()
    if name not in names:
        raise UnknownNameError(f"{what}: {name!r} is not edge data of this graph; it has "
                               f"{sorted(names)}")
    types, offsets = graph.pdir.types, graph.pdir.edge_offsets
    for part, values in graph.store.local_parts(edge_key(name)).items():
        if types is not None:  # the rows of the edge types that have it
            hom = graph.edata.ids(torch.arange(int(offsets[part]), int(offsets[part + 1])))
            etype = torch.searchsorted(torch.as_tensor(types.etype_offsets), hom,
                                       right=True) - 1
            has = torch.tensor([types.has_edge_data(e, name)
                                for e in range(len(types.canonical_etypes))])
            values = values[has[etype]]
        check_weights(values, what)


def prefetched_edge_feats(graph: DistGraph, sampler) -> None:
    """Refuses edge data ``sampler`` (a DGL sampler) prefetches on every block
    (``prefetch_edge_feats``: names, for every edge type that has them, or a dict of edge
    type -> names) that is not this graph's."""
    names = getattr(sampler, "prefetch_edge_feats", None) or []
    for etype, wanted in (names if isinstance(names, dict) else {None: names}).items():
        have = graph.edges[etype].data.keys() if etype is not None else graph.edata.stored()
        missing = [n for n in wanted if n not in have]
        if missing:
            raise UnknownNameError(f"DataLoader: prefetch_edge_feats {missing} are not edge "
                                   f"data of {etype or 'any edge type'}; it has {have}")


def edge_rows(graph: DistGraph, blocks, names) -> None:
    """Sets the blocks' edge rows of ``names`` (DGL's ``prefetch_edge_feats``: a list, for
    every edge type that has the name, or a dict of edge type -> names), read by this rank
    alone: one pull per edge type and name for all of a step's blocks."""
    if not names or not blocks:
        return
    for etype in blocks[0].canonical_etypes:
        wanted = names if not isinstance(names, dict) else \
            names.get(etype, names.get(etype[1], []))
        data = graph.edges[etype].data
        eids = [b.edges[etype].data[dgl.EID] for b in blocks]
        for name in (n for n in wanted if n in data.keys()):
            rows = data[name][torch.cat(eids)]
            for block, part in zip(blocks, torch.split(rows, [e.numel() for e in eids])):
                block.edges[etype].data[name] = part


@dataclasses.dataclass(frozen=True, eq=False)
class UserSampler:
    """A DGL sampler (a ``BlockSampler``, or a sampler of subgraphs such as
    ``ShaDowKHopSampler``) run over the distributed graph drawing through the strategy's
    sampler (:meth:`~dglx_dist.api.structure.EdgeStructure.drawn_by`); its blocks are checked
    to chain, its subgraph to carry its nodes' ids (docs/porting.md, "Your own sampler").

    Attributes:
        sampler: the DGL sampler.
        graph: the distributed graph.
    """

    sampler: object
    graph: "DistGraph"

    @property
    def what(self) -> str:
        return f"DataLoader: sampler {type(self.sampler).__name__}"

    def seed(self, value: int) -> None:
        """Seeds DGL's random numbers, which the sampler draws with."""
        dgl.seed(value)

    def draw(self, base, seeds: torch.Tensor,
             exclude: torch.Tensor | None = None) -> list[dgl.DGLGraph] | dgl.DGLGraph:
        """The blocks (or the subgraph) the sampler draws for partitioned ids ``seeds`` but
        the partitioned edge ids ``exclude`` (its ``exclude_eids``, in the user's ids), their
        ``dgl.NID`` in partitioned ids (collective)."""
        seeds = self.graph.node_ids(seeds)
        skip = None if exclude is None else self.graph.edata.ids(exclude)
        graph = self.graph.drawn_by(base, self.what)
        if isinstance(self.sampler, dgl.dataloading.BlockSampler):
            out, call = self.sampler.sample_blocks(graph, seeds, exclude_eids=skip), \
                "sample_blocks"
        else:
            out, call = self.sampler.sample(graph, seeds, exclude_eids=skip), "sample"
        drawn = out[2] if isinstance(out, tuple) and len(out) == 3 else None
        if isinstance(drawn, dgl.DGLGraph) and not drawn.is_block:
            self._check_subgraph(drawn, out[1], seeds)
            drawn.ndata[dgl.NID] = self.graph.part_ids(drawn.ndata[dgl.NID])
            return drawn
        if not isinstance(drawn, list):
            raise InvalidValueError(f"{self.what}.{call} returned {type(out).__name__}; "
                                    "expected (input_nodes, output_nodes, blocks), as DGL's "
                                    "BlockSampler does, or (input_nodes, output_nodes, "
                                    "subgraph), as its ShaDowKHopSampler does")
        self._check_chain(drawn, seeds)
        for block in drawn:
            for data in (block.srcdata, block.dstdata):
                data[dgl.NID] = self.graph.part_ids(data[dgl.NID])
        return drawn

    def _check_subgraph(self, sub: dgl.DGLGraph, outputs, seeds: torch.Tensor) -> None:
        if dgl.NID not in sub.ndata:
            raise InvalidValueError(f"{self.what}: its subgraph has no ndata[dgl.NID] (make it "
                                    "with g.subgraph(nodes))")
        outputs = torch.as_tensor(outputs)
        if outputs.numel() != seeds.numel() or not bool((outputs == seeds).all()):
            raise InvalidValueError(f"{self.what}: the output nodes of its subgraph are not "
                                    "the seeds it was given")

    def _check_chain(self, blocks: list, seeds: torch.Tensor) -> None:
        want, where = seeds, "the seeds"
        for i in reversed(range(len(blocks))):
            block = blocks[i]
            if not getattr(block, "is_block", False) or dgl.NID not in block.dstdata:
                raise InvalidValueError(f"{self.what}: blocks[{i}] is not a block with "
                                        "dstdata[dgl.NID] (make it with dgl.to_block)")
            dst = block.dstdata[dgl.NID]
            if dst.numel() != want.numel() or not bool((dst == want).all()):
                raise InvalidValueError(f"{self.what}: the blocks do not chain: blocks[{i}]'s "
                                        f"destination nodes are not {where}")
            want, where = block.srcdata[dgl.NID], f"blocks[{i}]'s source nodes"
