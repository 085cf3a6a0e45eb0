"""Each strategy's options, chosen for a graph, a workload and a cluster (:data:`CHOOSERS`,
one function per strategy name), with what they change: the epoch's
:class:`~dglx_dist.planner.laws.Work`, the memory per rank, and whether the exchange overlaps the
compute. Options the user gave are kept and modelled as given; the rest are chosen.

- ``distdgl``: ``server_pulls`` on when a server's ranks would pull the same rows (more than
  :data:`MIN_SAVING` of them); ``cache_mb``: half of the memory the server has left after its
  ranks' estimated peaks, at most every remote row; a cache holding a fraction ``f`` of the
  remote rows serves :func:`cache_hits` of the pulls (measured at ogbn-products' size).
- ``p3``: ``pipeline`` on with 3 or more steps an epoch (the layer-1 exchange of the next
  batches overlaps the training of this one; staleness up to 3 steps).
- ``granndis`` and ``fullgraph`` (granndis's batching without its preload): ``co_batches``
  R > 1 where one co-batch does not fit: R co-batches hold 1/R of the activations (the
  preload, or the part and its halo, stays whole), for R steps an epoch. Under the drop-in
  API's DataLoaders (``Workload.loaders``) R is at least the loader's batches, as their
  default ``co_batches=-1`` takes. Never for the link task: each of its steps is one co-batch
  over the whole graph.
- every strategy: the depth and batching of the workload (``fanouts``, ``batch_size``,
  ``num_layers``) where they differ from its defaults (the link task's batch of edges is
  the task's, not a strategy option).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

import numpy as np

from dglx_dist.planner.laws import ID, Work, sampled_steps
from dglx_dist.planner.shapes import Cluster, GraphShape, Units, Workload

__all__ = ["CACHE_SHARE", "CHOOSERS", "Choice", "MIN_SAVING", "Situation", "cache_hits",
           "choose", "workload_options"]

MIN_SAVING = 0.05
"""The share of a server's pulled rows that must be shared by its ranks to pull together."""
CACHE_SHARE = 0.5
"""The share of a server's free memory a distdgl cache takes (the rest is slack for what the
memory estimates miss: they count the features, the batches and the activations at the plan's
widths from the graph's sizes, not its degrees)."""
ACTIVATION_COPIES = 3
"""Activations a full-graph rank holds per layer and node: outputs, saved inputs, gradients
(as the strategies' memory estimates count them: ``dglx_dist.strategies.holdings``)."""
_HITS = ((0.0, 0.0), (0.1, 0.4), (0.2, 0.54), (1.0, 1.0))


def cache_hits(fraction: float) -> float:
    """Share of the remote pulls a cache of ``fraction`` of the remote rows serves: 10% of
    the rows served 40% of the pulls at ogbn-products' size and 20% served 54%
    (docs/benchmarks.md, "A cache of remote rows"); linear between, and to all at 100%."""
    xs, ys = zip(*_HITS)
    return float(np.interp(min(max(fraction, 0.0), 1.0), xs, ys))


@dataclasses.dataclass(frozen=True)
class Situation:
    """What a strategy's options are chosen from.

    Attributes:
        strategy: its registered name.
        config: its options class (the defaults, and which options it takes).
        graph, work, cluster, units: the plan's inputs.
        given: the options the user gave (kept).
        peak_per_rank: the strategy's memory estimate for a rank with the given options and
            the workload's (bytes: its fit, what it holds at the plan's widths, the margin),
            None: not modelled.
    """

    strategy: str
    config: type
    graph: GraphShape
    work: Workload
    cluster: Cluster
    units: Units
    given: Mapping[str, Any]
    peak_per_rank: float | None

    def free_per_server(self) -> float | None:
        """Memory a server has left after its ranks' estimated peaks (None: unknown)."""
        if self.cluster.memory_bytes is None or self.peak_per_rank is None:
            return None
        return self.cluster.memory_bytes - self.cluster.ranks_per_server * self.peak_per_rank


@dataclasses.dataclass(frozen=True)
class Choice:
    """Options and what they change.

    Attributes:
        options: the options to build the strategy with (given ones and chosen ones that
            differ from its defaults).
        work: the epoch under these options.
        peak_per_rank: memory of a rank under these options (bytes; None: not modelled).
        overlap: the exchange overlaps the compute (its time beyond the compute counts).
    """

    options: dict[str, Any]
    work: Work
    peak_per_rank: float | None
    overlap: bool = False


Chooser = Callable[[Situation, Work], Choice]
CHOOSERS: dict[str, Chooser] = {}
"""Each strategy's chooser by name; a strategy without one gets only the workload's options."""


def chooser(name: str) -> Callable[[Chooser], Chooser]:
    def register(fn: Chooser) -> Chooser:
        CHOOSERS[name] = fn
        return fn
    return register


def workload_options(config: type, work: Workload) -> dict[str, Any]:
    """``work``'s depth and batching as options of a strategy's ``config`` class, those it
    takes that differ from its defaults."""
    wanted = {"fanouts": tuple(work.fanouts), "num_layers": work.layers}
    if not work.link:  # the link task's batch is its own (edges), not the strategy's
        wanted["batch_size"] = work.batch_size
    fields = {f.name: f.default for f in dataclasses.fields(config)}
    return {k: v for k, v in wanted.items() if k in fields and v != fields[k]}


def choose(s: Situation, work: Work) -> Choice:
    """The options of ``s.strategy`` (the given ones kept) and what they change."""
    base = Choice({**workload_options(s.config, s.work), **s.given}, work, s.peak_per_rank)
    fn = CHOOSERS.get(s.strategy)
    if fn is None:
        return base
    chosen = fn(s, work)
    return dataclasses.replace(chosen, options={**base.options, **chosen.options, **s.given})


def _option(s: Situation, name: str, chosen: Any) -> Any:
    return s.given.get(name, chosen)


def _rows_pulled(s: Situation, work: Work) -> float:
    """Distinct rows a rank pulls from other servers per step."""
    per_row = s.graph.row_bytes + s.graph.learned_bytes + ID
    return work.pull_inter_bytes / max(work.steps * s.cluster.world, 1) / per_row


@chooser("distdgl")
def _distdgl(s: Situation, work: Work) -> Choice:
    c, g = s.cluster, s.cluster.ranks_per_server
    options: dict[str, Any] = {}
    remote = s.graph.nodes * (1 - 1 / c.servers)  # rows on other servers
    if c.servers > 1 and g > 1:
        rows = _rows_pulled(s, work)
        union = remote * (1 - (1 - min(rows / max(remote, 1), 1.0)) ** g)
        saving = 1 - union / max(g * rows, 1e-9)
        if _option(s, "server_pulls", saving >= MIN_SAVING):
            options["server_pulls"] = True
            shared = work.steps * c.servers * union * s.graph.row_bytes  # handed out inside
            work = dataclasses.replace(
                work, inter_bytes=work.inter_bytes - saving * work.pull_inter_bytes,
                pull_inter_bytes=(1 - saving) * work.pull_inter_bytes,
                intra_bytes=work.intra_bytes + shared)
    free = s.free_per_server()
    cache = 0.0
    if c.servers > 1 and free is not None and free > 0:
        cache = min(CACHE_SHARE * free, remote * s.graph.row_bytes)
    cache_mb = float(_option(s, "cache_mb", math.floor(cache / 2**20)))
    peak = s.peak_per_rank
    if cache_mb >= 1:
        options["cache_mb"] = cache_mb
        hits = cache_hits(cache_mb * 2**20 / max(remote * s.graph.row_bytes, 1))
        work = dataclasses.replace(
            work, inter_bytes=work.inter_bytes - hits * work.pull_inter_bytes,
            pull_inter_bytes=(1 - hits) * work.pull_inter_bytes)
        if "cache_mb" not in s.given:  # a given cache is in the strategy's own estimate
            peak = None if peak is None else peak + cache_mb * 2**20 / g
    return Choice(options, work, peak)


@chooser("p3")
def _p3(s: Situation, work: Work) -> Choice:
    typed = bool(s.graph.node_types)  # p3 refuses its pipeline on a typed graph
    on = _option(s, "pipeline", work.steps >= 3 and s.cluster.world > 1 and not typed)
    return Choice({"pipeline": True} if on else {}, work, s.peak_per_rank, overlap=bool(on))


@chooser("granndis")
@chooser("fullgraph")
def _co_batches(s: Situation, work: Work) -> Choice:
    c, peak = s.cluster, s.peak_per_rank
    given = s.given.get("co_batches")
    if s.work.link:  # a link step: one co-batch
        return Choice({}, work, peak)
    nodes = work.gather_bytes / s.graph.row_bytes  # the rank's share of the held nodes
    act = nodes * 4 * ACTIVATION_COPIES * sum(s.work.dims(s.graph)[1:])
    fits = [] if peak is None or c.memory_bytes is None else [
        r for r in range(1, 65)
        if c.ranks_per_server * (peak - act * (1 - 1 / r)) <= c.memory_bytes]
    loader = sampled_steps(s.graph, s.work, c) if s.work.loaders else 1  # co_batches=-1
    chosen = max(loader, fits[0] if fits else 1)
    r = given if given is not None and given > 0 else chosen
    if r == 1:
        return Choice({}, work, peak)
    return Choice({} if r == loader and given is None else {"co_batches": r},
                  dataclasses.replace(work, steps=work.steps * r, rounds=work.rounds * r),
                  None if peak is None else peak - act * (1 - 1 / r))
