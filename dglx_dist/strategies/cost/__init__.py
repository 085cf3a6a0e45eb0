"""A strategy's cost in one record, :class:`Cost`, declared beside it (its folder's
``cost.py``; the :class:`~dglx_dist.strategies.abilities.Costed` ability): its epoch law
(counted from the shapes alone, :mod:`.counts`, over :mod:`.shapes`), its option chooser,
its per-step overhead and its memory fits, which ``dglx plan``, ``--strategy auto`` and
``dglx train``'s memory check read off every registered strategy. Options the user gave are
kept; a chooser picks the rest; every strategy gets the workload's depth and batching where
they differ from its defaults (the link task's batch of edges is the task's)."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from dglx_dist.memory import MemoryModel
from dglx_dist.strategies.cost.counts import Work, pair_steps
from dglx_dist.strategies.cost.shapes import Cluster, GraphShape, Units, Workload

__all__ = ["Choice", "Chooser", "Cost", "Law", "Situation", "workload_options"]

Law = Callable[[GraphShape, Workload, Cluster], Work]


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

    def option(self, name: str, chosen: Any) -> Any:
        """The user's value of option ``name`` where given, else ``chosen``."""
        return self.given.get(name, chosen)


@dataclasses.dataclass(frozen=True)
class Choice:
    """Options and what they change.

    Attributes:
        options: the options to build the strategy with (given ones and chosen ones that
            differ from its defaults).
        work: the epoch under these options.
        peak_per_rank: memory of a rank under these options (bytes; None: not modelled).
        overlap: the exchange overlaps the compute (its time beyond the compute counts).
        pipelined: its loader draws the next steps and pulls their rows on a worker thread
            while the model computes (``dglx_dist.api.pipeline``): the loader's stage hides
            behind the model's as far as it lasts (its draws only where the worker has a
            core of its own).
    """

    options: dict[str, Any]
    work: Work
    peak_per_rank: float | None
    overlap: bool = False
    pipelined: bool = False


Chooser = Callable[[Situation, Work], Choice]


def workload_options(config: type, work: Workload) -> dict[str, Any]:
    """``work``'s depth and batching as options of a strategy's ``config`` class, those it
    takes that differ from its defaults."""
    wanted = {"fanouts": tuple(work.fanouts), "num_layers": work.layers}
    if not work.link:  # the link task's batch is its own (edges), not the strategy's
        wanted["batch_size"] = work.batch_size
    fields = {f.name: f.default for f in dataclasses.fields(config)}
    return {k: v for k, v in wanted.items() if k in fields and v != fields[k]}


@dataclasses.dataclass(frozen=True)
class Cost:
    """What the plan and the memory check know of a strategy.

    Attributes:
        law: the :class:`~.counts.Work` of an epoch from the graph, the workload and the
            cluster (None: the strategy is not planned).
        full_graph: one optimizer step per epoch over full neighbourhoods (so more epochs to
            the same accuracy than sampled mini-batches).
        models: the models it trains (None: every one the plan knows).
        chooser: picks its options (None: only the workload's).
        overhead_s_per_step: its per-step overhead (what the units and the rounds do not
            cover: Python, the framework, waiting), fitted with ``round_s`` fixed by
            ``benchmarks/plan_check.py --replan`` on the check's GCN node-classification rows.
        memory: its measured peak per rank for graphs without types (docs/cluster_model.md,
            "Memory per rank"; None: not checked).
        typed_memory: the fit for graphs with node types (its "Graphs with node types");
            None: a typed graph is estimated by ``memory`` from its totals.
    """

    law: Law | None = None
    full_graph: bool = False
    models: tuple[str, ...] | None = None
    chooser: Chooser | None = None
    overhead_s_per_step: float = 0.0
    memory: MemoryModel | None = None
    typed_memory: MemoryModel | None = None

    def epoch(self, graph: GraphShape, work: Workload, cluster: Cluster) -> Work:
        """The epoch by its law, on the graph messages pass over (for a full-graph strategy's
        link task: its full-graph step at each step of edges, :func:`~.counts.pair_steps`)."""
        trained = work.trained(graph)
        epoch = self.law(trained, work, cluster)
        return pair_steps(trained, work, cluster, epoch) if self.full_graph and work.link \
            else epoch

    def steps_once(self, work: Workload) -> bool:
        """One optimizer step an epoch: full-graph training of the node task (a link epoch
        takes a step per batch of edges under every strategy)."""
        return self.full_graph and not work.link

    def trains(self, model: str) -> bool:
        return self.models is None or model in self.models

    def choose(self, s: Situation, work: Work) -> Choice:
        """Its options in ``s`` (the given ones kept) and what they change."""
        base = Choice({**workload_options(s.config, s.work), **s.given}, work, s.peak_per_rank)
        if self.chooser is None:
            return base
        chosen = self.chooser(s, work)
        return dataclasses.replace(chosen, options={**base.options, **chosen.options, **s.given})
