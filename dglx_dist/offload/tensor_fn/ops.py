"""The tensor tasks a worker runs, by name (:data:`OPS`), gathered from one module per layer
kind: GCN's in :mod:`.gcn_ops`, GAT's in :mod:`.gat_ops`, GraphSAGE's in :mod:`.sage_ops`. What
they share (the :class:`~.common.Op` record, checks, dropout, the loss) is in :mod:`.common`,
which imports none of them. Which conv type a task belongs to is said by that conv's module in
``dglx_dist/convs/`` (its adapter's ``dorylus.tasks``; this package cannot import it).

Each task is a pure function of a header and float32 arrays; see :mod:`.common` for how callers
may split a task's rows into chunks.
"""
from __future__ import annotations

from .common import Op
from .gat_ops import GAT_OPS
from .gcn_ops import GCN_OPS
from .sage_ops import SAGE_OPS

__all__ = ["OPS"]

OPS: dict[str, Op] = {**GCN_OPS, **GAT_OPS, **SAGE_OPS}
"""The tasks a worker runs, by name: GCN's ``av``, ``av_grad``, ``av_loss``; GAT's ``gat_*``;
GraphSAGE's ``sage_*``."""
