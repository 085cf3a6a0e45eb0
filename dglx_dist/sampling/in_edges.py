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

__all__ = ["InEdges", "draw_in_edges", "segment_slots"]


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
    if types > 1:
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
        seg, index = _with_replacement(start, count, k, None if weight is None else weight[0],
                                        generator)
    else:
        seg, index = _without_replacement(start, count, k, weight, generator)
    if pool is not None:
        pos = pool.index_select(0, index)
    elif spill is not None:  # a number past the positions is the spill's entry
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
    pool of positions: ``(start, count, pool, weight)`` (weight: None if uniform; else
    each candidate's, with its segment as ``(weight, segment)``)."""
    seg, pos, _ = segment_slots(start, count)
    keep, weight = None, None
    if weights is not None:
        weight = weights.reshape(-1).to(pos.device).index_select(
            0, edges.eid.index_select(0, pos))
        keep = weight if weight.dtype == torch.bool else weight > 0
        weight = None if weight.dtype == torch.bool else weight
    if exclude is not None and exclude.numel():
        allowed = ~_among(pos, _banned(edges, exclude))
        keep = allowed if keep is None else keep & allowed
    if keep is not None and not bool(keep.all()):
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


def segment_slots(start, drawn):
    """Room for ``drawn[s]`` results per segment, in order: each result's segment, the
    position ``start[s] + rank`` (its rank within the segment), and each segment's first
    result."""
    total = int(drawn.sum())
    seg = torch.repeat_interleave(drawn, output_size=total)
    first = torch.cumsum(drawn, 0) - drawn
    index = torch.arange(total, device=drawn.device) + (start - first).index_select(0, seg)
    return seg, index, first


def _without_replacement(start, count, k, weight, generator):
    """Per segment, every candidate when it has at most ``k`` (or ``k < 0``), else ``k`` of
    them: uniformly by Floyd's algorithm (``k`` draws per segment, not one per candidate:
    :func:`_floyd`), or with weights the ``k`` with the smallest keys ``Exp(1) / weight``
    (:func:`_smallest_keys`)."""
    if isinstance(k, int):
        if k < 0:
            return segment_slots(start, count)[:2]
        full = count <= k
        drawn = torch.clamp(count, max=k)
    else:
        full = (k < 0) | (count <= k)
        drawn = torch.where(full, count, k)
    seg, index, first = segment_slots(start, drawn)
    picked = torch.nonzero(~full).squeeze(1)
    if not picked.numel():
        return seg, index
    if weight is None:
        by = None if isinstance(k, int) else k.index_select(0, picked)
        for value, rows in _grouped(picked, by, k):
            _place(index, first.index_select(0, rows),
                   _floyd(count.index_select(0, rows), value, generator))
        return seg, index
    wanted = k if isinstance(k, int) else k.index_select(0, picked)
    got = _smallest_keys(start, count, picked, wanted, *weight, generator)
    step = torch.arange(got.shape[1], device=got.device)
    at = first.index_select(0, picked)[:, None] + step
    if isinstance(k, int):
        index.index_copy_(0, at.reshape(-1), got.reshape(-1))
    else:
        taken = step < wanted[:, None]
        index[at[taken]] = got[taken]
    return seg, index


def _grouped(picked, by, k):
    """``(value, rows)`` for each distinct value of ``by`` (all of ``picked`` at ``k`` when
    ``by`` is None)."""
    if by is None:
        return [(k, picked)]
    return [(value, picked[by == value]) for value in torch.unique(by).tolist()]


def _place(index, first, cols):
    """Moves each row's ``cols[:, r]`` into ``index`` at its results ``first[r]:first[r] +
    k``, which hold ``start[r] + rank``: they become ``start[r] + cols[:, r]``."""
    step = torch.arange(cols.shape[0], device=cols.device)[:, None]
    index.index_add_(0, (first + step).reshape(-1), (cols - step).reshape(-1))


def _floyd(count: torch.Tensor, k: int, generator) -> torch.Tensor:
    """``k`` distinct values below ``count[r]`` for each ``r`` (every count above ``k``),
    uniformly, as a ``(k, rows)`` matrix: Floyd's algorithm, for every row at once. Step
    ``i`` draws ``raw_i`` from ``[0, top_i]`` (``top_i = count - k + i``) and takes ``top_i``
    instead when ``raw_i`` was taken before (``top_i`` never was: every earlier value is
    below it). The draws are made for every step first (one ``(k, rows)`` matrix of
    random numbers); then a small ``k`` compares each step's draw with the values the
    earlier steps took (:func:`_floyd_steps`), a large one finds them through a table of
    every row's values (:func:`_floyd_table`): the same values either way."""
    top = (count - k) + torch.arange(k, device=count.device)[:, None]
    raw = _below(top + 1, generator)
    if k <= _PAIRWISE:
        return _floyd_steps(raw, top)
    return _floyd_table(count, k, raw, top)


_PAIRWISE = 32
"""Floyd's draws of at most this many values per row look for a repeated draw by comparing
each step's with the values taken before (``k * (k - 1) / 2`` compares a row); of more,
through a table of every row's values (its size the rows' candidates: a few passes whose
cost does not grow with ``k``). Measured on one thread, rows of 180 candidates on average
(products' frontier): the compares take 1/4-1/2 of the table's time at ``k`` 10-32 over
13,000 rows, and about as long at ``k = 48``."""


def _floyd_steps(raw: torch.Tensor, top: torch.Tensor) -> torch.Tensor:
    """Floyd's values from the ``(k, rows)`` draws ``raw``, step by step: step ``i`` takes
    ``top[i]`` where ``raw[i]`` is among the values steps ``0 .. i-1`` took, else ``raw[i]``."""
    taken = raw.clone()
    for i in range(1, raw.shape[0]):  # (the largest of bytes: faster than any() over dim 0)
        seen = torch.eq(taken[:i], raw[i]).view(torch.uint8).amax(0).view(torch.bool)
        torch.where(seen, top[i], raw[i], out=taken[i])
    return taken


def _floyd_table(count: torch.Tensor, k: int, raw: torch.Tensor, top: torch.Tensor
                 ) -> torch.Tensor:
    """Floyd's values from the ``(k, rows)`` draws ``raw``, through a table of every row's
    values: a step takes its top when its draw equals an earlier step's draw (whatever
    that step took, the value is taken: found by the first step to write each value into
    the table), or the top of an earlier step that took its top (a chain of steps, each
    pointing to an earlier one: followed in ``k - 1`` rounds over one step's row each, or
    by pointer doubling in ``log2(k)`` rounds over all)."""
    rows, device = count.numel(), count.device
    step = torch.arange(k, device=device)[:, None]
    low = count - k  # top_i = low + i
    key = (raw + (torch.cumsum(count, 0) - count)).reshape(-1)
    order = step.to(torch.int32).expand(k, rows).reshape(-1)
    first = torch.full((int(count.sum()),), k, dtype=torch.int32, device=device)
    first.scatter_reduce_(0, key, order, "amin")
    met = first.index_select(0, key) < order
    ptr = raw - low  # the step j < i whose top raw_i is, where it is at least 0
    ptr = torch.where(ptr >= 0, ptr, step)  # else i itself
    if rows >= _STEPWISE * k:  # step by step: k - 1 rounds over one row of the matrix
        met = met.view(k, rows)
        for i in range(1, k):
            met[i] |= met.gather(0, ptr[i:i + 1])[0]
        return torch.where(met, top, raw)
    ptr = (ptr * rows + torch.arange(rows, device=device)).reshape(-1)
    for _ in range(max(k - 1, 0).bit_length()):  # doubling: log2(k) over the whole matrix
        met = met | met.index_select(0, ptr)
        ptr = ptr.index_select(0, ptr)
    return torch.where(met.view(k, rows), top, raw)


_STEPWISE = 64
"""Floyd's chains (:func:`_floyd_table`) are followed step by step where there are at least
this many rows per step (a round costs little over few rows, and the doubling's rounds
cover the whole matrix), else by pointer doubling."""


def _below(bound: torch.Tensor, generator) -> torch.Tensor:
    """A uniform integer in ``[0, bound)`` for each entry (float64's 53 bits; ``u < 1`` times
    a bound below 2**52 rounds below the bound)."""
    u = torch.rand(bound.shape, dtype=torch.float64, device=bound.device, generator=generator)
    return u.mul_(bound).long()


_ABOVE = 4
"""A weighted draw of ``k`` among more than ``_ABOVE * k`` candidates keeps, past a
threshold on the keys, about ``_ABOVE * k`` of them to choose from (fewer when the weights
are uneven; a segment left with fewer than ``k`` keeps them all)."""


def _smallest_keys(start, count, picked, k, weight, seg, generator) -> torch.Tensor:
    """Per segment ``picked[r]`` (more than ``k`` candidates; ``k`` one number or one per
    row), the positions of the candidates with the ``k`` smallest keys ``Exp(1) / weight``:
    a ``(rows, max k)`` matrix, columns past a row's ``k`` unused (Efraimidis and Spirakis:
    they are a weighted draw of ``k`` without replacement). The keys are drawn for every
    candidate at once; those of a segment of many are first cut at ``_ABOVE * k / (the
    segment's weight)``, which keeps about ``_ABOVE * k`` of them (a Poisson number: the
    ``k`` smallest are kept unless fewer than ``k`` are, and then all are), so that one
    ``topk`` over a narrow padded matrix chooses."""
    weight = weight.float()
    key = torch.empty_like(weight).exponential_(generator=generator) / weight
    total = torch.cumsum(weight, 0)  # a segment's weight from it (float32 sums: any
    a = start.index_select(0, picked)  # cut draws exactly; a poor one only costs time)
    size = count.index_select(0, picked)
    cut = torch.where(size > _ABOVE * k, _ABOVE * k / (
        total.index_select(0, a + size - 1) - total.index_select(0, a)
        + weight.index_select(0, a)).clamp(min=1e-30), float("inf"))
    limit = torch.full((count.numel(),), float("-inf"), device=seg.device).index_copy_(
        0, picked, cut.float())  # segments not picked keep none
    kept, idx = _below_limit(seg, key, limit)
    short = kept.index_select(0, picked) < k
    if bool(short.any()):
        kept, idx = _below_limit(seg, key, limit.index_fill_(0, picked[short], float("inf")))
    most = k if isinstance(k, int) else int(k.max())
    width = max(int(kept.max()), most)
    first = torch.cumsum(kept, 0) - kept
    row = torch.zeros_like(count).index_copy_(0, picked, torch.arange(picked.numel(),
                                                                      device=seg.device))
    slot = torch.arange(idx.numel(), device=seg.device) + \
        (row * width - first).index_select(0, seg.index_select(0, idx))
    keys = torch.full((picked.numel() * width,), float("inf"), device=seg.device)
    keys.index_copy_(0, slot, key.index_select(0, idx))
    cols = torch.topk(keys.view(-1, width), most, 1, largest=False,  # a row's k first
                      sorted=not isinstance(k, int)).indices
    return idx.index_select(0, (first.index_select(0, picked)[:, None] + cols)
                            .clamp(max=idx.numel() - 1).reshape(-1)).view(cols.shape)


def _below_limit(seg, key, limit):
    """The candidates whose key is below their segment's limit: how many per segment, and
    their indices in order."""
    idx = torch.nonzero(key < limit.index_select(0, seg)).squeeze(1)
    return torch.bincount(seg.index_select(0, idx), minlength=limit.numel()), idx


def _with_replacement(start, count, k, weight, generator):
    """Per segment with any candidate, all of them when ``k < 0``, else ``k`` independent
    draws among them (uniform, or proportional to ``weight``)."""
    if isinstance(k, int) and k < 0:
        return segment_slots(start, count)[:2]
    full = None if isinstance(k, int) else k < 0
    drawn = torch.where(count == 0, count, k) if full is None else \
        torch.where(full | (count == 0), count, k)
    seg, index, _ = segment_slots(start, drawn)
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
    return seg, drawn if full is None else torch.where(full.index_select(0, seg), index, drawn)
