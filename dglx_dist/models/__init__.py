"""Reference layer-wise models built from dgl.nn, for tests, benchmarks and the CLI."""
from dglx_dist.models.sage import SAGE

__all__ = ["SAGE"]
