"""The samplers a :class:`~dglx_dist.api.DataLoader` takes and what it reads off them.

:class:`NeighborSampler` and :class:`MultiLayerFullNeighborSampler` are DGL's by name,
signature and attributes, and need no DGL: the loader reads their fanouts and how each layer
draws (``prob``, ``mask``, ``replace``) and the strategy draws the blocks itself. DGL's own
samplers of those names are read the same way where DGL is installed; another DGL sampler
(``BlockSampler``, ``LaborSampler``, ``ShaDowKHopSampler``) or a neighbour sampler of
out-edges runs over the distributed graph through DGL (:func:`user_sampler`,
:mod:`dglx_dist.dgl.samplers`). Each is checked against the graph and the strategy
before any step."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import torch

from dglx_dist.api.structure import fanout_of
from dglx_dist.data.convert import DGL_EXTRA as _NEEDS_DGL
from dglx_dist.data.convert import dgl_installed, is_dgl
from dglx_dist.errors import (InvalidTypeError, InvalidValueError, NotSupportedError,
                              UnknownNameError)
from dglx_dist.kvstore.base import edge_key
from dglx_dist.graphcore.frames import NID
from dglx_dist.sampling.options import UNIFORM, SampleOptions, check_weights

if TYPE_CHECKING:
    from dglx_dist.dgl.samplers import UserSampler
    from dglx_dist.api.graph import DistGraph

__all__ = ["NeighborSampler", "MultiLayerFullNeighborSampler", "sampler_fanouts",
           "sampler_options", "user_sampler", "prefetched_names", "edge_rows"]

class NeighborSampler:
    """Neighbour sampling by layer, as ``dgl.dataloading.NeighborSampler``: the same
    constructor and attributes, without DGL. The :class:`~dglx_dist.api.DataLoader` reads
    it; the strategy draws the blocks.

    Args:
        fanouts: per layer, input layer first, the neighbours to draw per node (-1: all);
            on a graph with types, one number for every edge type or a dict of edge type ->
            number.
        edge_dir: "in" (draw in-edges) or "out" (out-edges, reversed into the blocks: drawn
            through DGL, which must be installed).
        prob: the name of the edge data that weighs each draw.
        mask: the name of the boolean edge data that masks each draw (``prob`` or ``mask``).
        replace: draw with replacement.
        prefetch_node_feats: node data put on the first block's sources (names, or a dict
            by type on a graph with types).
        prefetch_labels: node data put on the last block's destinations.
        prefetch_edge_feats: edge data put on every block's edges.
        output_device: DGL's; kept, not used (the strategy places the blocks).
        fused: DGL's; kept, not used.
    """

    def __init__(self, fanouts, edge_dir: str = "in", prob: str | None = None,
                 mask: str | None = None, replace: bool = False, prefetch_node_feats=None,
                 prefetch_labels=None, prefetch_edge_feats=None, output_device=None,
                 fused: bool = True):
        if prob is not None and mask is not None:
            raise InvalidValueError(f"NeighborSampler: prob={prob!r} and mask={mask!r}; "
                                    "expected one of the two (a mask is a weight of 0 or 1)")
        if edge_dir not in ("in", "out"):
            raise InvalidValueError(f"NeighborSampler: edge_dir={edge_dir!r}; expected 'in' "
                                    "or 'out'")
        self.fanouts, self.edge_dir = fanouts, edge_dir
        self.prob = prob if prob is not None else mask
        self.replace, self.fused, self.output_device = replace, fused, output_device
        self.prefetch_node_feats = prefetch_node_feats or []
        self.prefetch_labels = prefetch_labels or []
        self.prefetch_edge_feats = prefetch_edge_feats or []

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self.fanouts)}, edge_dir={self.edge_dir!r})"

    def to_dgl(self):
        """DGL's ``NeighborSampler`` of the same arguments (DGL installed), to draw on a
        DGL graph (made by DGL's door, :func:`dglx_dist.dgl.samplers.dgl_neighbor_sampler`)."""
        if not dgl_installed():
            raise NotSupportedError(f"{self!r}.to_dgl(): DGL is not installed; {_NEEDS_DGL}")
        from dglx_dist.dgl.samplers import dgl_neighbor_sampler  # noqa: PLC0415 - DGL's door

        return dgl_neighbor_sampler(self)

    def sample(self, g, seed_nodes, exclude_eids=None):
        """DGL's ``sample`` on a DGL graph ``g`` (through :meth:`to_dgl`); the
        :class:`~dglx_dist.api.DataLoader` does not call it."""
        return self.to_dgl().sample(g, seed_nodes, exclude_eids)


class MultiLayerFullNeighborSampler(NeighborSampler):
    """Every neighbour in each of ``num_layers`` layers (DGL's class of this name:
    :class:`NeighborSampler` with fanouts of -1; its other arguments by keyword)."""

    def __init__(self, num_layers: int, **kwargs):
        super().__init__([-1] * num_layers, **kwargs)


def _neighbor_sampler(sampler):
    if not _is_neighbor_sampler(sampler):
        raise InvalidTypeError(f"DataLoader: sampler {type(sampler).__name__} is not supported; "
                               "use dglx_dist.NeighborSampler(fanouts), "
                               "MultiLayerFullNeighborSampler(num_layers) or, with DGL, its "
                               "LaborSampler, ShaDowKHopSampler or a "
                               "dgl.dataloading.BlockSampler subclass of your own")
    return sampler


def _is_neighbor_sampler(sampler) -> bool:
    """The package's neighbour sampler or DGL's."""
    return isinstance(sampler, NeighborSampler) or is_dgl(sampler, "dataloading.NeighborSampler")


def user_sampler(graph: DistGraph, sampler) -> UserSampler | None:
    """``sampler`` to run over the distributed graph when it is a sampler other than a
    neighbour sampler of in-edges (whose fanouts the strategy draws itself; None then): a
    DGL ``BlockSampler`` (the user's own, ``LaborSampler``), a neighbour sampler of
    out-edges (every out-edge gathered; through DGL) or a DGL sampler of subgraphs
    (``ShaDowKHopSampler``)."""
    neighbors = _is_neighbor_sampler(sampler)
    if neighbors and getattr(sampler, "edge_dir", "in") == "in" or \
            not neighbors and not is_dgl(sampler, "dataloading.Sampler"):
        return None
    what = f"DataLoader: sampler {type(sampler).__name__}"
    if neighbors:
        what += f"(edge_dir={sampler.edge_dir!r})"
    if not dgl_installed():  # only the package's own sampler gets here without DGL
        raise NotSupportedError(f"{what} draws through DGL, which is not installed: "
                                f"{_NEEDS_DGL} (in-edges draw without it)")
    name = graph.strategy.registered_name
    if not graph.strategy.capabilities.draws_blocks:
        raise NotSupportedError(f"{what} under strategy {name!r}, which does not sample its "
                                "blocks; a sampler of your own runs under distdgl and p3")
    blocks = neighbors or is_dgl(sampler, "dataloading.BlockSampler")
    if not blocks and not graph.strategy.capabilities.draws_subgraphs:
        raise NotSupportedError(f"{what} (its steps are subgraphs, not blocks) under strategy "
                                f"{name!r}, whose model's first layer runs on blocks; samplers "
                                "of subgraphs run under distdgl")
    graph.refuse_types(f"{what} on a graph with edge types: samplers of your own run on "
                       "graphs without types only (not yet)")
    from dglx_dist.dgl.samplers import OutNeighborSampler, UserSampler  # noqa: PLC0415

    if neighbors:  # of out-edges
        if sampler.prob is not None:
            _check_prob(graph, sampler.prob, what)
        sampler = OutNeighborSampler(sampler)
    return UserSampler(sampler, graph)


def sampler_fanouts(sampler, types=None) -> tuple:
    """The fanouts (input layer first) of a ``NeighborSampler`` or
    ``MultiLayerFullNeighborSampler`` (the package's or DGL's); with the ``types`` of a typed
    partitioning, per layer one fanout per edge type (:func:`_typed_fanouts`).

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
    """How ``sampler`` (a ``NeighborSampler``, the package's or DGL's) draws each layer,
    checked: its ``prob`` or ``mask`` names this graph's edge data, whose rows on this rank
    are finite weights >= 0 (or booleans); the strategy draws with them (in-edges:
    :func:`user_sampler` takes samplers of out-edges)."""
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
    types, offsets = graph.types, graph.pdir.edge_offsets
    has = torch.tensor([types.has_edge_data(e, name) for e in range(len(graph.etypes))])
    for part, values in graph.store.local_parts(edge_key(name)).items():
        if not has.all():  # the rows of the edge types that have it
            hom = graph.edata.ids(torch.arange(int(offsets[part]), int(offsets[part + 1])))
            etype = torch.searchsorted(torch.as_tensor(types.etype_offsets), hom,
                                       right=True) - 1
            values = values[has[etype]]
        check_weights(values, what)


def prefetched_names(graph: DistGraph, sampler, labels: bool = True) -> None:
    """Refuses data ``sampler`` prefetches that is not this graph's: node data
    (``prefetch_node_feats``, and ``labels``: ``prefetch_labels``) that no node type has (a
    type without it is skipped), and edge data on every block (``prefetch_edge_feats``:
    names, for every edge type that has them, or a dict of edge type -> names)."""
    node_names = [*(getattr(sampler, "prefetch_node_feats", None) or []),
                  *((getattr(sampler, "prefetch_labels", None) or []) if labels else [])]
    for name in node_names:
        if not any(name in graph.nodes[t].data for t in graph.ntypes):
            raise UnknownNameError(f"the sampler's prefetch names {name!r}, which no node "
                                   f"type of the graph has (node types: {graph.ntypes})")
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
        eids = [b.edges[etype].data[NID] for b in blocks]
        for name in (n for n in wanted if n in data.keys()):
            rows = data[name][torch.cat(eids).cpu()]  # (a device sampler's blocks: there)
            for block, part in zip(blocks, torch.split(rows, [e.numel() for e in eids])):
                block.edges[etype].data[name] = part.to(block.device)


