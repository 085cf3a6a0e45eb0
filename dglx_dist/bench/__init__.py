"""``dglx bench``: every system on the same dataset, model and hyper-parameters, in one
command (docs/benchmarks.md).

The pieces, in the order a run uses them:

* :mod:`~dglx_dist.bench.presets`: the presets (:class:`Preset`, a frozen dataclass;
  ``TypedPreset`` for a graph with node and edge types; the benchmark scripts'
  ``ScriptPreset``) and the network the strategies run on (emulated cluster or virtual
  servers);
* :mod:`~dglx_dist.bench.datasets`: the presets' synthetic graphs (typed ones too), cached;
  partition cache keys;
* :mod:`~dglx_dist.bench.suite`: one benchmark from the parsed options: setup, every system,
  time to accuracy, the outputs in ``--out``;
* :mod:`~dglx_dist.bench.kinds`: the kinds of dataset (without types, or typed), each as
  data for the harness: its baselines, the strategies that train it, how they start;
* :mod:`~dglx_dist.bench.shared`: the :class:`Setup` every system shares;
* :mod:`~dglx_dist.bench.harness`: the systems (single-process DGL, DGL's DistDGL, every
  registered strategy as ``dglx train`` under torchrun, or on a typed dataset in DGL's loop
  through the drop-in API), one run of each -> a result row, a rank's JSON lines
  summarised, time to accuracy; the benchmark scripts run through it too;
* :mod:`~dglx_dist.bench.single`: the single-process DGL baseline (a child process,
  ``python -m dglx_dist.bench.single``);
* :mod:`~dglx_dist.bench.dgl_distdgl`: DGL's own DistDGL on one host (partitions, 2 simulated
  machines), with its worker :mod:`~dglx_dist.bench.dgl_distdgl_worker` (``python -m
  dglx_dist.bench.dgl_distdgl_worker``: partition, machine, server, trainer), its
  node-classification loop (:mod:`~dglx_dist.bench.dgl_distdgl_nodes`: our reference model,
  or the R-GCN on a typed graph; also our strategies' loop on a typed dataset, with the
  drop-in API's names) and its link prediction (:mod:`~dglx_dist.bench.dgl_distdgl_link`);
* :mod:`~dglx_dist.bench.procs`: process groups run together, killed on timeout, reaped;
* :mod:`~dglx_dist.bench.report`: results.jsonl, the markdown table, the figure (matplotlib,
  the ``plot`` extra), drawn as panels (``draw``) like every benchmark script's figure.

The research tooling built on this harness (the strategy papers' sweeps, the cluster model,
our trainer profiled phase by phase, fault measurements) is not in the package: it lives in
the source tree's ``benchmarks/`` and runs from the repository root (docs/benchmarks.md).

Nothing here imports DGL or torch at import time; the systems import them in their own
processes.
"""
from dglx_dist.bench.harness import Setup, add_time_to_accuracy, summarize
from dglx_dist.bench.presets import PRESETS, Preset
from dglx_dist.bench.suite import replot, run_bench

__all__ = ["PRESETS", "Preset", "Setup", "add_time_to_accuracy", "replot", "run_bench",
           "summarize"]
