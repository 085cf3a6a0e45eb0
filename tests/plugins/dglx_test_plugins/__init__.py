"""One trivial plug-in per extension point of dglx_dist, defined outside the package.

The directory above this one holds ``dglx_test_plugins-0.1.dist-info``, the metadata pip writes
when it installs a distribution: its ``entry_points.txt`` registers each plug-in in the group
its registry scans. tests/conftest.py puts that directory on ``sys.path`` (and on
``PYTHONPATH`` for the ranks and commands the tests start), so ``importlib.metadata`` finds the
entry points the way it finds an installed package's, and the contract tests, which loop over
the registries' names, cover these plug-ins with no edit to the package or to the tests:

* :mod:`.partitioner`: ``range``, contiguous id ranges (``dglx_dist.partitioners``);
* :mod:`.strategy`: ``range_distdgl``, DistDGL-style training on ``range`` parts, written
  against the strategy core alone (``dglx_dist.strategies``), so the plan lists it as not
  planned; beside it ``CostedRangeStrategy``, the same with a cost, which the plan's test
  registers itself (so no other test plans it);
* :mod:`.conv`: the column split of ``dgl.nn.GINConv`` (``dglx_dist.layers``);
* :mod:`.executor`: ``threads``, tensor tasks in a thread pool (``dglx_dist.executors``);
* :mod:`.faulty`: ``faulty-local``, the ``local`` executor with latency, crashes and hangs
  injected (its worker: :mod:`.faulty_worker`), for the fault tests and the Dorylus sweep's
  emulated Lambda latency (``dglx_dist.executors``).

Each module imports only what its registry's package needs, so loading one group never pulls in
another's dependencies (the partitioner and the executor load without DGL).
"""
