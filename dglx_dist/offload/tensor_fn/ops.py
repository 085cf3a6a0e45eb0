"""The tensor tasks a worker runs, by name (:data:`OPS`), gathered from the conv folders.

Each conv type's folder in :mod:`dglx_dist.convs` holds its numpy tasks in ``ops.py``
(``TASKS``: name -> :class:`~dglx_dist.convs.ops_base.Op`), the same objects its adapter's
``dorylus.tasks`` names; :data:`OPS` is every folder's, found by the layout (a folder with an
``ops.py``), so no list of conv types is kept here. A task name defined by two folders fails
the import. What the tasks share (the ``Op`` record, checks, dropout, the loss, how callers
may split a task's rows) is :mod:`dglx_dist.convs.ops_base`. Numpy only, like all of
:mod:`~dglx_dist.offload.tensor_fn`: each task is a pure function of a header and float32 arrays.
"""
from __future__ import annotations

import importlib
import importlib.util
import pkgutil

import dglx_dist.convs as convs
from dglx_dist.convs.ops_base import Op

__all__ = ["OPS", "task_modules"]


def task_modules() -> list[str]:
    """The module names of the conv folders' ``ops.py``, in folder order (found on disk or in
    the Lambda zip alike: ``pkgutil`` lists the folders, ``find_spec`` their ``ops``)."""
    names = []
    for info in pkgutil.iter_modules(convs.__path__, f"{convs.__name__}."):
        if info.ispkg and importlib.util.find_spec(f"{info.name}.ops") is not None:
            names.append(f"{info.name}.ops")
    return sorted(names)


def _gather() -> dict[str, Op]:
    ops: dict[str, Op] = {}
    where: dict[str, str] = {}
    for module_name in task_modules():
        for name, op in importlib.import_module(module_name).TASKS.items():
            if name in ops:
                raise RuntimeError(f"tensor task {name!r} is defined in {where[name]} and in "
                                   f"{module_name}; a task belongs to one conv type")
            ops[name], where[name] = op, module_name
    return ops


OPS: dict[str, Op] = _gather()
"""The tasks a worker runs, by name: GCN's ``av``, ``av_grad``, ``av_loss``
(``convs/graphconv/ops.py``); GAT's ``gat_*`` (``convs/gat/ops.py``); GraphSAGE's ``sage_*``
(``convs/sage/ops.py``)."""
