"""A graph's in-edges grouped by destination and, within one, by edge type; and drawing up
to a fanout of them per node in torch, as DGL's ``sample_neighbors`` draws them.

A graph without edge types is the one-type case: every destination has one group. A group
``(v, e)`` is segment ``v * num_etypes + e`` of a CSC structure (``indptr`` over segments,
then each in-edge's source and its edge id in the graph the structure was made from).

:func:`draw_in_edges` is vectorised over the nodes asked for (no loop over nodes in Python)
and runs on the device its tensors are on. Per group, with ``k`` its fanout:

* ``k < 0`` takes every in-edge (``replace`` does not apply, as in DGL);
* without replacement, every in-edge when the group has at most ``k``; else ``k`` of them,
  uniformly, or with ``weights`` in successive draws proportional to the weights of the
  edges not yet drawn (what DGL's weighted choice without replacement does; drawn here in
  one pass as the ``k`` smallest of ``Exp(1) / w``, Efraimidis and Spirakis' keys);
* with replacement, exactly ``k`` independent draws (uniform, or proportional to
  ``weights``) from a group with any edge that may be drawn;
* an edge whose weight is 0 (a ``False`` of a boolean mask) or that ``exclude`` names is
  never drawn.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import torch

from dglx_dist.graphcore.block import map_tensors
from dglx_dist.sampling.choose import segment_slots, with_replacement, without_replacement

__all__ = ["InEdges", "draw_in_edges"]


@dataclasses.dataclass(frozen=True)
class InEdges:
    """In-edges in CSC form, grouped by ``(destination, edge type)``.

    Attributes:
        indptr: ``num_nodes * num_etypes + 1`` offsets: group ``v * num_etypes + e``'s
            edges are positions ``indptr[g]:indptr[g + 1]``.
        src: each position's source node.
        eid: each position's edge id in the edge lists the structure was made from.
        num_nodes: nodes of the graph.
        num_etypes: edge types (1: a graph without types).
        etype: each position's edge type (None when ``num_etypes`` is 1).
    """

    indptr: torch.Tensor
    src: torch.Tensor
    eid: torch.Tensor
    num_nodes: int
    num_etypes: int = 1
    etype: torch.Tensor | None = None

    @classmethod
    def of(cls, src: torch.Tensor, dst: torch.Tensor, num_nodes: int,
           etype: torch.Tensor | None = None, num_etypes: int = 1) -> "InEdges":
        """The structure of edges ``src[i] -> dst[i]`` (edge id ``i``; of type ``etype[i]``),
        each group's edges in edge id order."""
        key = dst.long() if etype is None else dst.long() * num_etypes + etype.long()
        key, order = torch.sort(key, stable=True)
        counts = torch.bincount(key, minlength=num_nodes * num_etypes)
        indptr = torch.zeros(counts.numel() + 1, dtype=torch.int64, device=src.device)
        torch.cumsum(counts, 0, out=indptr[1:])
        kinds = None if etype is None else etype.long().index_select(0, order)
        return cls(indptr, src.long().index_select(0, order), order, num_nodes, num_etypes,
                   kinds)

    def positions(self, eids: torch.Tensor) -> torch.Tensor:
        """The positions of edge ids ``eids``."""
        return self._where.index_select(0, eids.long())

    @functools.cached_property
    def _where(self) -> torch.Tensor:
        """Each edge id's position (made on first use: exclusions and LABOR need it)."""
        where = torch.empty_like(self.eid)
        where[self.eid] = torch.arange(self.eid.numel(), device=self.eid.device)
        return where

    @functools.cached_property
    def degree(self) -> torch.Tensor:
        """Each group's number of in-edges (made on first use)."""
        return self.indptr.diff()

    def ends(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(src, dst)`` of every edge, in edge id order."""
        group = torch.repeat_interleave(torch.arange(self.indptr.numel() - 1,
                                                     device=self.indptr.device),
                                        self.indptr.diff())
        dst = torch.div(group, self.num_etypes, rounding_mode="floor")
        return self.src.index_select(0, self._where), dst.index_select(0, self._where)

    @functools.cached_property
    def etype_of_edge(self) -> torch.Tensor:
        """Each edge id's type (made on first use)."""
        return self.etype.index_select(0, self._where)

    def out_edges(self, nodes: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Every edge out of ``nodes``: each one's index in ``nodes``, its destination and
        its edge id, grouped by node in order."""
        row, pos = draw_in_edges(self._by_source, nodes, -1)
        return row, self._by_source.src.index_select(0, pos), \
            self._by_source.eid.index_select(0, pos)

    @functools.cached_property
    def _by_source(self) -> "InEdges":
        src, dst = self.ends()
        return InEdges.of(dst, src, self.num_nodes)

    def has(self, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """Whether each edge ``src[i] -> dst[i]`` is here."""
        keys = self._keys
        key = dst.long() * self.num_nodes + src.long()
        if not keys.numel():
            return torch.zeros(key.numel(), dtype=torch.bool, device=key.device)
        at = torch.searchsorted(keys, key).clamp(max=keys.numel() - 1)
        return keys.index_select(0, at) == key

    @functools.cached_property
    def _keys(self) -> torch.Tensor:
        """Each edge as the key ``dst * num_nodes + src``, sorted."""
        src, dst = self.ends()
        return torch.sort(dst * self.num_nodes + src).values

    def tensors(self) -> list[torch.Tensor]:
        """Its tensors, those made on first use too (where made): at most what :meth:`to`
        copies."""
        return [t for t in vars(self).values() if isinstance(t, torch.Tensor)]

    def to(self, device, non_blocking: bool = False) -> "InEdges":
        """The structure on ``device``."""
        return map_tensors(self, lambda t: t.to(device, non_blocking=non_blocking))


def draw_in_edges(edges: InEdges, nodes: torch.Tensor, fanouts: int | Sequence[int],
                  replace: bool = False, weights: torch.Tensor | None = None,
                  exclude: torch.Tensor | None = None,
                  generator: torch.Generator | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Draws in-edges of ``nodes`` (see the module's text): ``fanouts`` one number, or one
    per edge type; ``weights``: one number (or boolean) per edge id; ``exclude``: edge ids
    never drawn.

    Returns ``(row, pos)``: for each drawn edge the index in ``nodes`` of its destination and
    its position in ``edges``, grouped by row in order, by edge type within a row."""
    types, device = edges.num_etypes, edges.indptr.device
    group = nodes.long().to(device)
    if types > 1:  # (node, edge type); one type: the node (a division by 1 costs as much)
        group = (group[:, None] * types + torch.arange(types, device=device)).reshape(-1)
    start = edges.indptr.index_select(0, group)
    count = edges.degree.index_select(0, group)
    k = _fanouts(fanouts, types, nodes.numel(), device)
    if not isinstance(k, int):  # a fanout of 0 draws nothing
        count = torch.where(k == 0, torch.zeros_like(count), count)
    elif k == 0:
        count = torch.zeros_like(count)
    pool = weight = spill = None  # the candidates: positions start[s]:start[s] + count[s]
    if weights is not None:
        start, count, pool, weight = _allowed(edges, start, count, weights, exclude)
    elif exclude is not None and exclude.numel():
        start, count, spill = _not_excluded(edges, group, start, count, exclude)
    if replace:
        seg, index = with_replacement(start, count, k, None if weight is None else weight[0],
                                       generator)
    else:
        seg, index = without_replacement(start, count, k, weight, generator)
    if pool is not None:
        pos = pool.index_select(0, index)
    elif spill is not None and spill.numel():  # a number past the positions is the
        # spill's entry (an empty spill: every touched group lost all its candidates)
        past = index - edges.src.numel()
        pos = torch.where(past < 0, index, spill.index_select(0, past.clamp(min=0)))
    else:
        pos = index
    return (seg if types == 1 else torch.div(seg, types, rounding_mode="floor")), pos


def _fanouts(fanouts, types: int, num_nodes: int, device) -> int | torch.Tensor:
    """The fanout of each group: one number where every group has the same, else a tensor
    (groups of a node by edge type)."""
    values = [fanouts] if isinstance(fanouts, int) else \
        torch.as_tensor(fanouts).reshape(-1).tolist()
    if len(set(values)) == 1:
        return int(values[0])
    return torch.tensor(values, dtype=torch.int64, device=device).repeat(num_nodes)


def _allowed(edges: InEdges, start, count, weights, exclude):
    """The candidates that may be drawn (weight above 0, not excluded) as segments of a
    pool of positions: ``(start, count, pool, weight)`` (weight: None for a mask; else
    each candidate's, with its segment as ``(weight, segment)``)."""
    seg, pos, _ = segment_slots(start, count)
    weight = weights.reshape(-1).to(pos.device).index_select(0, edges.eid.index_select(0, pos))
    keep = weight if weight.dtype == torch.bool else weight > 0
    weight = None if weight.dtype == torch.bool else weight
    if exclude is not None and exclude.numel():
        keep = keep & ~_among(pos, _banned(edges, exclude))
    if not bool(keep.all()):
        seg, pos = torch.masked_select(seg, keep), torch.masked_select(pos, keep)
        weight = None if weight is None else torch.masked_select(weight, keep)
        count = torch.bincount(seg, minlength=count.numel())
    return torch.cumsum(count, 0) - count, count, pos, None if weight is None else (weight, seg)


def _not_excluded(edges: InEdges, group, start, count, exclude):
    """The candidates of uniform draws that leave out the edge ids ``exclude``, laid out
    only for the groups an excluded edge is in (a batch's few), not for every group asked
    for: ``(start, count, spill)``. An untouched group keeps its positions; a touched one's
    allowed positions go to ``spill``, and its start becomes ``E + i`` (``E`` the number of
    edges), which stands for ``spill[i]``."""
    banned = _banned(edges, exclude)
    hit = torch.searchsorted(edges.indptr, banned, right=True) - 1  # their groups, sorted
    touched = torch.nonzero(_among(group, hit)).squeeze(1)
    if not touched.numel():
        return start, count, None
    seg, pos, _ = segment_slots(start.index_select(0, touched), count.index_select(0, touched))
    keep = ~_among(pos, banned)
    seg, pool = seg[keep], pos[keep]
    kept = torch.bincount(seg, minlength=touched.numel())
    past = edges.src.numel() + torch.cumsum(kept, 0) - kept
    return start.index_copy(0, touched, past), count.index_copy(0, touched, kept), pool


def _banned(edges: InEdges, exclude: torch.Tensor) -> torch.Tensor:
    """The positions of edge ids ``exclude``, sorted, each once."""
    return torch.unique(edges.positions(exclude.to(edges.indptr.device)))


def _among(values: torch.Tensor, ordered: torch.Tensor) -> torch.Tensor:
    """Whether each of ``values`` is in ``ordered`` (sorted, not empty): a binary search
    each (``torch.isin`` sorts both sides, several times slower here)."""
    at = torch.searchsorted(ordered, values).clamp(max=ordered.numel() - 1)
    return ordered.index_select(0, at) == values
