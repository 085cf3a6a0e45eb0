"""Drawing a graph's in-edges as :class:`~dglx_dist.sampling.options.SampleOptions` say, by
DGL's own samplers (``sample_neighbors``; ``sample_labors`` for LABOR)."""
from __future__ import annotations

import dgl
import dgl.backend as F
import torch

from dglx_dist.errors import InvalidValueError
from dglx_dist.sampling.options import EdgeWeights, SampleOptions

__all__ = ["Draws", "PROB"]

PROB = "_dglx_prob"
"""The graph's edge data a weighted draw reads (set to the named weights per draw)."""


class Draws:
    """In-edges drawn from one graph as :class:`SampleOptions` say, by DGL.

    Args:
        graph: the graph (a part's local graph, or a whole one).
        weights: its edge data by name (for ``prob``; None: none).
        shared_ids: each of its nodes' id that every member uses for the same node (the
            user's ids): LABOR rolls one variate per such id, so members drawing for their
            own seeds draw as one process would (None: the graph's ids are those ids).
    """

    def __init__(self, graph: dgl.DGLGraph, weights: EdgeWeights | None = None,
                 shared_ids: torch.Tensor | None = None):
        self.graph, self.weights, self._shared = graph, weights, shared_ids
        self._twin: dgl.DGLGraph | None = None

    def __call__(self, nodes: torch.Tensor, fanout: int, options: SampleOptions,
                 exclude: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The drawn in-edges of ``nodes`` (but ``exclude``): ``(u, v)`` and their ids in
        the graph."""
        prob = self._prob(options.prob)
        if options.labor is None:
            frontier = dgl.sampling.sample_neighbors(
                self.graph, nodes, fanout, edge_dir="in", prob=prob, replace=options.replace,
                exclude_edges=exclude, copy_ndata=False)  # edata: where EID is set
            u, v = frontier.edges()
            return u, v, frontier.edata[dgl.EID]
        twin = self._labor_graph()
        seeds = nodes if self._shared is None else self._shared.index_select(0, nodes)
        if prob is not None:
            twin.edata[PROB] = self.graph.edata[PROB]
        frontier, _ = dgl.sampling.sample_labors(
            twin, seeds, fanout, prob=prob, random_seed=F.zerocopy_to_dgl_ndarray(
                torch.tensor(options.labor)), seed2_contribution=options.seed2,
            exclude_edges=exclude, copy_ndata=False)
        eid = frontier.edata[dgl.EID]  # the twin's edges are the graph's, in its order
        u, v = self.graph.find_edges(eid)
        return u, v, eid

    def _prob(self, name: str | None) -> str | None:
        if name is None:
            return None
        if self.weights is None:
            raise InvalidValueError(f"weighted sampling (prob={name!r}) needs the sampler's "
                                    "edge data (edge_weights=...)")
        self.graph.edata[PROB] = self.weights(name).reshape(-1)
        return PROB

    def _labor_graph(self) -> dgl.DGLGraph:
        """The graph over the shared ids (built on first use; the graph itself without)."""
        if self._shared is None:
            return self.graph
        if self._twin is None:
            u, v = self.graph.edges()
            self._twin = dgl.graph((self._shared.index_select(0, u),
                                    self._shared.index_select(0, v)),
                                   num_nodes=int(self._shared.max()) + 1)
        return self._twin
