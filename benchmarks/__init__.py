"""Research tooling around dglx_dist: measurements, the strategy papers' sweeps, the cluster
model and the fault measurements. Not part of the wheel (setup.py packages ``dglx_dist`` only);
it lives in the source tree, as PyG's and DGL's benchmarks do, and runs from the repository
root (which puts this package on ``sys.path``), e.g.::

    python -m benchmarks.sweeps --preset tiny --out sweeps-out   # the P3, GraNNDis, Dorylus sweeps
    python -m benchmarks.bench_strategies --preset tiny          # one sweep, its own options
    python -m benchmarks.cluster_model validate                  # the cluster model

* :mod:`benchmarks.sweeps`: the P3, GraNNDis and Dorylus sweeps, run by
  ``bench_strategies``, ``bench_granndis``, ``bench_dorylus`` and ``python -m benchmarks.sweeps``;
* :mod:`benchmarks.costmodel`: the cluster model behind ``cluster_model``;
* ``bench_train``: our distdgl against DGL's DistDGL, with :mod:`benchmarks.ours_profile` (our
  trainer timed phase by phase, under torchrun) for ``--profile``;
* ``chaos`` and ``faults``: faults injected into real jobs (docs/reliability.md).

Each runs through the harness of ``dglx bench`` (:mod:`dglx_dist.bench`), which ships. The
Dorylus sweep's emulated Lambda latency uses the ``faulty-local`` executor of the test plug-ins
(tests/plugins), which it puts on its runs' ``PYTHONPATH``.
"""
