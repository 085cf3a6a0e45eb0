"""Whether a training job fits in memory, asked before it starts: the strategy's measured
per-rank model (a :class:`~dglx_dist.strategies.abilities.MemoryModelled` strategy's
``memory_model``, or its ``typed_memory_model`` for a graph with node types; a
:class:`~dglx_dist.memory.MemoryModel`) applied to the job's graph (a
:class:`~dglx_dist.memory.GraphSize`) and ranks, summed over the ranks that share this
machine's memory.

The fits, where they were measured and how far off they were: docs/cluster_model.md, "Memory
per rank"; the check adds :data:`MARGIN`, so a refusal is an estimate (``dglx train
--memory-limit`` overrides it).
"""
from __future__ import annotations

import dataclasses
import logging

from dglx_dist.errors import DglxError, InvalidValueError
from dglx_dist.memory import GraphSize, MemoryModel, check_memory
from dglx_dist.strategies.abilities import MemoryModelled
from dglx_dist.strategies.base import STRATEGIES, Strategy

__all__ = ["JobSize", "check_job_memory", "memory_model_for", "peak_per_rank", "MARGIN"]

log = logging.getLogger(__name__)
_MB = 1 << 20
MARGIN = 0.08
"""What the check adds to a fit's estimate: the largest under-estimate of the fits one graph
size up from where they were measured (docs/cluster_model.md, "Memory per rank")."""


@dataclasses.dataclass(frozen=True)
class JobSize:
    """What a training job's memory estimate needs to know of it.

    Attributes:
        graph: the graph's nodes and feature widths per node type, edges and learned-row
            width (:class:`~dglx_dist.memory.GraphSize`).
        world: ranks in the job (servers x ranks per server).
        ranks_here: ranks on this machine, which share its memory.
    """

    graph: GraphSize
    world: int
    ranks_here: int

    def __post_init__(self):
        if not 1 <= self.ranks_here <= self.world:
            raise InvalidValueError(f"JobSize(world={self.world}, ranks_here={self.ranks_here})"
                                    ": expected 1 <= ranks_here <= world")

    @classmethod
    def homogeneous(cls, nodes: int, edges: int, world: int, ranks_here: int) -> "JobSize":
        """A job on a graph without types (sized by its nodes and edges, as measured at
        F = 128)."""
        if min(nodes, edges) < 0:
            raise InvalidValueError(f"JobSize(nodes={nodes}, edges={edges}): expected nodes, "
                                    "edges >= 0")
        return cls(GraphSize.homogeneous(nodes, edges), world, ranks_here)


def memory_model_for(strategy: Strategy, graph: GraphSize) -> MemoryModel | None:
    """The fit that estimates ``graph`` under ``strategy``: its typed fit for a typed graph
    where it has one, else its fit for graphs without types (None: not modelled)."""
    if not isinstance(strategy, MemoryModelled):
        return None
    typed = strategy.typed_memory_model
    return typed if graph.typed and typed is not None else strategy.memory_model


def peak_per_rank(strategy: Strategy, job: JobSize) -> float | None:
    """The estimated peak resident bytes of one of ``job``'s ranks under ``strategy``; None
    when the strategy has no memory model."""
    model = memory_model_for(strategy, job.graph)
    return None if model is None else model.estimate(job.graph, job.world)


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


def _measured(strategy: Strategy, graph: GraphSize) -> str:
    """How the fit that estimates ``graph`` was measured, for the message."""
    if not graph.typed:
        return "measured at F=128"
    if strategy.typed_memory_model is not None:  # a MemoryModelled one: it has an estimate
        return "measured on mag-shaped typed graphs (R-GCN, per-type widths)"
    return "measured at F=128 without types, from the typed graph's totals"


def _advice(strategy: Strategy, job: JobSize, budget: int, per_rank: float,
            override: str) -> str:
    """What to do instead: how many servers would do, the strategy that needs the least and
    whether it fits, or the override."""
    model, here = memory_model_for(strategy, job.graph), job.ranks_here
    servers = model.fewest_servers(job.graph, here, budget / (1 + MARGIN))
    if servers is None:
        tips = [f"more servers do not help (a rank's base alone is about "
                f"{model.base / _MB:,.0f} MiB)"]
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
