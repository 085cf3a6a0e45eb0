"""Whole-directory atomic writes and file checksums.

Writers build the directory under a temporary sibling name and rename it into place at the end,
so an interrupted write never leaves a directory that loads as if complete, and an existing
directory is only replaced once its successor is fully written.

Replacing is guarded: a writer names the :class:`DirKind` it makes, and ``overwrite`` replaces
only a directory of that kind (its marker file says so) that does not hold the writer's
input; anything else is refused with the reason, so nothing a user had is deleted by a
mistyped path. Temporaries are named ``.NAME.tmp-PID@HOST.*`` (and ``.NAME.old-...`` while
an old directory is being replaced), so the next writer into the same ``NAME`` removes those
whose creating process on this host is gone (a run killed with SIGKILL leaves its temporary
behind).
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import glob
import hashlib
import json
import logging
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Iterator, Sequence

import psutil

from dglx_dist.errors import DiskFullError, OutputExistsError

__all__ = ["DirKind", "atomic_directory", "check_target", "replace_directory",
           "remove_stale_temporaries", "sha256_file"]

log = logging.getLogger(__name__)
_MB = 1 << 20


@dataclasses.dataclass(frozen=True)
class DirKind:
    """A kind of directory a writer makes, recognised by a marker file in it.

    Attributes:
        what: how messages name it ("a dglx dataset directory").
        marker: the file every such directory holds.
        fmt: when set, the marker is a JSON object whose ``format`` field has this value.
    """

    what: str
    marker: str
    fmt: str | None = None

    def holds(self, path: Path) -> bool:
        """Whether ``path`` is a directory of this kind."""
        marker = Path(path) / self.marker
        if not marker.is_file():
            return False
        if self.fmt is None:
            return True
        try:
            value = json.loads(marker.read_text())
        except (OSError, ValueError):
            return False
        return isinstance(value, dict) and value.get("format") == self.fmt


def check_target(out: str | os.PathLike, overwrite: bool, kind: DirKind | None = None,
                 inputs: Sequence[str | os.PathLike] = (),
                 error_cls: type[Exception] = OutputExistsError) -> None:
    """Refuses an output directory that would lose something (checked before any work).

    Args:
        out: the directory to write.
        overwrite: whether an existing ``out`` may be replaced.
        kind: what ``out`` must already be for ``overwrite`` to replace it (None: anything).
        inputs: paths the writer reads; ``out`` may be none of them nor hold one.
        error_cls: the exception raised.
    """
    out = Path(out)
    target = out.resolve()
    for source in inputs:
        source = Path(source).resolve()
        if target == source or target in source.parents:
            raise error_cls(f"{out}: the output directory would hold the input {source}; "
                            f"choose a directory outside it")
    if not out.exists() and not out.is_symlink():
        return
    if not overwrite:
        raise error_cls(f"{out} already exists; choose another directory or pass overwrite "
                        f"(--overwrite) to replace it")
    if not out.is_dir() or out.is_symlink():
        raise error_cls(f"{out} exists and is not a directory; refusing to replace it")
    if kind is not None and not kind.holds(out):
        fmt = f" of format {kind.fmt!r}" if kind.fmt else ""
        raise error_cls(f"{out} exists and is not {kind.what} (no {kind.marker}{fmt} in it); "
                        f"refusing to replace it: overwrite only replaces {kind.what}")


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
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    if removed:
        log.warning("removed %d temporaries of %s left by processes that are gone: %s",
                    len(removed), out, [p.name for p in removed])
    return removed


@contextlib.contextmanager
def atomic_directory(out: str | os.PathLike, overwrite: bool = False,
                     error_cls: type[Exception] = OutputExistsError, kind: DirKind | None = None,
                     inputs: Sequence[str | os.PathLike] = (),
                     expected_bytes: int | None = None) -> Iterator[Path]:
    """Yields a fresh temporary directory that becomes ``out`` when the block exits cleanly.

    Args:
        out: the final directory.
        overwrite: replace an existing ``out`` (only after the new one is complete, and only
            when it is of ``kind``).
        error_cls: exception raised when ``out`` may not be written (:func:`check_target`).
        kind: what an existing ``out`` must be to be replaced.
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
    except OSError as exc:
        written = _tree_bytes(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        if exc.errno != errno.ENOSPC:
            raise
        free = shutil.disk_usage(out.parent).free
        need = f"; it needs about {expected_bytes / _MB:,.0f} MiB" if expected_bytes else ""
        raise DiskFullError(errno.ENOSPC, f"no space left on the device of {out.parent} while "
                            f"writing {out}: {written / _MB:,.1f} MiB were written before it "
                            f"ran out{need} and {free / _MB:,.0f} MiB are free now (the "
                            f"partial output was removed); free space there or choose a "
                            f"directory on another disk") from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_directory(tmp, out)


def _tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def replace_directory(tmp: str | os.PathLike, out: str | os.PathLike) -> None:
    """Renames the finished directory ``tmp`` to ``out`` (a sibling). An existing ``out`` is
    moved aside first and removed after, so ``out`` is never a mix of old and new files."""
    tmp, out = Path(tmp), Path(out)
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=_temp_prefix(out, "old"), dir=out.parent))
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
