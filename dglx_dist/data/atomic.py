"""Whole-directory atomic writes and file checksums.

Writers build the directory under a temporary sibling name (``.NAME.tmp-PID@HOST.*``) and
rename it into place at the end; ``overwrite`` replaces only a directory of the writer's
:class:`DirKind` whose record (:mod:`~dglx_dist.data.owned`) proves dglx wrote every file in it
and that does not hold the writer's input, and a later writer removes the temporaries of gone
processes. The rules are docs/reliability.md's ("Files dglx writes, and what it may delete").
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import glob
import logging
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Callable, Iterator, Sequence

import psutil

from dglx_dist.data.owned import (RECORD, Record, describe_unproven, read_record,
                                  remove_recorded, unproven, write_record)
from dglx_dist.errors import DiskFullError, OutputExistsError

__all__ = ["DirKind", "atomic_directory", "check_disk", "check_target", "holds", "replace_directory",
           "remove_stale_temporaries"]

log = logging.getLogger(__name__)
_MB = 1 << 20


@dataclasses.dataclass(frozen=True)
class DirKind:
    """A kind of directory a writer makes, recognised by its record
    (:mod:`~dglx_dist.data.owned`).

    Attributes:
        name: the record's ``kind``.
        what: how messages name it ("a dglx dataset directory").
    """

    name: str
    what: str


def holds(directory: str | os.PathLike, path: str | os.PathLike) -> bool:
    """Whether ``path`` is ``directory`` or lies under it (both resolved: links followed)."""
    directory, path = Path(directory).resolve(), Path(path).resolve()
    return path == directory or directory in path.parents


def check_target(out: str | os.PathLike, overwrite: bool, kind: DirKind | None = None,
                 inputs: Sequence[str | os.PathLike] = (),
                 error_cls: type[Exception] = OutputExistsError) -> None:
    """Refuses an output directory that would lose something (checked before any work).

    A missing or empty ``out`` is written; an existing one only with ``overwrite``, and only
    when its record proves that dglx wrote every file in it (a ``kind`` directory).

    Args:
        out: the directory to write.
        overwrite: whether an existing ``out`` may be replaced.
        kind: what ``out`` must already be for ``overwrite`` to replace it (None: any kind).
        inputs: paths the writer reads; ``out`` may be none of them nor hold one.
        error_cls: the exception raised.
    """
    out = Path(out)
    for source in inputs:
        if holds(out, source):
            raise error_cls(f"{out}: the output directory would hold the input "
                            f"{Path(source).resolve()}; choose a directory outside it")
    if not out.exists() and not out.is_symlink():
        return
    if not out.is_dir() or out.is_symlink():
        raise error_cls(f"{out} exists and is not a directory; refusing to replace it")
    if not any(out.iterdir()):
        return  # an empty directory loses nothing
    if not overwrite:
        raise error_cls(f"{out} already exists and is not empty; choose another directory or "
                        f"pass overwrite (--overwrite) to replace what dglx wrote there")
    _check_replaceable(out, kind, error_cls)


def _check_replaceable(out: Path, kind: DirKind | None, error_cls: type[Exception]) -> None:
    """Refuses ``out`` unless its record proves dglx wrote every file in it."""
    record = read_record(out)
    if record is None:
        listed = describe_unproven(sorted(p.name for p in out.iterdir()))
        raise error_cls(f"{out} holds files no dglx command recorded writing ({listed}; no "
                        f"{RECORD}); refusing to replace it: overwrite only removes what dglx "
                        f"wrote (a directory written before dglx kept records has none: "
                        f"remove it yourself or choose another directory)")
    if kind is not None and record.kind != kind.name:
        raise error_cls(f"{out} is a dglx {record.kind} directory, not {kind.what}; refusing "
                        f"to replace it")
    bad = unproven(out, record)
    if bad:
        raise error_cls(f"{out} holds {len(bad)} file(s) dglx did not write or that changed "
                        f"since ({describe_unproven(bad)}); refusing to replace it: move them "
                        f"out or choose another directory")


def _temp_prefix(out: Path, role: str) -> str:
    return f".{out.name}.{role}-{os.getpid()}@{socket.gethostname()}."


def remove_stale_temporaries(out: str | os.PathLike) -> list[Path]:
    """Removes the temporaries of ``out`` (siblings ``.NAME.tmp-*`` / ``.NAME.old-*``) whose
    creating process ran on this host and is gone; returns what was removed."""
    out = Path(out)
    if not out.parent.is_dir():
        return []
    removed, host = [], socket.gethostname()
    for role in ("tmp", "old"):
        head = f".{out.name}.{role}-"
        for path in out.parent.glob(glob.escape(head) + "*"):
            pid, at, rest = path.name[len(head):].partition("@")
            if not at or not pid.isdigit() or rest.rpartition(".")[0] != host:
                continue  # another host's, or named by an older version: not ours to judge
            if psutil.pid_exists(int(pid)):
                continue
            if role == "tmp":  # a writer's own mkdtemp: everything in it is the writer's
                shutil.rmtree(path, ignore_errors=True)
            else:  # an old directory being replaced: only what its record proves
                _dispose(path, out)
            removed.append(path)
    if removed:
        log.warning("removed %d temporaries of %s left by processes that are gone: %s",
                    len(removed), out, [p.name for p in removed])
    return removed


@contextlib.contextmanager
def atomic_directory(out: str | os.PathLike, overwrite: bool = False,
                     error_cls: type[Exception] = OutputExistsError, *, kind: DirKind,
                     inputs: Sequence[str | os.PathLike] = (),
                     expected_bytes: int | None = None) -> Iterator[Path]:
    """Yields a fresh temporary directory that becomes ``out`` when the block exits cleanly,
    recorded as written by dglx (:mod:`~dglx_dist.data.owned`; a writer that knows its
    files' checksums may write the record itself first).

    Args:
        out: the final directory.
        overwrite: replace an existing ``out`` (only after the new one is complete, and only
            what the old one's record proves dglx wrote, in a ``kind`` directory).
        error_cls: exception raised when ``out`` may not be written (:func:`check_target`).
        kind: what the directory is.
        inputs: what the writer reads; ``out`` may not hold any of it.
        expected_bytes: about how much the writer writes (for the message of a full disk).

    Raises:
        error_cls: checked before anything is written.
        DiskFullError: the disk filled up (naming the directory, what was written, what was
            needed and what is free); the partial output is removed.
    """
    out = Path(out)
    check_target(out, overwrite, kind, inputs, error_cls)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(out)
    tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(out, "tmp"), dir=out.parent))
    try:
        yield tmp
        if read_record(tmp) is None:
            write_record(tmp, kind.name)
    except OSError as exc:
        written = _tree_bytes(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        if exc.errno != errno.ENOSPC:
            raise
        free = shutil.disk_usage(out.parent).free
        need = f"; it needs about {_mib(expected_bytes)}" if expected_bytes else ""
        raise DiskFullError(errno.ENOSPC, f"no space left on the device of {out.parent} while "
                            f"writing {out}: {_mib(written)} were written before it ran "
                            f"out{need} and {_mib(free)} are free now (the partial output "
                            f"was removed); free space there or choose a directory on another "
                            f"disk") from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_directory(tmp, out)


def check_disk(needed: int, out: str | os.PathLike, what: str) -> None:
    """Refuses to write about ``needed`` bytes into ``out`` when its disk has less free,
    before anything is written.

    Raises:
        DiskFullError: naming both sizes and the device's directory."""
    parent = next(p for p in (Path(out).absolute(), *Path(out).absolute().parents) if p.exists())
    free = shutil.disk_usage(parent).free
    if needed > free:
        raise DiskFullError(errno.ENOSPC, f"{what}: {out} needs about {_mib(needed)} on disk "
                            f"but {_mib(free)} are free on the device of {parent}; free space "
                            f"there, choose a directory on another disk, or make it smaller")


def _mib(n: int) -> str:
    if n < _MB:
        return f"{n / 1024:,.0f} KiB"
    return f"{n / _MB:,.1f} MiB" if n < 100 * _MB else f"{n / _MB:,.0f} MiB"


def _tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def replace_directory(tmp: str | os.PathLike, out: str | os.PathLike,
                      record_of: Callable[[Path], Record | None] = read_record) -> None:
    """Renames the finished directory ``tmp`` to ``out`` (a sibling). An existing ``out`` is
    moved aside first, so ``out`` is never a mix of old and new files; then what its record
    (``record_of(dir)``) proves dglx wrote is removed, and anything else is kept in a visible
    sibling ``NAME.kept-...`` (with a warning)."""
    tmp, out = Path(tmp), Path(out)
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=_temp_prefix(out, "old"), dir=out.parent))
        os.rename(out, old / "d")
    os.rename(tmp, out)
    if old is not None:
        _dispose(old, out, record_of)


def _dispose(old: Path, out: Path,
             record_of: Callable[[Path], Record | None] = read_record) -> None:
    """Removes the moved-aside directory ``old/d`` of ``out`` as far as its record proves it
    ours; what is left moves to a visible sibling of ``out``."""
    inner = old / "d"
    whole = inner.is_symlink() or not inner.is_dir()  # a link or file: the user's, whole
    left = remove_recorded(inner, None if whole else record_of(inner))  # never through a link
    if left:
        keep = Path(tempfile.mkdtemp(prefix=f"{out.name}.kept-", dir=out.parent))
        os.rename(inner, keep / out.name)
        what = ("was a link or file dglx did not write" if whole else
                f"held {len(left)} file(s) dglx did not write ({describe_unproven(left)})")
        log.warning("%s %s: kept in %s", out, what, keep)
    with contextlib.suppress(OSError):
        os.rmdir(old)
