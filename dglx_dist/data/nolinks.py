"""Files dglx creates or rewrites in a directory a user names, never through a link.

A directory a user names (``--checkpoint-dir``, ``--cache-dir``, a partition or bench
directory) may hold a link someone else planted under a name dglx uses: a symbolic link, or a
hard link (a second name of the user's file). Writing through it would change a file dglx
did not create. So every such write takes one of three forms (docs/reliability.md, "Files
dglx writes, and what it may delete"), as git and rsync write theirs:

- a new file: created with ``O_EXCL | O_NOFOLLOW`` (:func:`create_new`), which never opens
  what is already there;
- a whole file rewritten: written under a fresh name beside it and renamed over it
  (:func:`replacing`), so the bytes of any other name of the old file stay as they were;
- a file kept open and rewritten in place (a lock's record): opened with ``O_NOFOLLOW`` and
  used only when it is a regular file with this one name (:func:`open_own`).

A link found where dglx writes is refused in one line (:class:`LinkedFileError`) naming it;
the link and what it points to are left as they were.
"""
from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path
from typing import IO, Iterator

from dglx_dist.errors import LinkedFileError, OutputExistsError

__all__ = ["create_new", "open_new", "replacing", "replace_file", "open_own"]

_NEW = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _refusal(path: Path, st: os.stat_result) -> LinkedFileError | None:
    """The refusal for writing ``path`` as ``st`` found it (from ``lstat``), or None when it
    is a regular file with one name."""
    if stat.S_ISLNK(st.st_mode):
        try:
            target = f" (to {os.readlink(path)})"
        except OSError:
            target = ""
        return LinkedFileError(f"{path} is a symbolic link{target} that dglx did not make; it "
                               f"does not write through links: remove the link (what it points "
                               f"to is left as it is) or choose another directory")
    if not stat.S_ISREG(st.st_mode):
        return LinkedFileError(f"{path} is not a regular file (mode {stat.filemode(st.st_mode)})"
                               f"; dglx writes only its own files there: remove it or choose "
                               f"another directory")
    if st.st_nlink > 1:
        return LinkedFileError(f"{path} is a hard link: the same file has {st.st_nlink} names, "
                               f"and dglx does not write into a file with other names: remove "
                               f"this name (the others keep the file) or choose another "
                               f"directory")
    return None


def _raise_if_linked(path: Path, hard_links: bool = True) -> None:
    """Raises :class:`LinkedFileError` where ``path`` exists and is a link (or no regular
    file; a hard link only with ``hard_links``: one that is replaced by a new file is no write
    through it); a missing path passes."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    refusal = _refusal(path, st)
    if refusal is not None and (hard_links or stat.S_ISLNK(st.st_mode)
                                or not stat.S_ISREG(st.st_mode)):
        raise refusal


def create_new(path: str | os.PathLike, mode: int = 0o644, flags: int = os.O_WRONLY) -> int:
    """A file descriptor of the new file ``path``, which must not exist yet (not even as a
    link).

    Raises:
        LinkedFileError: ``path`` is a link.
        FileExistsError: ``path`` is a file already.
    """
    try:
        return os.open(path, flags | _NEW, mode)
    except FileExistsError:
        _raise_if_linked(Path(path))
        raise


def open_new(path: str | os.PathLike, mode: str = "wb") -> IO:
    """The new file ``path`` (:func:`create_new`) as a file object opened with ``mode``."""
    return os.fdopen(create_new(path), mode)


@contextlib.contextmanager
def replacing(path: str | os.PathLike, mode: str = "wb",
              fsync: bool = False) -> Iterator[IO]:
    """Yields a file object under a fresh name beside ``path`` (``.NAME.tmp-*``) that
    replaces ``path`` atomically when the block exits cleanly (removed when it does not).
    Another name of the old file keeps its bytes.

    Raises:
        LinkedFileError: ``path`` is a symbolic link (replacing it would remove the link) or
            no regular file; checked before anything is written.
    """
    path = Path(path)
    _raise_if_linked(path, hard_links=False)
    fd, tmp = _fresh_beside(path)
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        _raise_if_linked(path, hard_links=False)  # planted while the block ran
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _fresh_beside(path: Path, tries: int = 100) -> tuple[int, Path]:
    """A new file ``.NAME.tmp-RANDOM`` beside ``path`` (``O_EXCL``: never one that exists;
    mode 0666 less the umask, as ``open`` gives)."""
    for _ in range(tries):
        tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(6)}")
        try:
            return os.open(tmp, os.O_WRONLY | _NEW, 0o666), tmp
        except FileExistsError:
            continue
    raise OutputExistsError(f"no fresh temporary name beside {path} in {tries} tries: is "
                            f"something making files of these names there?")


def replace_file(path: str | os.PathLike, data: bytes | str, fsync: bool = False) -> None:
    """Writes ``data`` as the whole of ``path`` (:func:`replacing`)."""
    with replacing(path, "w" if isinstance(data, str) else "wb", fsync) as f:
        f.write(data)


def open_own(path: str | os.PathLike, mode: int = 0o644, create: bool = True) -> int:
    """A read-write file descriptor of ``path``, created where missing (unless not
    ``create``), that is a regular file with this one name: a file dglx made and may rewrite
    in place or remove (a lock).

    Raises:
        LinkedFileError: ``path`` is a symbolic or hard link, or no regular file (closed
            again: nothing was written).
        OSError: ``path`` cannot be opened or created (missing, without ``create``).
    """
    path = Path(path)
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags | (os.O_CREAT if create else 0), mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symbolic link
            _raise_if_linked(path)
        raise
    refusal = _refusal(path, os.fstat(fd))
    if refusal is not None:
        os.close(fd)
        raise refusal
    return fd
