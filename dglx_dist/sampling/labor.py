"""LABOR's draw of in-edges (Balin and Catalyurek, "Layer-Neighbor Sampling", NeurIPS 2023) in
torch, as DGL's ``sample_labors`` draws without importance sampling (LABOR-0).

Every source node ``t`` rolls one uniform variate ``r_t`` per draw, a function of the draw's
seed and ``t`` alone, so the same node is taken or left alike for every destination that
reads it and on every member that stores some of its edges. A destination ``s`` (per edge
type) with ``d`` candidate in-edges and fanout ``k`` takes the edge from ``t`` when
``r_t <= c_s * w``: ``w`` is 1 and ``c_s = k / d`` without weights; with weights ``w`` (DGL's
``prob``), ``c_s`` is the one whose draw has the variance of ``k`` uniform picks (equation 22
of the paper, solved by the paper's fixed-point iteration, as DGL solves it). So a node takes
``k`` in-edges on average (all of them when ``d <= k``), and a layer's sources are fewer than
under independent draws. With a second seed, ``r_t`` comes from both, the second's share
``seed2`` (DGL's ``seed2_contribution``: batches close in time share their variates).

The variates are the package's own (a splitmix64 hash of the seed and the node in torch's
int64 arithmetic); DGL's come from PCG: the draws follow the same law, not the same values.
"""
from __future__ import annotations

import math

import torch

from dglx_dist.sampling.in_edges import InEdges, draw_in_edges

__all__ = ["draw_labor", "variates"]

_GOLDEN = 0x9E3779B97F4A7C15 - 2**64  # splitmix64's constants, as int64
_MUL1 = 0xBF58476D1CE4E5B9 - 2**64
_MUL2 = 0x94D049BB133111EB - 2**64


def _shr(x: torch.Tensor, bits: int) -> torch.Tensor:
    """A logical right shift of int64 values."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _mix(x: torch.Tensor) -> torch.Tensor:
    x = x + _GOLDEN
    x = (x ^ _shr(x, 30)) * _MUL1
    x = (x ^ _shr(x, 27)) * _MUL2
    return x ^ _shr(x, 31)


def _uniform(seed: int, ids: torch.Tensor) -> torch.Tensor:
    """A uniform variate in (0, 1) per id, a function of ``seed`` and the id alone."""
    key = _mix(torch.full_like(ids, seed % 2**63))
    bits = _shr(_mix(key + ids.long()), 11)
    return (bits.double() + 0.5) * 2.0**-53


def variates(ids: torch.Tensor, seeds: tuple[int, ...], seed2: float = 0.0) -> torch.Tensor:
    """``r_t`` of each node ``ids``: uniform from the first seed; with a second seed and a
    share ``seed2`` of it, the normal quantiles of both turned by ``seed2 * pi / 2`` (still
    uniform, and the closer to the second seed's the larger the share)."""
    first = _uniform(seeds[0], ids)
    if len(seeds) < 2 or seed2 <= 0:
        return first
    angle = seed2 * math.pi / 2
    mixed = math.cos(angle) * torch.special.ndtri(first) + \
        math.sin(angle) * torch.special.ndtri(_uniform(seeds[1], ids))
    return torch.special.ndtr(mixed)


def draw_labor(edges: InEdges, nodes: torch.Tensor, fanout: int, seeds: tuple[int, ...],
               seed2: float = 0.0, weights: torch.Tensor | None = None,
               exclude: torch.Tensor | None = None, shared_ids: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """LABOR-0's draw of the in-edges of ``nodes`` (see the module's text), ``fanout`` per
    node and edge type (-1: all); ``weights``: one number per edge id (zero: never drawn);
    ``exclude``: edge ids never drawn (left out after the draw); ``shared_ids``: the id each node rolls its variate by
    (None: its own). Returns ``(row, pos)`` as :func:`~dglx_dist.sampling.in_edges.
    draw_in_edges` does."""
    row, pos = draw_in_edges(edges, nodes, -1)
    if fanout < 0 or not pos.numel():
        return _kept(edges, row, pos, exclude)
    w = None if weights is None else \
        weights.reshape(-1).double().index_select(0, edges.eid.index_select(0, pos))
    group = row if edges.num_etypes == 1 else \
        row * edges.num_etypes + edges.etype.index_select(0, pos)
    count = torch.bincount(group).double()  # every in-edge counts, excluded ones too (DGL's)
    c = fanout / count.clamp(min=1) if w is None else _weighted_c(group, w, count, fanout)
    src = edges.src.index_select(0, pos)
    r = variates(src if shared_ids is None else shared_ids.index_select(0, src), seeds, seed2)
    take = r <= c.index_select(0, group) * (1.0 if w is None else w)
    return _kept(edges, row[take], pos[take], exclude)


def _kept(edges: InEdges, row: torch.Tensor, pos: torch.Tensor,
          exclude: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The drawn edges but those ``exclude`` names: left out after the draw, as DGL's
    ``sample_labors`` leaves them (each destination's chances count them)."""
    if exclude is None or not exclude.numel():
        return row, pos
    keep = ~torch.isin(edges.eid.index_select(0, pos), exclude.to(pos.device).long())
    return row[keep], pos[keep]


def _weighted_c(group: torch.Tensor, w: torch.Tensor, count: torch.Tensor,
                fanout: int) -> torch.Tensor:
    """Each group's ``c_s`` for weighted edges: the root of LABOR's variance equation
    ``f(c) = sum(w^2 / min(1, c w)) - (d_w^2 / k - d_w^2 / d + sum(w^2)) = 0`` (``d_w``: the
    group's weight, ``d``: its edges, ``k = min(fanout, d)``; infinite, every edge taken,
    where ``d <= k``). ``f`` is convex and falls with ``c``, so Newton's steps from a ``c``
    left of the root climb to it without overshooting. (DGL runs the paper's fixed point
    instead and stops within 1e-4 of it, which can leave a light edge of a node with no
    more edges than its fanout a little short of certain.)"""
    def per_group(values: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(count).index_add_(0, group, values)

    total, squares = per_group(w), per_group(w * w)
    k = count.clamp(max=fanout)
    target = total * total / k.clamp(min=1) - total * total / count.clamp(min=1) + squares
    heaviest = torch.zeros_like(count).scatter_reduce(0, group, w, "amax")
    c = 0.5 * torch.minimum(1 / heaviest.clamp(min=1e-300), total / target.clamp(min=1e-300))
    for _ in range(60):
        cw = c.index_select(0, group) * w
        below = (cw < 1) & (w > 0)
        f = per_group(torch.where(below, w / c.index_select(0, group), w * w)) - target
        slope = per_group(torch.where(below, w / c.index_select(0, group) ** 2,
                                      torch.zeros_like(w)))
        step = torch.where(slope > 0, f / slope.clamp(min=1e-300), torch.zeros_like(f))
        c = c + step
        if bool((step.abs() <= 1e-9 * c).all()):
            break
    return torch.where(count <= fanout, torch.full_like(c, float("inf")), c)
