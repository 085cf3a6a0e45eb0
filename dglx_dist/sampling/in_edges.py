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

from dglx_dist.sampling.block import map_tensors

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
    k = torch.as_tensor(fanouts, dtype=torch.int64, device=device).reshape(-1)
    k = (k.expand(types) if k.numel() == 1 else k).repeat(nodes.numel())
    group = (nodes.long().to(device)[:, None] * types
             + torch.arange(types, device=device)).reshape(-1)
    start = edges.indptr.index_select(0, group)
    count = torch.where(k == 0, torch.zeros_like(k),
                        edges.indptr.index_select(0, group + 1) - start)
    pool = weight = None  # the candidates: positions start[s]:start[s] + count[s]
    if weights is not None or (exclude is not None and exclude.numel()):
        start, count, pool, weight = _allowed(edges, start, count, weights, exclude)
    draw = _with_replacement if replace else _without_replacement
    seg, index = draw(start, count, k, weight, generator)
    pos = index if pool is None else pool.index_select(0, index)
    return (seg if types == 1 else torch.div(seg, types, rounding_mode="floor")), pos


def _expand(start: torch.Tensor, count: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every index of every segment (``start[s]:start[s] + count[s]``): ``(segment,
    index)``, segments in order."""
    seg = torch.repeat_interleave(torch.arange(count.numel(), device=count.device), count)
    first = torch.cumsum(count, 0) - count
    index = torch.arange(seg.numel(), device=count.device) - first.index_select(0, seg) \
        + start.index_select(0, seg)
    return seg, index


def _allowed(edges: InEdges, start, count, weights, exclude):
    """The candidates that may be drawn (weight above 0, not excluded) as segments of a
    pool of positions: ``(start, count, pool, weight)`` (weight: None if uniform)."""
    seg, pos = _expand(start, count)
    keep, weight = None, None
    if weights is not None:
        weight = weights.reshape(-1).to(pos.device).index_select(
            0, edges.eid.index_select(0, pos))
        keep = weight if weight.dtype == torch.bool else weight > 0
        weight = None if weight.dtype == torch.bool else weight
    if exclude is not None and exclude.numel():
        banned = torch.zeros(edges.eid.numel(), dtype=torch.bool, device=pos.device)
        banned[edges.positions(exclude.to(pos.device))] = True
        allowed = ~banned.index_select(0, pos)
        keep = allowed if keep is None else keep & allowed
    if keep is not None and not bool(keep.all()):
        seg, pos = seg[keep], pos[keep]
        weight = None if weight is None else weight[keep]
        count = torch.bincount(seg, minlength=count.numel())
    return torch.cumsum(count, 0) - count, count, pos, weight


def _layout(start, drawn):
    """Room for ``drawn[s]`` results per segment, in order: each result's segment and its
    rank within it, and each segment's first result."""
    seg = torch.repeat_interleave(torch.arange(drawn.numel(), device=drawn.device), drawn)
    first = torch.cumsum(drawn, 0) - drawn
    return seg, torch.arange(seg.numel(), device=drawn.device) - first.index_select(0, seg), first


def _without_replacement(start, count, k, weight, generator):
    """Per segment, every candidate when it has at most ``k`` (or ``k < 0``), else ``k`` of
    them: uniformly by Floyd's algorithm (``k`` draws per segment, not one per candidate),
    or with weights the ``k`` with the smallest keys ``Exp(1) / weight``, chosen per bucket
    of segments of like size by ``topk`` over a padded matrix (no sort of every candidate).
    A uniform draw among few candidates in all (:data:`_SORTED`) takes the ``k`` smallest
    of uniform keys by one sort instead (:func:`_by_sort`: no loop of ``k`` steps)."""
    full = (k < 0) | (count <= k)
    seg, rank, first = _layout(start, torch.where(full, count, k))
    index = start.index_select(0, seg) + rank  # right for the whole segments
    picked = torch.nonzero(~full).squeeze(1)
    if not picked.numel():
        return seg, index
    if weight is None and int(count.index_select(0, picked).sum()) <= _SORTED:
        wanted = k.index_select(0, picked)
        _, rank, _ = _layout(start, wanted)
        at = torch.repeat_interleave(first.index_select(0, picked), wanted) + rank
        index[at] = _by_sort(start.index_select(0, picked), count.index_select(0, picked),
                             wanted, generator)
        return seg, index
    by = k.index_select(0, picked) if weight is None else \
        _bucket_widths(count.index_select(0, picked))
    for value in torch.unique(by).tolist():
        rows = picked[by == value]
        size = count.index_select(0, rows)
        cols = _floyd(size, value, generator) if weight is None else \
            _smallest_keys(start.index_select(0, rows), size, value,
                           int(k.index_select(0, rows).max()), weight, generator)
        at = first.index_select(0, rows)[:, None] + torch.arange(cols.shape[1],
                                                                 device=cols.device)
        got = start.index_select(0, rows)[:, None] + cols
        if weight is None:  # rows grouped by k: every column is taken
            index[at.reshape(-1)] = got.reshape(-1)
        else:
            taken = torch.arange(cols.shape[1], device=cols.device)[None, :] < \
                k.index_select(0, rows)[:, None]
            index[at[taken]] = got[taken]
    return seg, index


_SORTED = 4096
"""At most this many candidates in all (the segments a draw picks from) are drawn by one
sort: on the 2-core machine a sort of 4k keys takes ~60 us and one of 10k ~700 us, while
Floyd's loop costs ~30 us a step whatever the size (docs/architecture.md)."""


def _by_sort(start, count, k, generator) -> torch.Tensor:
    """Per segment (more than ``k[s]`` candidates each), ``k[s]`` distinct positions,
    uniformly: those with the smallest of uniform keys, found by one sort of every
    candidate by segment and key (the segment is the key's whole part); segments in
    order."""
    seg, pos = _expand(start, count)
    key = torch.rand(pos.numel(), dtype=torch.float64, device=pos.device, generator=generator)
    order = torch.sort(key + seg).indices
    seg = seg.index_select(0, order)
    rank = torch.arange(seg.numel(), device=seg.device) - \
        (torch.cumsum(count, 0) - count).index_select(0, seg)
    return pos.index_select(0, order)[rank < k.index_select(0, seg)]


def _floyd(count: torch.Tensor, k: int, generator) -> torch.Tensor:
    """``k`` distinct columns below ``count[r]`` per row ``r`` (every count above ``k``),
    uniformly: Floyd's algorithm. Its step ``i`` draws from ``[0, top_i]`` (``top_i =
    count - k + i``) and takes ``top_i`` itself when the draw was taken before (which no
    earlier step could reach); every step's draw is made at once, only the check against the
    steps before runs column by column, for every row at once."""
    top = count[:, None] - k + torch.arange(k, device=count.device)  # (rows, k)
    u = torch.rand(top.shape, dtype=torch.float64, device=count.device, generator=generator)
    chosen = torch.minimum((u * (top + 1)).long(), top)
    for i in range(1, k):
        met = (chosen[:, :i] == chosen[:, i:i + 1]).any(1)
        chosen[:, i] = torch.where(met, top[:, i], chosen[:, i])
    return chosen


def _bucket_widths(count: torch.Tensor) -> torch.Tensor:
    """The power of two at or above each count (segments padded to it share a matrix)."""
    return torch.pow(2, torch.ceil(torch.log2(count.double()))).long()


def _smallest_keys(start, count, width: int, most: int, weight, generator):
    """For segments of at most ``width`` candidates (more than ``most`` each): per row, the
    columns of its ``most`` smallest keys ``Exp(1) / weight`` in order (Efraimidis and
    Spirakis: the first ``k`` are a weighted draw of ``k`` without replacement)."""
    col = torch.arange(width, device=start.device)
    valid = col < count[:, None]
    w = weight.index_select(0, (start[:, None] + col).clamp(max=weight.numel() - 1)
                            .reshape(-1)).reshape(valid.shape)
    key = -torch.log1p(-torch.rand(valid.shape, device=start.device, generator=generator)) \
        / w.float()
    key = torch.where(valid, key, torch.full_like(key, float("inf")))
    return torch.topk(key, most, dim=1, largest=False, sorted=True).indices


def _with_replacement(start, count, k, weight, generator):
    """Per segment with any candidate, all of them when ``k < 0``, else ``k`` independent
    draws among them (uniform, or proportional to ``weight``)."""
    full = k < 0
    seg, rank, _ = _layout(start, torch.where(full | (count == 0), count, k))
    base, size = start.index_select(0, seg), count.index_select(0, seg)
    u = torch.rand(seg.numel(), dtype=torch.float64, device=seg.device, generator=generator)
    if weight is None:
        drawn = base + torch.minimum((u * size).long(), size - 1)
    else:
        total = torch.cumsum(weight.double(), 0)
        below = torch.cat([total.new_zeros(1), total])  # the sum before each candidate
        lo, hi = below.index_select(0, base), below.index_select(0, base + size)
        drawn = torch.minimum(torch.searchsorted(total, lo + u * (hi - lo), right=True),
                              base + size - 1)
    return seg, torch.where(full.index_select(0, seg), base + rank, drawn)
