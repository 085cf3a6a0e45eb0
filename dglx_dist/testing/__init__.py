"""Helpers for tests of the package and of plug-ins: tiny deterministic graphs, a launcher of
gloo ranks (:func:`run_workers`, also used by the benchmark scripts), seeded models, the
process tree. Test doubles that only the repository's tests use (the Lambda Invoke API stand-in,
the fuzz settings) live in tests/doubles/, the fault-injecting executor in the test plug-ins."""
from dglx_dist.testing.graphs import tiny_dataset
from dglx_dist.testing.launch import WorkerError, run_workers
from dglx_dist.testing.models import seeded_model

__all__ = ["tiny_dataset", "run_workers", "WorkerError", "seeded_model"]
