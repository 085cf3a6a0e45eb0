"""What a dglx command can prove it wrote: the record every output directory ends with.

``.dglx-written.json`` lists the kind of directory and every file the command wrote, with its
size and SHA-256; replacing or removing the directory removes only the listed files whose
bytes still hash to it (docs/reliability.md, "Files dglx writes, and what it may delete").
A subdirectory with a record of its own is judged by it; checkpoints carry the same in their
``manifest.json`` (a :class:`Record` named so); a file a later command adds is ours only once
added with its checksum (:func:`add_to_record`). Proof rests on listed names with their size
and checksum, never on a pattern (an older record's ``derived`` proves nothing), and a
directory without a record is refused by ``--overwrite``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

from dglx_dist.data.nolinks import replace_file

__all__ = ["RECORD", "Record", "sha256_file", "write_record", "add_to_record", "read_record",
           "unproven", "remove_recorded", "describe_unproven", "flock_within"]

RECORD = ".dglx-written.json"
_FORMAT = "dglx-written"
_MAX_RECORD_BYTES = 64 << 20
_LOCK_WAIT_S = 10.0  # an update holds the lock for milliseconds; past this, go on unlocked


@dataclasses.dataclass(frozen=True)
class Record:
    """The files a dglx command wrote in one directory.

    Attributes:
        kind: what the directory is ("dataset", "partition", "bench", "export", "checkpoint").
        files: relative POSIX path -> ``{"bytes": int, "sha256": hex}``.
        name: the file holding the record itself (also ours).
    """

    kind: str
    files: Mapping[str, Mapping[str, Any]]
    name: str = RECORD

    def proves(self, directory: Path, rel: str) -> bool:
        """Whether the file ``directory/rel`` is provably dglx's: the record itself, or a
        listed one whose size and SHA-256 still match."""
        return rel == self.name or _matches(Path(directory) / rel, self.files.get(rel))


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _walk(top: Path) -> Iterator[tuple[str, Path, Record | None]]:
    """``(relative path, path, nested record)`` of every entry under ``top`` that is not a
    directory, without following links; a subdirectory holding its own record is one entry
    (its path, its record) and is not entered."""
    for dirpath, dirnames, filenames in os.walk(top):
        here = Path(dirpath)
        for d in list(dirnames):
            sub = here / d
            nested = None if sub.is_symlink() else read_record(sub)
            if sub.is_symlink() or nested is not None:
                dirnames.remove(d)
                yield sub.relative_to(top).as_posix(), sub, nested
        for f in filenames:
            path = here / f
            yield path.relative_to(top).as_posix(), path, None


def write_record(directory: str | os.PathLike, kind: str,
                 known: Mapping[str, Mapping[str, Any]] | None = None,
                 only: tuple[str, ...] | None = None) -> Record:
    """Records every file now under ``directory`` as written by dglx (hashing those not in
    ``known``), or with ``only``, adds just those files (relative paths) to the record there
    is (one of them gone is dropped from it); subdirectories with a record of their own are
    left to it (a file added later is recorded by its writer: :func:`add_to_record`).
    Written atomically."""
    directory, known = Path(directory), dict(known or {})
    old = read_record(directory) if only is not None else None
    files: dict[str, dict[str, Any]] = dict(old.files) if old is not None else {}
    for rel in only or ():
        files.pop(rel, None)
    for rel, path, nested in _walk(directory):
        if nested is not None or rel == RECORD or path.is_symlink() \
                or (only is not None and rel not in only):
            continue
        size = path.stat().st_size
        entry = known.get(rel)
        if entry is None or entry.get("bytes") != size:
            entry = {"bytes": size, "sha256": sha256_file(path)}
        files[rel] = {"bytes": int(entry["bytes"]), "sha256": str(entry["sha256"])}
    _write(directory, kind, files)
    return Record(kind, files)


def _write(directory: Path, kind: str, files: Mapping[str, Mapping[str, Any]]) -> None:
    body = {"format": _FORMAT, "kind": kind, "files": files}
    replace_file(directory / RECORD, json.dumps(body, indent=1, sort_keys=True))


def add_to_record(directory: str | os.PathLike, rels: tuple[str, ...]) -> bool:
    """Adds the files ``rels`` (relative paths) that a command wrote into ``directory``
    after its record to that record, each with its size and SHA-256 as it is now (a file
    gone is dropped from it), unless the record already proves them all.

    Writers in several processes add under a lock on the directory, so none loses another's
    entry; where the filesystem has no locks (some network mounts) a lost entry leaves a
    file unproven (kept by ``--overwrite``) until its writer adds it again.

    Returns:
        Whether the record now lists them: False without a record (nothing in such a
        directory is proven) or where it cannot be written."""
    directory = Path(directory)
    record = read_record(directory)
    if record is None:
        return False
    if all(record.proves(directory, rel) for rel in rels):
        return True
    try:
        with _locked(directory):
            record = read_record(directory)  # again: another writer may have added since
            if record is None:
                return False
            write_record(directory, record.kind, only=tuple(rels))
    except OSError:
        return False
    return True


def flock_within(fd: int, seconds: float, pause: float = 0.01) -> bool:
    """Takes an exclusive ``flock`` on the open file ``fd``, trying every ``pause`` seconds
    for at most ``seconds`` (0: once); False when another holder kept it that long.

    Raises:
        OSError: the filesystem has no locks (ENOLCK, EOPNOTSUPP)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``directory`` while the block runs, where the filesystem
    grants one within :data:`_LOCK_WAIT_S` (local filesystems do); else the block runs
    unlocked rather than wait on a holder that may never let go."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):  # no locks on this filesystem
            flock_within(fd, _LOCK_WAIT_S)
        yield
    finally:
        os.close(fd)  # releases the lock


def read_record(directory: str | os.PathLike) -> Record | None:
    """``directory``'s record, or None when it has none (or one that does not parse: nothing
    is proven by a damaged record)."""
    path = Path(directory) / RECORD
    try:
        if not path.is_file() or path.stat().st_size > _MAX_RECORD_BYTES:
            return None
        body = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(body, dict) or body.get("format") != _FORMAT:
        return None
    files, kind = body.get("files"), body.get("kind")
    if not (isinstance(files, dict) and isinstance(kind, str)):
        return None
    # an earlier version's "derived" patterns are not read: a pattern proves nothing
    return Record(kind, files)


def _matches(path: Path, entry: Any) -> bool:
    """Whether ``entry`` names ``path``'s size and SHA-256 (an entry lacking either, or
    with another type, proves nothing)."""
    if not (isinstance(entry, Mapping) and isinstance(entry.get("sha256"), str)
            and isinstance(entry.get("bytes"), int)) or path.is_symlink() or not path.is_file():
        return False
    try:
        return (path.stat().st_size == entry.get("bytes")
                and sha256_file(path) == entry.get("sha256"))
    except OSError:
        return False


def unproven(directory: str | os.PathLike, record: Record | None) -> list[str]:
    """The entries under ``directory`` that no record proves dglx wrote (sorted relative
    paths): unlisted, changed since, links, or under a nested directory's own record."""
    directory = Path(directory)
    bad = []
    for rel, path, nested in _walk(directory):
        if nested is not None:
            bad += [f"{rel}/{r}" for r in unproven(path, nested)]
        elif record is None or not record.proves(directory, rel):
            bad.append(rel)
    return sorted(bad)


def describe_unproven(bad: list[str], limit: int = 3) -> str:
    """``a, b, c and 4 more`` for a message."""
    head = ", ".join(bad[:limit])
    return head + (f" and {len(bad) - limit} more" if len(bad) > limit else "")


def remove_recorded(directory: str | os.PathLike, record: Record | None) -> list[str]:
    """Removes what ``record`` proves dglx wrote under ``directory`` (files whose bytes still
    match it, the record; nested records likewise), then the directories left
    empty, ``directory`` included. Returns what is left, as :func:`unproven` names it."""
    directory = Path(directory)
    if directory.is_symlink() or not directory.is_dir():  # never delete through a link
        return ["."] if os.path.lexists(directory) else []
    left, last = [], None
    for rel, path, nested in _walk(directory):
        if nested is not None:
            left += [f"{rel}/{r}" for r in remove_recorded(path, nested)]
        elif record is not None and rel == record.name:
            last = path  # removed last: an interrupted removal can be proven and resumed
        elif record is not None and record.proves(directory, rel):
            path.unlink()
        else:
            left.append(rel)
    if last is not None:
        last.unlink()
    for dirpath, _, _ in sorted(os.walk(directory), key=lambda t: -len(t[0])):
        try:
            os.rmdir(dirpath)  # only empty ones go
        except OSError:
            pass
    return sorted(left)
