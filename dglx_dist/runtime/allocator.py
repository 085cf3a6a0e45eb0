"""Keeping freed memory for reuse: the C allocator setting a training process starts with
(``DGLX_MALLOC``; why and what it saved: docs/benchmarks.md, "The allocator").

``keep`` (the default) asks glibc, through ``mallopt``, to serve every allocation from its heap
and to trim the heap only beyond 2 GiB of free memory at its top, so memory freed in one step
is reused by the next. ``system`` leaves the allocator alone (glibc's defaults, as a plain DGL
script runs). Where the C library has no ``mallopt``, ``keep`` changes nothing and says so.
"""
from __future__ import annotations

import ctypes
import logging

from dglx_dist.errors import InvalidValueError

__all__ = ["MALLOC_MODES", "configure_malloc", "release_free_memory"]

log = logging.getLogger(__name__)
MALLOC_MODES = ("keep", "system")
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's mallopt parameter numbers
_TRIM_AT = 2**31 - 1  # mallopt takes an int: trim only beyond 2 GiB of free heap top


def configure_malloc(mode: str) -> bool:
    """Applies ``mode`` (one of :data:`MALLOC_MODES`) to this process's C allocator; returns
    whether the allocator was changed."""
    if mode not in MALLOC_MODES:
        raise InvalidValueError(f"DGLX_MALLOC={mode!r}; expected one of {list(MALLOC_MODES)}")
    if mode == "system":
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        log.info("DGLX_MALLOC=keep: this C library has no mallopt; allocator left as it is")
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    ok = mallopt(_M_MMAP_MAX, 0) == 1 and mallopt(_M_TRIM_THRESHOLD, _TRIM_AT) == 1
    if not ok:
        log.warning("DGLX_MALLOC=keep: mallopt refused the setting; allocator left as it is")
    return ok


def release_free_memory() -> None:
    """Hands freed memory back to the system, for a process that goes on running after a
    large transient job (a launcher that partitioned a graph before starting its trainers):
    pyarrow's memory pool keeps what Parquet reads and writes freed, and glibc's heap what
    numpy and torch freed (``malloc_trim``)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim.argtypes, trim.restype = (ctypes.c_size_t,), ctypes.c_int
        trim(0)
