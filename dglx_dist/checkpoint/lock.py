"""One job per checkpoint directory: the job using it holds ``.dglx-job.lock`` in it
(docs/reliability.md).

Rank 0 of a job takes an exclusive ``flock`` on the lock file before it checks the directory
and holds it for the job's life, as :func:`dglx_dist.cache.making` locks a cache entry; the
operating system drops it when the process ends, so a crashed job leaves no stale lock. The
file records who holds it (host, pid, start time, command line, as JSON), so a second job is
refused in one line that names the first. The file is never a link: one planted under its
name is refused (:func:`~dglx_dist.data.nolinks.open_own`), not written through. A clean release removes the file. Where a shared
filesystem does not support ``flock``, the job goes on unlocked with a warning.
"""
from __future__ import annotations

import errno
import json
import logging
import os
import shlex
import socket
import sys
import time
from pathlib import Path

from dglx_dist.checkpoint.files import LOCK_FILE, make_root
from dglx_dist.data.nolinks import open_own
from dglx_dist.data.owned import flock_within
from dglx_dist.errors import CheckpointError, LinkedFileError

__all__ = ["JobLock", "LOCK_FILE"]

log = logging.getLogger(__name__)

_RECORD_BYTES = 4096  # a record is a pid, a host, a time and a command line
_COMMAND_CHARS = 120  # of the holder's command line in a refusal
_READ_TRIES, _READ_PAUSE_S = 10, 0.1  # a holder writes its record right after locking
_OPEN_TRIES = 5  # a file its holder removed while we opened it is opened anew


def _this_job() -> bytes:
    """The record a holder writes: who it is, for the job it refuses."""
    argv = list(getattr(sys, "orig_argv", sys.argv))
    command = shlex.join([os.path.basename(argv[0]), *argv[1:]]) if argv else ""
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                       "started": time.time(), "command": command[:_RECORD_BYTES // 2]}).encode()


def _describe(record: dict) -> str:
    """``pid P on host H, started T: COMMAND`` of a holder's record."""
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(record["started"])))
    command = str(record.get("command", ""))
    if len(command) > _COMMAND_CHARS:
        command = command[:_COMMAND_CHARS - 3] + "..."
    return (f"pid {int(record['pid'])} on host {record['host']}, started {started}"
            + (f": {command}" if command else ""))


def _holder(fd: int, path: Path) -> str:
    """Who holds the lock on ``fd``, from its record (waiting briefly for a holder that has
    just taken it to write one)."""
    for _ in range(_READ_TRIES):
        try:
            return _describe(json.loads(os.pread(fd, _RECORD_BYTES, 0)))
        except (ValueError, KeyError, TypeError, OverflowError, OSError):
            time.sleep(_READ_PAUSE_S)
    return f"its record in {path} is unreadable"


def _unusable(path: Path, verb: str, exc: OSError) -> CheckpointError:
    return CheckpointError(f"--checkpoint-dir {path.parent}: cannot {verb} its lock file "
                           f"{path.name} ({exc.strerror or exc}); choose a writable directory")


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (a holder removes it on release)."""
    try:
        here, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


class JobLock:
    """This job's hold on a checkpoint directory (rank 0's); :meth:`release` ends it.

    Attributes:
        path: the lock file.
    """

    def __init__(self, path: Path, fd: int | None):
        self.path, self._fd = path, fd

    @classmethod
    def take(cls, root: str | os.PathLike) -> "JobLock":
        """Creates ``root`` where it does not exist (:func:`make_root`) and locks it for this
        job; where the filesystem has no ``flock``, a lock holding nothing (with a warning).

        Raises:
            CheckpointError: another job holds it (the message names that job), or ``root``
                cannot be made or written.
        """
        make_root(root)
        path = Path(root) / LOCK_FILE
        for _ in range(_OPEN_TRIES):
            fd = cls._open(path)
            try:
                locked = flock_within(fd, 0)
            except OSError as exc:  # ENOLCK, EOPNOTSUPP: a filesystem without flock
                os.close(fd)
                log.warning("cannot lock %s (%s): a second job using %s would not be noticed",
                            path, exc.strerror or exc, root)
                return cls(path, None)
            if not locked:
                holder = _holder(fd, path)
                os.close(fd)
                raise CheckpointError(f"--checkpoint-dir {root} is in use by another job "
                                      f"({holder}): wait for it to end or choose another "
                                      f"directory")
            if _same_file(fd, path):
                return cls._holding(path, fd)
            os.close(fd)  # released and removed by its holder while we opened it
        raise CheckpointError(f"{path} was replaced {_OPEN_TRIES} times while this job locked "
                              f"it; are jobs starting in a loop on {root}?")

    @classmethod
    def _holding(cls, path: Path, fd: int) -> "JobLock":
        """The lock on ``fd``, once this job's record is in the file (replacing an earlier
        job's, which a crash leaves)."""
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, _this_job(), 0)
        except OSError as exc:
            os.close(fd)
            raise _unusable(path, "write", exc) from None
        return cls(path, fd)

    @staticmethod
    def _open(path: Path) -> int:
        """The lock file, never a link someone planted under its name (:func:`open_own`)."""
        try:
            return open_own(path)
        except LinkedFileError as exc:
            raise CheckpointError(f"--checkpoint-dir {path.parent}: its lock file: {exc}") \
                from None
        except OSError as exc:
            raise _unusable(path, "open", exc) from None

    @property
    def held(self) -> bool:
        """Whether this lock still holds its directory."""
        return self._fd is not None

    def release(self) -> None:
        """Removes the lock file and lets the directory go (idempotent)."""
        if self._fd is None:
            return
        try:
            # removed while still held: a job that opened it meanwhile finds it gone once it
            # has the lock, and opens a new one (take)
            if _same_file(self._fd, self.path):
                self.path.unlink()
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                log.warning("cannot remove %s (%s); the next job takes it over", self.path,
                            exc.strerror or exc)
        finally:
            os.close(self._fd)
            self._fd = None
