"""Whole-directory atomic writes and file checksums.

Writers build the directory under a temporary sibling name and rename it into place at the end,
so an interrupted write never leaves a directory that loads as if complete, and an existing
directory is only replaced once its successor is fully written.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_directory", "replace_directory", "sha256_file"]


@contextlib.contextmanager
def atomic_directory(out: str | os.PathLike, overwrite: bool = False,
                     error_cls: type[Exception] = FileExistsError) -> Iterator[Path]:
    """Yields a fresh temporary directory that becomes ``out`` when the block exits cleanly.

    Args:
        out: the final directory.
        overwrite: replace an existing ``out`` (only after the new one is complete).
        error_cls: exception raised when ``out`` exists and ``overwrite`` is false.

    Raises:
        error_cls: ``out`` exists (checked before anything is written).
    """
    out = Path(out)
    if out.exists() and not overwrite:
        raise error_cls(f"{out} already exists; choose another directory or pass overwrite")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_directory(tmp, out)


def replace_directory(tmp: str | os.PathLike, out: str | os.PathLike) -> None:
    """Renames the finished directory ``tmp`` to ``out`` (a sibling). An existing ``out`` is
    moved aside first and removed after, so ``out`` is never a mix of old and new files."""
    tmp, out = Path(tmp), Path(out)
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.rename(out, old / "d")
    os.rename(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
