"""Choosing up to ``k`` of each segment's slots, in torch and vectorised over the segments
(no loop over them in Python): :func:`without_replacement` (uniformly by Floyd's algorithm,
its steps for every segment at once; or by weight, as the ``k`` smallest of ``Exp(1) / w``,
Efraimidis and Spirakis' keys) and :func:`with_replacement` (``k`` independent draws,
uniform or by weight); :func:`segment_slots` lays out room for each segment's results. The
draws of :func:`~dglx_dist.sampling.in_edges.draw_in_edges` are made here; the module's text
says what each draw takes.
"""
from __future__ import annotations

import torch

__all__ = ["segment_slots", "without_replacement", "with_replacement"]


def segment_slots(start, drawn):
    """Room for ``drawn[s]`` results per segment, in order: each result's segment, the
    position ``start[s] + rank`` (its rank within the segment), and each segment's first
    result."""
    total = int(drawn.sum())
    seg = torch.repeat_interleave(drawn, output_size=total)
    first = torch.cumsum(drawn, 0) - drawn
    index = torch.arange(total, device=drawn.device) + (start - first).index_select(0, seg)
    return seg, index, first


def without_replacement(start, count, k, weight, generator):
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
    every row's values (:func:`_floyd_table`): the same values either way (:func:`_way`)."""
    top = (count - k) + torch.arange(k, device=count.device)[:, None]
    raw = _below(top + 1, generator)
    way = _way(count, k)
    if way == "steps":
        return _floyd_steps(raw, top)
    return _floyd_table(count, k, raw, top, stepwise=way == "stepwise")


def _way(count: torch.Tensor, k: int) -> str:
    """How :func:`_floyd` finds repeated draws: ``"steps"`` (compares, a few ops per step
    of ``k``), ``"stepwise"`` (the table, a few ops per step) or ``"doubling"`` (the table,
    a few ops per doubling of ``k``). On the host by the rows' shape (``_PAIRWISE``,
    ``_STEPWISE``); on a device always the doubling, as there each op is a kernel launch
    that costs the host more than the device's work (on an H200, 4.0 ms of a batch's draw
    against 0.77 ms of kernels; docs/install.md)."""
    if count.device.type != "cpu":
        return "doubling"
    if k <= _PAIRWISE:
        return "steps"
    return "stepwise" if count.numel() >= _STEPWISE * k else "doubling"


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


def _floyd_table(count: torch.Tensor, k: int, raw: torch.Tensor, top: torch.Tensor,
                 stepwise: bool) -> torch.Tensor:
    """Floyd's values from the ``(k, rows)`` draws ``raw``, through a table of every row's
    values: a step takes its top when its draw equals an earlier step's draw (whatever
    that step took, the value is taken: found by the first step to write each value into
    the table), or the top of an earlier step that took its top (a chain of steps, each
    pointing to an earlier one: followed in ``k - 1`` rounds over one step's row each where
    ``stepwise``, else by pointer doubling in ``log2(k)`` rounds over all)."""
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
    if stepwise:  # step by step: k - 1 rounds over one row of the matrix
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
"""On the host Floyd's chains (:func:`_floyd_table`) are followed step by step where there
are at least this many rows per step (a round costs little over few rows, and the
doubling's rounds cover the whole matrix), else by pointer doubling."""


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


def with_replacement(start, count, k, weight, generator):
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
