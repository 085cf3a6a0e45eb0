"""Whether a training job fits in memory, asked before it starts: the strategy's measured
per-rank model (a :class:`~dglx_dist.strategies.abilities.Costed` strategy's
``cost.memory``, or its ``cost.typed_memory`` for a graph with node types; a
:class:`~dglx_dist.memory.MemoryModel`) applied to the job's graph (a
:class:`~dglx_dist.strategies.cost.shapes.GraphShape`) and ranks, with what the strategy
holds at the job's widths beyond the fit's (its ``holdings``:
:mod:`dglx_dist.strategies.holdings`), summed over the ranks that share this machine's
memory. The plan (``dglx plan``, ``--strategy auto``) takes the same estimate.

The fits, where they were measured and how far off they were: docs/cluster_model.md, "Memory
per rank"; the check adds :data:`MARGIN`, so a refusal is an estimate (``dglx train
--memory-limit`` overrides it).
"""
from __future__ import annotations

import dataclasses
import logging

from dglx_dist.errors import DglxError
from dglx_dist.memory import MemoryModel, check_memory
from dglx_dist.strategies.abilities import Costed
from dglx_dist.strategies.base import STRATEGIES, Strategy
from dglx_dist.strategies.cost.shapes import GraphShape
from dglx_dist.strategies.holdings import REFERENCE_FEAT_DIM, JobSize, ModelSize

__all__ = ["JobSize", "ModelSize", "check_job_memory", "fewest_servers", "memory_model_for",
           "peak_per_rank", "MARGIN"]

log = logging.getLogger(__name__)
_MB = 1 << 20
MARGIN = 0.08
"""What the check adds to a fit's estimate: the largest under-estimate of the fits one graph
size up from where they were measured (docs/cluster_model.md, "Memory per rank")."""


def memory_model_for(strategy: Strategy, graph: GraphShape) -> MemoryModel | None:
    """The fit that estimates ``graph`` under ``strategy``: its typed fit for a typed graph
    where it has one, else its fit for graphs without types (None: not modelled)."""
    if not isinstance(strategy, Costed):
        return None
    typed = strategy.cost.typed_memory
    return typed if graph.typed and typed is not None else strategy.cost.memory


def peak_per_rank(strategy: Strategy, job: JobSize) -> float | None:
    """The estimated peak resident bytes of one of ``job``'s ranks under ``strategy``; None
    when the strategy has no memory model.

    A fit without a feature term (measured at one width, F = 128, with the
    :data:`~dglx_dist.strategies.holdings.REFERENCE` model) counts, beside the fit, what the
    strategy holds at the job's widths beyond what it held at the fit's
    (:meth:`~dglx_dist.strategies.abilities.Costed.holdings`; the fit's growth above
    its base is taken to hold that much, at most all of it), never less than the fit; every
    fit adds the fixed budgets of the strategy's options (a cache)."""
    model = memory_model_for(strategy, job.graph)
    if model is None:
        return None
    fit, now = model.estimate(job.graph, job.world), strategy.holdings(job)
    if model.per_feature_byte:  # a fit that scales with the feature bytes itself (typed)
        return fit + now.fixed
    then = min(strategy.holdings(job.at_reference()).scaled, fit - model.base)
    return fit + max(0.0, now.scaled - then) + now.fixed


def check_job_memory(strategy: Strategy, job: JobSize, limit: int | None,
                     override: str = "a larger limit") -> None:
    """Refuses to train ``strategy`` on ``job`` when the estimated peak of this machine's ranks
    together exceeds ``limit`` bytes (None: the memory available now). A strategy without a
    memory model is not checked.

    Args:
        override: how the caller's user sets the limit, for the advice (``dglx train``:
            ``--memory-limit BYTES``).

    Raises:
        InsufficientMemoryError: one line naming the strategy, the estimate per rank and for
            this machine's ranks, the graph, the limit, and what to do: more servers (how
            many, when the fit says), the registered strategy with the smallest estimate,
            or ``override``.
    """
    per_rank = _checked_peak(strategy, job)
    name = _name(strategy)
    if per_rank is None:
        log.debug("strategy %r has no memory model: its memory is not checked", name)
        return
    here = job.ranks_here
    what = (f"training with strategy {name!r} on {job.graph.describe()} (about "
            f"{per_rank / _MB:,.0f} MiB a rank by its fit {_measured(strategy, job.graph)} "
            f"plus {MARGIN:.0%}, x {_ranks(here)} on this machine)")
    check_memory(round(per_rank * here), limit, what,
                 lambda budget: _advice(strategy, job, budget, per_rank, override))


def _measured(strategy: Strategy, graph: GraphShape) -> str:
    """How the fit that estimates ``graph`` was measured, for the message."""
    if not graph.typed:
        width = graph.feature_bytes / graph.nodes / 4
        rows = "" if round(width) == REFERENCE_FEAT_DIM else f" and its rows at F={width:,.0f}"
        return f"measured at F={REFERENCE_FEAT_DIM}{rows}"
    if strategy.cost.typed_memory is not None:  # a Costed one: it has an estimate
        return "measured on mag-shaped typed graphs (R-GCN, per-type widths)"
    return "measured at F=128 without types, from the typed graph's totals"


MAX_SERVERS = 1 << 16
"""The most servers :func:`fewest_servers` tries."""


def fewest_servers(strategy: Strategy, job: JobSize, budget: float) -> int | None:
    """The fewest machines of ``job.ranks_here`` ranks each over which ``job`` spread fits
    ``budget`` bytes a machine by the checked estimate (with :data:`MARGIN`); None when not
    even :data:`MAX_SERVERS` would (what a rank holds however many there are does not fit)
    or the strategy has no memory model."""
    here = job.ranks_here

    def fits(servers: int) -> bool:
        peak = _checked_peak(strategy, dataclasses.replace(job, world=servers * here))
        return peak is not None and peak * here <= budget

    if not fits(MAX_SERVERS):
        return None
    low, high = 1, MAX_SERVERS
    while low < high:  # the estimate falls as the servers grow
        mid = (low + high) // 2
        low, high = (low, mid) if fits(mid) else (mid + 1, high)
    return low


def _advice(strategy: Strategy, job: JobSize, budget: int, per_rank: float,
            override: str) -> str:
    """What to do instead: how many servers would do, the strategy that needs the least and
    whether it fits, or the override."""
    model, here = memory_model_for(strategy, job.graph), job.ranks_here
    servers = fewest_servers(strategy, job, budget)
    if servers is None and here * model.base * (1 + MARGIN) >= budget:
        tips = [f"more servers do not help (a rank's base alone is about "
                f"{model.base / _MB:,.0f} MiB)"]
    elif servers is None:
        floor = _checked_peak(strategy, dataclasses.replace(job, world=MAX_SERVERS * here))
        tips = [f"more servers do not help (a rank would hold about {floor / _MB:,.0f} MiB "
                f"on {MAX_SERVERS:,} servers: the model's parameters and a step's rows)"]
    else:
        tips = [f"use more servers (by this estimate {servers} machines of {_ranks(here)} "
                f"each would fit)"]
    least = _least(job)
    if least is None or least[1] >= per_rank:
        tips.append(f"no registered strategy needs less than {_name(strategy)!r} here")
    else:
        name, peak = least
        total = "" if here == 1 else f", {peak * here / _MB:,.0f} MiB for the {_ranks(here)} here"
        fits = "fits" if peak * here <= budget else "does not fit either"
        tips.append(f"or a strategy that needs less (the least is {name!r}: about "
                    f"{peak / _MB:,.0f} MiB a rank{total}, which {fits})")
    return "; ".join([*tips, f"or set {override} if you know the job fits"])


def _least(job: JobSize) -> tuple[str, float] | None:
    """The registered strategy (built with its defaults; for a typed graph, one that trains
    typed graphs) whose estimate for ``job`` is the smallest, with that estimate; None when
    none has a model."""
    best = None
    for name in STRATEGIES.names():
        try:
            other = STRATEGIES.build(name)
        except DglxError:  # a plug-in that needs options to be built: not a candidate
            continue
        if job.graph.typed and not other.capabilities.typed_graphs:
            continue
        peak = _checked_peak(other, job)
        if peak is not None and (best is None or peak < best[1]):
            best = (name, peak)
    return best


def _checked_peak(strategy: Strategy, job: JobSize) -> float | None:
    """The estimate the check compares: the fit's peak per rank plus :data:`MARGIN`."""
    peak = peak_per_rank(strategy, job)
    return None if peak is None else peak * (1 + MARGIN)


def _name(strategy: Strategy) -> str:
    return strategy.registered_name or type(strategy).__name__


def _ranks(count: int) -> str:
    return f"{count} rank{'s' if count != 1 else ''}"
