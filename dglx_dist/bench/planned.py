"""``dglx bench --systems auto``: the plan of a benchmark's setup (``dglx plan``'s, the one
:func:`~dglx_dist.planner.auto.resolve` that ``dglx train --strategy auto`` uses): the
setup's task, dataset, model and batching on its servers and ranks and their link (the
emulated one's rate, or loopback's on virtual servers) and this machine's cores shared by
them all, with a server's share of this machine's memory (``--memory-limit``, else its total: every rank of a benchmark runs
here), among the strategies that can run the benchmark's model, kind of dataset and task
(link prediction: those that train it). The row it runs is named ``auto (STRATEGY)``, and
carries the plan's two lines (:func:`plan_fields`)."""
from __future__ import annotations

import os
from typing import Any, Callable, Mapping

from dglx_dist.bench.shared import Setup
from dglx_dist.config import AUTO

__all__ = ["link_gbit", "plan_fields", "plan_setup"]


def link_gbit(setup: Setup) -> float:
    """The rate between the benchmark's servers: its emulated link's, or, on virtual servers,
    loopback's (the unit cost of a byte inside a server)."""
    from dglx_dist.bench.floor import link_bytes_per_s
    from dglx_dist.planner.units import load_measured

    rate = link_bytes_per_s(setup.network)
    return 8 * rate / 1e9 if rate else 8 / load_measured().units.intra_s_per_byte / 1e9


def plan_setup(setup: Setup, given: Mapping[str, Any] | None = None,
               accept: Callable[[Any], bool] | None = None, loaders: bool = False):
    """``(strategy, options, plan)``: the plan's choice for ``setup`` with the ``given``
    options kept (the workload: the setup's fanouts, batch and depth, as every strategy of
    the benchmark gets them, and its task: the link task's batch of edges, negatives and
    training edges), among the strategies ``accept`` takes (built); the plan's two
    lines logged (logger ``dglx_dist.plan``).

    Raises:
        InsufficientMemoryError: no strategy fits a server's memory.
        InvalidValueError: no strategy takes the given options.
    """
    from dglx_dist.planner import graph_of_directory
    from dglx_dist.planner.auto import Launch, resolve, server_memory

    hidden = setup.run.model.hidden
    memory = server_memory(setup.run.job.memory_limit, setup.ranks_per_server, setup.world)
    launch = Launch(setup.servers, setup.ranks_per_server, memory,
                    link_gbit(setup), os.cpu_count(), setup.model or setup.run.model.name,
                    hidden, setup.layers, setup.training().task, loaders,
                    (("fanouts", setup.fanouts), ("batch_size", setup.batch_size),
                     ("num_layers", setup.layers)))
    return resolve(AUTO, dict(given or {}),
                   lambda: graph_of_directory(setup.data, embed_dim=hidden), launch, accept=accept)


def plan_fields(plan) -> dict[str, Any]:
    """What a row keeps of its plan: the two lines, the predicted epoch and the options, and
    every strategy's row (``dglx plan``'s: predicted epoch, what it is ranked by, whether it
    fits), which ``benchmarks/plan_check.py`` compares with the measured rows."""
    choice = plan.choice
    return {"plan": {"summary": plan.summary(), "why": plan.why(),
                     "predicted_epoch_s": round(choice.epoch_s, 4),
                     "options": choice.option_text(), "units": plan.source,
                     "rows": [r.public() for r in plan.rows]}}
