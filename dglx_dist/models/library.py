"""The library a reference model's convs come from (``--convs``, :attr:`ModelConfig.convs
<dglx_dist.config.ModelConfig.convs>`): the package's :mod:`dglx_dist.nn` (torch: no DGL
needed), or DGL's ``dgl.nn`` (from DGL's door, :mod:`dglx_dist.dgl.models`: the same classes
by name, for comparing the two: e.g. their epoch times in docs/benchmarks.md, "The package's
convs beside dgl.nn's").
"""
from __future__ import annotations

from types import ModuleType
from typing import Callable

__all__ = ["CONV_LIBRARIES", "conv_library"]


def _dglx() -> ModuleType:
    import dglx_dist.nn

    return dglx_dist.nn


def _dgl() -> ModuleType:
    from dglx_dist.convs.base import library_door
    from dglx_dist.data.convert import require_dgl

    require_dgl("--convs dgl (dgl.nn's convs)",
                "or leave --convs out: the package's own, dglx_dist.nn")
    return library_door("dgl").CONVS  # DGL's door: dgl.nn's convs, on request only


CONV_LIBRARIES: dict[str, Callable[[], ModuleType]] = {"dglx": _dglx, "dgl": _dgl}
"""The conv libraries by name (:data:`dglx_dist.config.CONV_LIBRARY_NAMES`): each gives the
module holding ``GraphConv``, ``SAGEConv``, ``GATConv``."""


def conv_library(name: str) -> ModuleType:
    """The module of the convs named ``name`` (:data:`CONV_LIBRARIES`).

    Raises:
        MissingDependencyError: ``dgl`` where DGL is not installed.
    """
    return CONV_LIBRARIES[name]()
