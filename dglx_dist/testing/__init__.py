"""Helpers for tests: tiny deterministic graphs (more land here with the runtime)."""
from dglx_dist.testing.graphs import tiny_dataset
from dglx_dist.testing.launch import WorkerError, run_workers
from dglx_dist.testing.models import seeded_model

__all__ = ["tiny_dataset", "run_workers", "WorkerError", "seeded_model"]
