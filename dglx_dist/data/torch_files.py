"""``torch.save`` files read without running anything from them: ``torch.load`` with an
unpickler that resolves only the globals its caller allows (an allowlist: the classes and
functions such a file legitimately names), so that any other global is refused before it is
looked up. torch reads both of its formats, the zip archive and the legacy stream, the same
way. The package unpickles nothing else (tests/unit/test_no_unpickling.py); the readers:
GraphBolt's part graphs (:mod:`dglx_dist.partition.dgl_graphbolt`) and OGB's split files of
numpy arrays (:data:`NUMPY`, :mod:`dglx_dist.data.ogb_files`).
"""
from __future__ import annotations

import codecs
import collections
import importlib
import os
import pickle
import types
from typing import Any, Callable, Mapping

from dglx_dist.errors import DglxError

__all__ = ["RefusedGlobal", "load_allowed", "numpy_globals"]


class RefusedGlobal(DglxError, pickle.UnpicklingError):
    """A global the file names that its allowlist does not hold (``module.name``)."""


def load_allowed(file: str | os.PathLike, allowed: Mapping[tuple[str, str], Any]) -> Any:
    """The object ``torch.save`` wrote to ``file``, on the CPU, its globals resolved through
    ``allowed`` (``(module, name) -> object``) alone.

    Raises:
        RefusedGlobal: the file names a global ``allowed`` does not hold (nothing was run);
            any other failure is torch's reader's.
    """
    import torch

    class Unpickler(pickle.Unpickler):  # torch.load subclasses it (storages, persistent ids)
        def find_class(self, module: str, name: str) -> Any:
            found = allowed.get((module, name))
            if found is None:
                raise RefusedGlobal(f"{module}.{name}")
            return found

    restricted = types.ModuleType("dglx_restricted_pickle")
    restricted.Unpickler = Unpickler
    # the legacy format's header (magic number, protocol, sizes) and storage keys
    restricted.load = lambda f, **kwargs: Unpickler(f, **kwargs).load()
    return torch.load(file, map_location="cpu", pickle_module=restricted, weights_only=False)


def _latin1(text: str, encoding: str = "utf-8") -> bytes:
    """``_codecs.encode`` as protocol-2 pickles of bytes call it (``latin1`` only)."""
    if encoding != "latin1":
        raise RefusedGlobal(f"_codecs.encode with {encoding!r}")
    return codecs.encode(text, "latin1")


def numpy_globals() -> dict[tuple[str, str], Callable | type]:
    """The allowlist of a file of numpy arrays and numbers in dicts and lists: numpy's
    array, dtype and scalar rebuilders under both of numpy's module names (``numpy._core`` in
    numpy 2, ``numpy.core`` before; a file names the one that wrote it), ``OrderedDict`` and
    the bytes codec protocol 2 calls."""
    import numpy as np

    found: dict[tuple[str, str], Callable | type] = {
        ("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
        ("collections", "OrderedDict"): collections.OrderedDict, ("_codecs", "encode"): _latin1}
    for module, attr in (("multiarray", "_reconstruct"), ("multiarray", "scalar"),
                         ("numeric", "_frombuffer")):
        target = _numpy_attr(module, attr)
        if target is not None:
            found |= {(f"{base}.{module}", attr): target for base in ("numpy.core", "numpy._core")}
    return found


def _numpy_attr(module: str, attr: str) -> Callable | None:
    """numpy's ``module.attr`` where this numpy keeps it (``numpy._core`` or ``numpy.core``)."""
    for base in ("numpy._core", "numpy.core"):
        try:
            return getattr(importlib.import_module(f"{base}.{module}"), attr)
        except (ImportError, AttributeError):
            continue
    return None
