"""``dglx bench``: every system on the same dataset, model and hyper-parameters, in one
command (docs/benchmarks.md). The pieces, in the order a run uses them:

* :mod:`~dglx_dist.bench.presets`: the presets (frozen dataclasses) and the network the
  strategies run on (emulated cluster or virtual servers);
* :mod:`~dglx_dist.bench.datasets`: the presets' synthetic graphs, cached; partition keys;
* :mod:`~dglx_dist.bench.suite`: one benchmark from the parsed options, its outputs in
  ``--out``;
* :mod:`~dglx_dist.bench.kinds`: the kinds of dataset (without types, or typed) as data for
  the harness: its baselines, the strategies that train it, how they start;
* :mod:`~dglx_dist.bench.shared`: the :class:`Setup` every system shares;
* :mod:`~dglx_dist.bench.harness`: the systems, one run of each -> a result row, time to
  accuracy; the benchmark scripts run through it too;
* :mod:`~dglx_dist.bench.planned`: ``--systems auto``, the plan of the setup (the strategy
  ``dglx plan`` picks, run as its own row is);
* :mod:`~dglx_dist.bench.single`: the single-process DGL baseline (a child process);
* :mod:`~dglx_dist.bench.dgl_distdgl`: DGL's own DistDGL on one host, with its worker
  (:mod:`~dglx_dist.bench.dgl_distdgl_worker`), its node-classification loop
  (:mod:`~dglx_dist.bench.dgl_distdgl_nodes`, also our strategies' loop on a typed dataset)
  and its link prediction (:mod:`~dglx_dist.bench.dgl_distdgl_link`);
* :mod:`~dglx_dist.bench.procs`: process groups run together, killed on timeout, reaped;
* :mod:`~dglx_dist.bench.report`: results.jsonl, the markdown table, the figure (``draw``).

The research tooling built on this harness lives in the source tree's ``benchmarks/``. Nothing
here imports DGL or torch at import time; the systems import them in their own processes.
"""
from dglx_dist.bench.harness import Setup, add_time_to_accuracy, summarize
from dglx_dist.bench.presets import PRESETS, Preset
from dglx_dist.bench.suite import replot, run_bench

__all__ = ["PRESETS", "Preset", "Setup", "add_time_to_accuracy", "replot", "run_bench",
           "summarize"]
