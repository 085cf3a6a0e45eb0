"""The partition cache (``--cache-dir``, default ``./dglx-partitions``): what it may hold, what
is in it, and keeping it bounded.

It holds recorded directories only (:mod:`~dglx_dist.data.owned`): the graphs
:func:`~dglx_dist.api.distribute` was given, written as datasets, and the partitions made for
runs; besides them rank 0's failure reports, writers' temporaries and the lock files that
let jobs sharing the cache make each entry once (:func:`making`). A run that reuses an
entry touches it (its directory's modification time is its last use). After rank 0 adds an
entry, the least recently used others go while the cache is above its size limit
(``DGLX_CACHE_MAX_GB``, default 20) or unused for longer than its age limit
(``DGLX_CACHE_MAX_DAYS``, default 30); an entry used within the last hour is never removed (a
job may be reading it). An entry goes whole, or not at all when it holds anything its record
does not prove dglx wrote (a warning names it).
``dglx cache ls`` and ``dglx cache clear`` show and empty it by hand.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import logging
import os
import re
import time
from pathlib import Path
from typing import Iterator, Mapping

from dglx_dist.data.nolinks import open_own
from dglx_dist.data.owned import (describe_unproven, flock_within, read_record, remove_recorded,
                                  unproven)
from dglx_dist.errors import DeadlineError, InvalidValueError, LinkedFileError, OutputExistsError

__all__ = ["CacheEntry", "CacheLimits", "check_cache_dir", "entries", "touch", "prune", "clear",
           "making"]

log = logging.getLogger(__name__)

# what a cache directory holds besides recorded directories: rank 0's failure reports and
# their temporaries, writers' temporaries, what a replacement kept of a user's files, and the
# lock files of entries being made
_CACHE_NAMES = re.compile(r"^(.+\.failed(\.[0-9a-f]{16})?|\..+\.(tmp|old)-.+|.+\.kept-.+|"
                          r"\..+\.lock)$")
_IN_USE_S = 3600.0  # an entry used this recently may be open in a running job


@dataclasses.dataclass(frozen=True)
class CacheEntry:
    """One recorded directory of the cache."""

    path: Path
    kind: str
    bytes: int
    last_used: float  # seconds since the epoch


@dataclasses.dataclass(frozen=True)
class CacheLimits:
    """When :func:`prune` removes entries.

    Attributes:
        max_bytes: the cache's size above which the least recently used entries go.
        max_age_s: entries unused for longer go.
    """

    max_bytes: int = 20 << 30
    max_age_s: float = 30 * 86400.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> "CacheLimits":
        """``DGLX_CACHE_MAX_GB`` and ``DGLX_CACHE_MAX_DAYS`` over the defaults."""
        values = {}
        for var, field, scale in (("DGLX_CACHE_MAX_GB", "max_bytes", 1 << 30),
                                  ("DGLX_CACHE_MAX_DAYS", "max_age_s", 86400.0)):
            text = environ.get(var)
            if text is None:
                continue
            try:
                value = float(text)
            except ValueError:
                value = -1.0
            if not value >= 0:
                raise InvalidValueError(f"{var}={text!r}; expected a number >= 0")
            values[field] = type(getattr(cls, field))(value * scale)
        return cls(**values)


def _lock_of(entry: Path) -> Path:
    return entry.with_name(f".{entry.name}.lock")


@contextlib.contextmanager
def making(entry: Path, timeout: float) -> Iterator[None]:
    """Holds the cache entry ``entry``'s lock (``.NAME.lock`` beside it, an exclusive
    ``flock``) while this process makes it, so that jobs sharing the cache make each entry
    once: one that finds the lock held waits for it, then finds the entry made. Waits at most
    ``timeout`` seconds (DeadlineError naming the lock)."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    lock = _lock_of(entry)
    fd = open_own(lock)  # never a link planted under the lock's name
    try:
        if not flock_within(fd, timeout, pause=0.2):
            raise DeadlineError(f"waited {timeout:.0f}s for another job making {entry} "
                                f"(it holds {lock}); is that job stuck?")
        yield
    finally:
        os.close(fd)  # releases the lock


def check_cache_dir(cache_dir: str | os.PathLike) -> None:
    """Refuses a cache directory that is a file or holds anything dglx did not put there.

    Raises:
        OutputExistsError: naming the directory and what it holds.
    """
    cache = Path(cache_dir)
    if cache.exists() and not cache.is_dir():
        raise OutputExistsError(f"--cache-dir {cache} is a file; expected a directory (dglx "
                                f"keeps partitions and graphs there)")
    if not cache.is_dir():
        return
    foreign = sorted(p.name for p in cache.iterdir()
                     if not (_CACHE_NAMES.match(p.name) or (p.is_dir() and not p.is_symlink()
                                                            and read_record(p) is not None)))
    if foreign:
        raise OutputExistsError(f"--cache-dir {cache} holds {describe_unproven(foreign)}, "
                                f"which dglx did not write; choose an empty or new directory "
                                f"for the cache")


def entries(cache_dir: str | os.PathLike) -> list[CacheEntry]:
    """The cache's recorded directories, least recently used first."""
    cache = Path(cache_dir)
    found = []
    for path in sorted(cache.iterdir()) if cache.is_dir() else ():
        record = None if path.is_symlink() or not path.is_dir() else read_record(path)
        if record is not None:
            size = sum(int(f.get("bytes", 0)) for f in record.files.values())
            found.append(CacheEntry(path, record.kind, size, path.stat().st_mtime))
    return sorted(found, key=lambda e: e.last_used)


def touch(entry: str | os.PathLike) -> None:
    """Marks ``entry`` as used now (its directory's modification time)."""
    try:
        os.utime(entry)
    except OSError:  # a read-only cache: its entries age, nothing is removed on their account
        pass


def _remove(entry: CacheEntry) -> bool:
    """Removes ``entry`` whole, or (when anything in it is not provably dglx's) not at all."""
    record = read_record(entry.path)
    left = unproven(entry.path, record) or remove_recorded(entry.path, record)
    if left:
        log.warning("cache: kept %s: it holds %s, which its record does not list", entry.path,
                    describe_unproven(left))
    else:
        _drop_lock(entry.path)
    return not left


def _drop_lock(entry: Path) -> None:
    """Removes a removed entry's lock file (:func:`making`), unless a job holds it."""
    lock = _lock_of(entry)
    try:
        fd = open_own(lock, create=False)
    except (OSError, LinkedFileError):  # none, or a link someone planted: not ours to remove
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.unlink()
    except OSError:  # held by a job making the entry again
        pass
    finally:
        os.close(fd)


def prune(cache_dir: str | os.PathLike, limits: CacheLimits,
          keep: tuple[Path, ...] = ()) -> list[Path]:
    """Removes the least recently used entries while the cache is over ``limits.max_bytes``,
    and every entry unused for longer than ``limits.max_age_s``; never ``keep`` nor one used
    within the last hour. Returns what was removed."""
    now = time.time()
    found = entries(cache_dir)
    total = sum(e.bytes for e in found)
    keep = {Path(k).resolve() for k in keep}
    removed = []
    for entry in found:  # least recently used first
        idle = now - entry.last_used
        if entry.path.resolve() in keep or idle < _IN_USE_S:
            continue
        if (total > limits.max_bytes or idle > limits.max_age_s) and _remove(entry):
            total -= entry.bytes
            removed.append(entry.path)
    if removed:
        log.info("cache %s: removed %d entries unused longest (%s); %.1f GiB left", cache_dir,
                 len(removed), ", ".join(p.name for p in removed), total / (1 << 30))
    return removed


def clear(cache_dir: str | os.PathLike, older_than_s: float = 0.0) -> list[Path]:
    """Removes every entry unused for longer than ``older_than_s`` (all by default), as far as
    its record proves it dglx's. Returns what was removed."""
    now = time.time()
    return [e.path for e in entries(cache_dir)
            if now - e.last_used >= older_than_s and _remove(e)]
