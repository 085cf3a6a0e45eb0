"""numpy arrays out of a pickle (``torch.save``'s archive of them) without running anything
from the file.

OGB keeps some of its splits only as ``torch.save`` files of numpy arrays (a link task's
``split/SCHEME/{train,valid,test}.pt``, a ``split_dict.pt``): pickles, which ``torch.load``
without ``weights_only`` unpickles in full, free to call anything a file names (and which
torch >= 2.6's ``weights_only`` default refuses for numpy arrays). :func:`read_numpy_pickle`
reads them with an unpickler that resolves only the globals a numpy array, a numpy scalar and a
dict need, so a file naming anything else is refused in one line and nothing in it is run.
Both of torch's formats are read: the zip archive (``NAME/data.pkl``, torch >= 1.6) and the
legacy stream of pickles before it; a file holding torch tensors is refused (their storages
are not read here).
"""
from __future__ import annotations

import codecs
import collections
import importlib
import io
import pickle
import zipfile
from pathlib import Path
from typing import Any, Callable

from dglx_dist.errors import DatasetFormatError

__all__ = ["read_numpy_pickle"]

_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C  # torch.serialization's, before the zip format
_MAX_BYTES = 1 << 36  # 64 GiB: a stored data.pkl larger than this is not a split file


def _latin1(text: str, encoding: str = "utf-8") -> bytes:
    """``_codecs.encode`` as protocol-2 pickles of bytes call it (``latin1`` only)."""
    if encoding != "latin1":
        raise pickle.UnpicklingError(f"_codecs.encode with {encoding!r}")
    return codecs.encode(text, "latin1")


def _numpy(name: str) -> Callable[[], Any]:
    """numpy's ``multiarray`` / ``numeric`` function ``name`` where it lives (``numpy._core``
    in numpy 2, ``numpy.core`` before)."""
    module, attr = name.rsplit(".", 1)

    def find() -> Any:
        for base in ("numpy._core", "numpy.core"):
            try:
                return getattr(importlib.import_module(f"{base}.{module}"), attr)
            except (ImportError, AttributeError):
                continue
        raise pickle.UnpicklingError(f"numpy has no {name}")
    return find


def _allowed() -> dict[tuple[str, str], Callable[[], Any]]:
    import numpy as np

    found: dict[tuple[str, str], Callable[[], Any]] = {
        ("numpy", "ndarray"): lambda: np.ndarray, ("numpy", "dtype"): lambda: np.dtype,
        ("collections", "OrderedDict"): lambda: collections.OrderedDict,
        ("_codecs", "encode"): lambda: _latin1}
    for name in ("multiarray._reconstruct", "multiarray.scalar", "numeric._frombuffer"):
        module, attr = name.rsplit(".", 1)
        for base in ("numpy.core", "numpy._core"):
            found[(f"{base}.{module}", attr)] = _numpy(name)
    return found


class _Refused(DatasetFormatError, pickle.UnpicklingError):
    """A file that names, or holds, what a file of numpy arrays does not."""


class _Unpickler(pickle.Unpickler):
    """Resolves the globals of numpy arrays and nothing else; refuses persistent ids (a torch
    tensor's storage)."""

    _ALLOWED = _allowed()

    def find_class(self, module: str, name: str) -> Any:
        find = self._ALLOWED.get((module, name))
        if find is None:
            raise _Refused(f"names {module}.{name}, which a file of numpy arrays does not hold")
        return find()

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("holds torch tensors (storage records); expected numpy arrays only")


def _load(data: bytes | io.BufferedIOBase) -> Any:
    stream = io.BytesIO(data) if isinstance(data, bytes) else data
    return _Unpickler(stream).load()


def _from_zip(file: Path) -> Any:
    with zipfile.ZipFile(file) as archive:
        names = [n for n in archive.namelist() if n.count("/") == 1 and
                 n.endswith("/data.pkl")]
        if len(names) != 1:
            raise _Refused(f"is a zip archive without one NAME/data.pkl (found {names[:3]})")
        if archive.getinfo(names[0]).file_size > _MAX_BYTES:
            raise _Refused(f"{names[0]} is larger than {_MAX_BYTES} bytes")
        return _load(archive.read(names[0]))


def _from_legacy(file: Path) -> Any:
    """torch's format before the zip: the magic number, the protocol version, the system's
    sizes, then the object (then the tensors' storages, which a file of arrays has none of)."""
    with open(file, "rb") as f:
        if _load(f) != _LEGACY_MAGIC:
            raise _Refused("is neither a zip archive nor torch's legacy format (magic number)")
        _load(f), _load(f)  # protocol version, sys_info
        return _load(f)


def read_numpy_pickle(file: str | Path) -> Any:
    """The object (dicts, lists, numpy arrays and numbers) that ``torch.save`` wrote to
    ``file``, read without running anything from it.

    Raises:
        DatasetFormatError: the file names anything but numpy's array globals, holds torch
            tensors, or is no ``torch.save`` file (one line; nothing in it was run).
    """
    file = Path(file)
    try:
        return _from_zip(file) if zipfile.is_zipfile(file) else _from_legacy(file)
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError,
            AttributeError, zipfile.BadZipFile, MemoryError, OSError) as exc:
        raise DatasetFormatError(f"{file}: {exc} (read as numpy arrays only; nothing in the "
                                 f"file was run)") from None
