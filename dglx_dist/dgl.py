"""DGL with dglx_dist's distributed parts: ``import dglx_dist.dgl as dgl`` in a DistDGL script.

Every attribute is DGL's own, except ``dgl.distributed`` (:mod:`dglx_dist.distributed`) and,
in ``dgl.dataloading``, ``DistNodeDataLoader`` and ``DistEdgeDataLoader``
(:class:`dglx_dist.api.DataLoader` and its edge form).
"""
from __future__ import annotations

import types

import dgl as _dgl
import dgl.dataloading as _dataloading

from dglx_dist import distributed
from dglx_dist.api.loader import DataLoader as _DataLoader
from dglx_dist.api.loader import DistEdgeDataLoader as _DistEdgeDataLoader

__all__ = ["distributed", "dataloading"]


class _Dataloading(types.ModuleType):
    """``dgl.dataloading`` with the distributed node loader swapped."""

    DistNodeDataLoader = _DataLoader
    DistEdgeDataLoader = _DistEdgeDataLoader

    def __getattr__(self, name: str):
        return getattr(_dataloading, name)


dataloading = _Dataloading("dglx_dist.dgl.dataloading", _dataloading.__doc__)


def __getattr__(name: str):
    return getattr(_dgl, name)
