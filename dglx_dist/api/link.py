"""Link prediction's batches: DGL's ``as_edge_prediction_sampler`` over a DistGraph (one
without edge types; :mod:`dglx_dist.api.typed_link` has the typed one's).

``DataLoader(g, train_eids, as_edge_prediction_sampler(NeighborSampler(...),
negative_sampler=Uniform(k), exclude="reverse_id", reverse_eids=...), batch_size=...)``
yields ``(input_nodes, pair_graph, neg_pair_graph, blocks)`` as DGL's does. A batch of edge
ids becomes, here (:class:`EdgePairs`):

1. the edges' endpoints (``g.find_edges``, pulled from the edges' owners);
2. the negative pairs, from the user's negative sampler called on the DistGraph itself
   (DGL's ``Uniform`` draws destinations from all nodes of all parts; ``GlobalUniform`` asks
   the owners which drawn pairs are edges);
3. both pair graphs over one compacted node set (``pair_graph.ndata[dgl.NID]``, the node
   ids; ``pair_graph.edata[dgl.EID]``, the edge ids), whose nodes are the seeds of the
   blocks: output row i of the model is pair-graph node i;
4. the edges to leave out of the blocks (``exclude``: None, ``"self"``, ``"reverse_id"``
   with ``reverse_eids``, or a callable on the batch's edge ids), excluded by the members
   that store them, in every layer.
"""
from __future__ import annotations

from typing import Callable

import dgl
import torch

from dglx_dist.api.graph import DistGraph
from dglx_dist.api.ndata import as_node_ids
from dglx_dist.errors import InvalidValueError, NotSupportedError
from dglx_dist.strategies.steps import EdgeBatch

__all__ = ["EdgePairs", "is_edge_sampler"]

_EXCLUDE = (None, "self", "reverse_id")


def is_edge_sampler(sampler) -> bool:
    """Whether ``sampler`` is DGL's ``as_edge_prediction_sampler(...)``."""
    from dgl.dataloading import EdgePredictionSampler

    return isinstance(sampler, EdgePredictionSampler)


class EdgePairs:
    """Builds a batch's pair graphs and exclusions from its edge ids (see the module
    docstring); collective when the negative sampler is (``GlobalUniform``)."""

    def __init__(self, graph: DistGraph, sampler):
        self.graph, self.negative_sampler = graph, sampler.negative_sampler
        self._exclude = self._exclusion(graph, sampler.exclude, sampler.reverse_eids,
                                        sampler.reverse_etypes)

    @property
    def excludes(self) -> bool:
        """Whether the batches exclude edges from their blocks."""
        return self._exclude is not None

    @staticmethod
    def _exclusion(graph: DistGraph, exclude, reverse_eids, reverse_etypes
                   ) -> Callable[[torch.Tensor], torch.Tensor] | None:
        if callable(exclude):
            return lambda eids: as_node_ids(exclude(eids), graph.num_edges(),
                                            "the exclude callable's result", kind="edge")
        if exclude not in _EXCLUDE:
            raise NotSupportedError(f"as_edge_prediction_sampler: exclude={exclude!r}; expected "
                                    f"None, 'self', 'reverse_id' or a callable ('reverse_types' "
                                    f"needs a graph with edge types; this one has none)")
        if exclude == "self":
            return lambda eids: eids
        if exclude == "reverse_id":
            if reverse_eids is None or isinstance(reverse_eids, dict):
                raise InvalidValueError("as_edge_prediction_sampler: exclude='reverse_id' needs "
                                        "reverse_eids, a tensor giving each edge id its reverse "
                                        "edge's id")
            reverse = torch.as_tensor(reverse_eids)
            if reverse.shape != (graph.num_edges(),):
                raise InvalidValueError(f"as_edge_prediction_sampler: reverse_eids has shape "
                                        f"{tuple(reverse.shape)}; expected one reverse edge id "
                                        f"per edge ({graph.num_edges()},)")
            reverse = as_node_ids(reverse, graph.num_edges(), "reverse_eids", kind="edge")
            return lambda eids: torch.cat([eids, reverse[eids]])
        if reverse_etypes is not None:
            raise NotSupportedError("as_edge_prediction_sampler: reverse_etypes needs a graph "
                                    "with edge types; this one has none")
        return None

    def __call__(self, eids: torch.Tensor) -> EdgeBatch:
        g = self.graph
        src, dst = g.find_edges(eids)
        ends = [src, dst]
        if self.negative_sampler is not None:
            neg = self.negative_sampler(g, eids)
            ends += [as_node_ids(t, g.num_nodes(), f"the negative sampler's {what}")
                     for t, what in zip(neg, ("sources", "destinations"))]
        sizes = [t.numel() for t in ends]
        nodes, local = torch.unique(g.part_ids(torch.cat(ends)), return_inverse=True)
        pieces = torch.split(local, sizes)
        node_ids = g.node_ids(nodes)
        pair = dgl.graph((pieces[0], pieces[1]), num_nodes=nodes.numel())
        pair.ndata[dgl.NID], pair.edata[dgl.EID] = node_ids, eids
        neg_pair = None
        if self.negative_sampler is not None:
            neg_pair = dgl.graph((pieces[2], pieces[3]), num_nodes=nodes.numel())
            neg_pair.ndata[dgl.NID] = node_ids
        exclude = None
        if self._exclude is not None:
            exclude = g.edata.part_ids(self._exclude(eids))
        return EdgeBatch(nodes, pair, neg_pair, exclude)
