"""Shared-memory tensors and raw-byte views, for the distributed store.

A part's tensor lives in a file under ``/dev/shm`` (or the system temp directory where there is
none) named by a per-job token. One rank creates and fills it; the other ranks of the server map
the same file (``mmap``, no pickling, no handle objects); once every rank has mapped it, the
creator unlinks the file, so nothing is left behind even if the job is killed later: the memory
is freed when the last process unmaps it.
"""
from __future__ import annotations

import errno
import math
import mmap
import os
import shutil
import tempfile
from pathlib import Path

import torch

from dglx_dist.errors import DiskFullError, ProtocolError

__all__ = ["default_shm_dir", "create_shared", "attach_shared", "to_bytes", "from_bytes",
           "EMPTY_I64", "EMPTY_U8"]

EMPTY_I64 = torch.zeros(0, dtype=torch.int64)
EMPTY_U8 = torch.zeros(0, dtype=torch.uint8)


def default_shm_dir() -> Path:
    """``/dev/shm`` when it is a writable directory, else the system temp directory."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return shm
    return Path(tempfile.gettempdir())


def _nbytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    return math.prod(shape) * dtype.itemsize


def _map(fd: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    mapping = mmap.mmap(fd, _nbytes(shape, dtype))
    # the tensor keeps a reference to the mapping: it stays mapped as long as the tensor lives
    return torch.frombuffer(mapping, dtype=dtype).view(shape)


def create_shared(path: Path, rows: torch.Tensor) -> torch.Tensor:
    """Creates ``path`` (it must not exist), copies ``rows`` into it, returns the mapped tensor.

    Empty tensors need no file: a plain empty tensor is returned and nothing is created. On
    failure the file is removed again.

    The file's pages are reserved before they are written: on a full tmpfs (a container's
    64 MB ``/dev/shm``) writing into a mapping past its free space would kill the process with
    SIGBUS, where reserving fails with an ``OSError`` that says how much was needed.

    Raises:
        FileExistsError: ``path`` exists (another job's or a stale file: never overwritten).
        DiskFullError: the file system cannot hold the tensor (an ``OSError``).
    """
    shape, dtype = tuple(rows.shape), rows.dtype
    if _nbytes(shape, dtype) == 0:
        return torch.empty(shape, dtype=dtype)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        _reserve(fd, path, _nbytes(shape, dtype))
        tensor = _map(fd, shape, dtype)
        tensor.copy_(rows)
    except BaseException:
        os.unlink(path)  # what this call created, it removes
        raise
    finally:
        os.close(fd)
    return tensor


def _reserve(fd: int, path: Path, nbytes: int) -> None:
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL):  # a file system without fallocate
            os.ftruncate(fd, nbytes)
            return
        free = shutil.disk_usage(path.parent).free
        raise DiskFullError(exc.errno, f"cannot hold {nbytes / 2**20:,.1f} MiB of shared tensor in "
                      f"{path.parent} ({free / 2**20:,.1f} MiB free: {exc.strerror}); expected "
                      f"room for this server's parts: enlarge it (docker run --shm-size) or "
                      f"free it") from None


def attach_shared(path: Path, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Maps the tensor another rank created at ``path``.

    Raises:
        RuntimeError: the file's size is not that of a ``dtype`` tensor of ``shape``.
    """
    if _nbytes(shape, dtype) == 0:
        return torch.empty(shape, dtype=dtype)
    fd = os.open(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        if size != _nbytes(shape, dtype):
            raise ProtocolError(f"shared tensor {path} has {size} bytes; expected "
                                f"{_nbytes(shape, dtype)} for {dtype} of shape {shape}")
        return _map(fd, shape, dtype)
    finally:
        os.close(fd)


def to_bytes(rows: torch.Tensor) -> torch.Tensor:
    """``rows`` as a flat uint8 tensor (a view when contiguous)."""
    return rows.contiguous().reshape(-1).view(torch.uint8)


def from_bytes(buf: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Reinterprets a flat uint8 tensor as ``dtype`` of ``shape`` (copies when misaligned)."""
    if buf.numel() != _nbytes(shape, dtype):
        raise ProtocolError(f"received {buf.numel()} bytes; expected {_nbytes(shape, dtype)} "
                            f"for {dtype} of shape {shape}")
    if buf.storage_offset() % dtype.itemsize:
        buf = buf.clone()
    return buf.view(dtype).view(shape)
