"""``distdgl``: DistDGL (2020): the strategy, :mod:`.strategy` (:class:`DistDGLStrategy`,
:func:`traded_seeds`); its cost (epoch law, option chooser, overhead, memory fits),
:mod:`.cost`."""
from dglx_dist.strategies.distdgl.strategy import DistDGLStrategy, traded_seeds

__all__ = ["DistDGLStrategy", "traded_seeds"]
