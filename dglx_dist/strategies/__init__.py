"""Distributed strategies. Importing this package registers the built-in ones."""
from dglx_dist.strategies import distdgl as _distdgl  # noqa: F401  (registers)
from dglx_dist.strategies import dorylus as _dorylus  # noqa: F401  (registers)
from dglx_dist.strategies import granndis as _granndis  # noqa: F401  (registers)
from dglx_dist.strategies import p3 as _p3  # noqa: F401  (registers)
from dglx_dist.strategies.base import STRATEGIES, PartitionSpec, Strategy

__all__ = ["STRATEGIES", "Strategy", "PartitionSpec"]
