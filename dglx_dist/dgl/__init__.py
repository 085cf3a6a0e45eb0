"""DGL's API with dglx_dist's distributed parts: the one door to DGL's names.

``import dglx_dist.dgl as dgl`` in a DistDGL script: every attribute is DGL's own, except
``dgl.distributed`` (:mod:`dglx_dist.dgl.distributed`, ``dgl.distributed``'s API over the
package) and, in ``dgl.dataloading``, ``DistNodeDataLoader`` and ``DistEdgeDataLoader``
(:class:`dglx_dist.api.DataLoader` and its edge form, DGL's blocks out).
:mod:`dglx_dist.dgl.run` runs an unmodified DistDGL script with these in DGL's places
(``python -m dglx_dist.run``). The package's own API is :mod:`dglx_dist.api`; nothing here
is imported before it is used. This is the one place the package imports DGL (issue 78):
besides the above, the converters to DGL's graphs (:mod:`~dglx_dist.dgl.conversion`) and
blocks (:mod:`~dglx_dist.dgl.blocks`), a model of ``dgl.nn``'s modules at its edge
(:mod:`~dglx_dist.dgl.models`), DGL's samplers for a user's ``BlockSampler``
(:mod:`~dglx_dist.dgl.samplers`), DGL's ``graph.dgl`` files (:mod:`~dglx_dist.dgl.graph_files`)
and DGL's METIS (:mod:`~dglx_dist.dgl.metis`), each imported by the layers below only inside
the function that needs it, and named apart from DGL's modules so that none hides one of
DGL's attributes.
Where DGL is not installed, importing this package (or its runner) is refused in one line
naming the extra to install.
"""
from __future__ import annotations

import importlib
import types

from dglx_dist.data.convert import require_dgl

require_dgl("dglx_dist.dgl (DGL's API, and the runner of DistDGL scripts)",
            "the package's own API, dglx_dist.api, and dglx train need no DGL")

__all__ = ["distributed", "dataloading", "run"]


def _dataloading() -> types.ModuleType:
    """``dgl.dataloading`` with the distributed loaders swapped."""
    import dgl.dataloading as theirs

    from dglx_dist.dgl.distributed import dataloader

    class Dataloading(types.ModuleType):
        DistNodeDataLoader = dataloader.DistNodeDataLoader
        DistEdgeDataLoader = dataloader.DistEdgeDataLoader

        def __getattr__(self, name: str):
            return getattr(theirs, name)

    return Dataloading(f"{__name__}.dataloading", theirs.__doc__)


def __getattr__(name: str):
    if name in ("distributed", "run"):
        return importlib.import_module(f"{__name__}.{name}")
    if name == "dataloading":
        module = globals()["dataloading"] = _dataloading()
        return module
    import dgl

    return getattr(dgl, name)
