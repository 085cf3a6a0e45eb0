"""Helpers for tests: tiny deterministic graphs (more land here with the runtime)."""
from dglx_dist.testing.graphs import tiny_dataset

__all__ = ["tiny_dataset"]
