"""Expansion-aware sampling (GraNNDis): which external nodes a server preloads.

A server's *inner* nodes are the ones its partitions own. Shared preloading adds the *external*
nodes its inner nodes depend on, so that training never fetches rows across servers; EAS bounds
that set: starting from the inner nodes, ``max_hop`` (m) traversal steps, each admitting at most
``fanout`` (k) external in-neighbours of every frontier node, sampled uniformly without
replacement among its external in-neighbours (-1: all of them). The newly admitted nodes are the
next frontier. Internal dependencies (in-neighbours inside the server) are never sampled: they
are all there already. ``m = L`` and ``k = -1`` give plain shared preloading (every node within
L hops).

Each rank of a server expands from its own inner nodes; a node several ranks admit goes to the
lowest of them, which expands it further and holds its row.
"""
from __future__ import annotations

from typing import Callable

import torch

from dglx_dist.runtime.comm import Comm
from dglx_dist.sampling.sampler import PartitionSampler

__all__ = ["capped", "claim", "expand_external", "gather_with_members"]

_EMPTY = torch.zeros(0, dtype=torch.int64)


def capped(src: torch.Tensor, dst: torch.Tensor, fanout: int,
           gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """At most ``fanout`` of the edges into each destination, chosen uniformly without
    replacement (``fanout`` -1: all)."""
    if fanout < 0 or src.numel() == 0:
        return src, dst
    order = torch.argsort(torch.rand(src.numel(), generator=gen))
    order = order[torch.argsort(dst[order], stable=True)]
    d = dst[order]
    pos = torch.arange(d.numel())
    start = torch.ones_like(d, dtype=torch.bool)
    start[1:] = d[1:] != d[:-1]
    first = torch.cummax(torch.where(start, pos, torch.zeros_like(pos)), 0).values
    keep = order[(pos - first) < fanout]
    return src[keep], dst[keep]


def gather_with_members(group: Comm, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every member's ``ids`` concatenated in member order, and the member each came from
    (collective over ``group``)."""
    lists = group.all_gather_v(ids)
    who = torch.repeat_interleave(torch.arange(group.size),
                                  torch.tensor([t.numel() for t in lists]))
    return torch.cat(lists), who


def claim(group: Comm, proposed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every id some member of ``group`` proposes goes to the lowest member proposing it
    (collective). Returns (the ids this member gets, every proposed id), both sorted."""
    every, who = gather_with_members(group, proposed)
    uniq, inverse = torch.unique(every, return_inverse=True)
    first = torch.full((uniq.numel(),), group.size, dtype=torch.int64)
    first = first.scatter_reduce(0, inverse, who, "amin")
    return uniq[first == group.group_rank], uniq


def expand_external(core_edges: tuple[torch.Tensor, torch.Tensor],
                    is_external: Callable[[torch.Tensor], torch.Tensor],
                    sampler: PartitionSampler, group: Comm, max_hop: int, fanout: int,
                    gen: torch.Generator) -> torch.Tensor:
    """This rank's share of the external nodes its group preloads (sorted global ids).

    Collective: every rank of the job calls it with the same ``max_hop`` (steps after the
    first fetch remote in-edges through ``sampler``, over the whole job), and every member of
    ``group`` agrees on who holds which node.

    Args:
        core_edges: ``(src, dst)`` global ids of the in-edges of this rank's inner nodes.
        is_external: whether global ids lie outside the group's inner nodes.
        sampler: in-edges of any node, from its owner.
        group: the ranks that share the preloaded set (a server).
        max_hop / fanout: EAS's m and k.
        gen: the sampling generator.
    """
    admitted, mine, frontier = _EMPTY, [], _EMPTY
    for hop in range(max_hop):
        src, dst = core_edges if hop == 0 else sampler.sample_layer(frontier, -1)[:2]
        external = is_external(src)
        src, _ = capped(src[external], dst[external], fanout, gen)
        new = torch.unique(src)
        new = new[~torch.isin(new, admitted)]
        frontier, every_new = claim(group, new)
        admitted = torch.cat([admitted, every_new]).sort().values
        mine.append(frontier)
    return torch.cat(mine).sort().values if mine else _EMPTY
