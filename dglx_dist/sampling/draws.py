"""Drawing a graph's in-edges as :class:`~dglx_dist.sampling.options.SampleOptions` say, in
torch: :func:`~dglx_dist.sampling.in_edges.draw_in_edges`, or LABOR's
:func:`~dglx_dist.sampling.labor.draw_labor`."""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from dglx_dist.errors import InvalidValueError, NotSupportedError
from dglx_dist.sampling.in_edges import InEdges, draw_in_edges
from dglx_dist.sampling.labor import draw_labor
from dglx_dist.sampling.options import EdgeWeights, SampleOptions

__all__ = ["Draws"]


class Draws:
    """In-edges drawn from one graph's structure as :class:`SampleOptions` say.

    Args:
        edges: the graph's in-edges (by edge type where it has types).
        weights: its edge data by name, one row per edge id (for ``prob``; None: none).
        shared_ids: each of its nodes' id that every member uses for the same node (the
            user's ids): LABOR rolls one variate per such id, so members drawing for their
            own seeds draw as one process would (None: the graph's ids are those ids).
        has_edge_data: with edge types, whether type ``e`` has edge data ``name``
            (``has_edge_data(e, name)``): a type without the ``prob`` it names draws
            uniformly, as in DGL (None: every type has it).
    """

    def __init__(self, edges: InEdges, weights: EdgeWeights | None = None,
                 shared_ids: torch.Tensor | None = None,
                 has_edge_data: Callable[[int, str], bool] | None = None):
        self.edges, self._weights, self._shared = edges, weights, shared_ids
        self._has = has_edge_data

    def to(self, edges: InEdges) -> "Draws":
        """These draws from ``edges``: the same structure on another device, the shared ids
        moved there too (the weights are read where they are kept and copied to the draws'
        device at each draw)."""
        device = edges.indptr.device
        return Draws(edges, self._weights, None if self._shared is None else
                     self._shared.to(device), self._has)

    def __call__(self, nodes: torch.Tensor, fanouts: int | Sequence[int],
                 options: SampleOptions, exclude: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """The drawn in-edges of ``nodes`` (unique; but the edge ids ``exclude``): each one's
        index in ``nodes`` and its position in :attr:`edges`, grouped by node in order."""
        if options.labor is not None:  # one fanout: a graph of one edge type
            if self.edges.num_etypes > 1:
                raise NotSupportedError("LABOR's draws on a graph with edge types are not "
                                        "supported")
            # each source's variate rolled by its shared id
            return draw_labor(self.edges, nodes, int(torch.as_tensor(fanouts).reshape(-1)[0]),
                              options.labor, options.seed2, self.weights(options.prob),
                              exclude, self._shared)
        weights = self.weights(options.prob)
        generator = None if options.seed is None else \
            torch.Generator(self.edges.indptr.device).manual_seed(options.seed)
        return draw_in_edges(self.edges, nodes, fanouts, options.replace, weights, exclude,
                             generator)

    def weights(self, name: str | None) -> torch.Tensor | None:
        """Edge data ``name``, one row per edge id (1 on the edge types without it); None
        when no type has it, or for ``None``."""
        if name is None:
            return None
        if self._weights is None:
            raise InvalidValueError(f"weighted sampling (prob={name!r}) needs the sampler's "
                                    "edge data (edge_weights=...)")
        device = self.edges.indptr.device
        if self._has is None or self.edges.num_etypes == 1:
            return self._weights(name).reshape(-1).to(device)
        has = torch.tensor([bool(self._has(e, name)) for e in range(self.edges.num_etypes)],
                           device=device)
        if not bool(has.any()):
            return None
        values = self._weights(name).reshape(-1).to(device)
        return torch.where(has.index_select(0, self.edges.etype_of_edge), values,
                           torch.ones_like(values))
