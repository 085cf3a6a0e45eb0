"""Executors run tensor-task payloads somewhere else: local worker processes or AWS Lambda.

An executor turns a request payload (``tensor_fn.payload``) into a future of the response
payload. It does not retry: :class:`~dglx_dist.offload.controller.TaskController` times,
aborts and relaunches invocations. Executors are plug-ins in :data:`EXECUTORS`::

    with EXECUTORS.build("local", workers=4) as ex:
        response = ex.invoke(request).result()

Failures come in two kinds: :class:`InvocationError` (the function rejected the request; a
retry fails the same way) and :class:`WorkerLost` (died, aborted, unreachable; retryable).
"""
from __future__ import annotations

import abc
import concurrent.futures
import dataclasses
import threading
from typing import Any

from dglx_dist.errors import DglxError, InvalidTypeError, StateError
from dglx_dist.registry import Registry

__all__ = ["Executor", "EXECUTORS", "InvocationError", "WorkerLost", "ExecutorCounters"]

EXECUTORS: Registry["Executor"] = Registry("executor", entry_point_group="dglx_dist.executors")
"""The executor registry for Dorylus's tensor tasks (``local``, ``aws``, ``inline``)."""


class InvocationError(DglxError, RuntimeError):
    """The function returned an error for this request (not worth retrying)."""


class WorkerLost(DglxError, RuntimeError):
    """The worker running an invocation died, was aborted or was unreachable (retryable)."""


@dataclasses.dataclass
class ExecutorCounters:
    """Thread-safe running totals every executor reports through ``stats()``."""

    invocations: int = 0
    worker_restarts: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    busy_s: float = 0.0
    errors: int = 0
    lost: int = 0
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def add(self, **amounts: float) -> None:
        """Adds ``amounts`` to the named counters."""
        with self._lock:
            for name, amount in amounts.items():
                setattr(self, name, getattr(self, name) + amount)

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                    if not f.name.startswith("_")}


class Executor(abc.ABC):
    """Base class of executors.

    Lifecycle: ``start()`` (idempotent; ``invoke`` calls it if needed), any number of
    ``invoke`` calls, ``close()`` (idempotent). An executor is also a context manager that
    starts on enter and closes on exit. ``invoke`` and ``abort`` may be called from any thread.

    Subclasses have a nested frozen ``Config`` with at least ``memory_mb``.
    """

    Config: type
    def __init__(self, config: Any, name: str = ""):
        self.config, self.registered_name = config, name
        self.counters = ExecutorCounters()
        self._lock = threading.Lock()
        self._closed = False

    @property
    @abc.abstractmethod
    def capacity(self) -> int:
        """The most invocations that run at once; more are queued by the executor."""

    @abc.abstractmethod
    def start(self) -> None:
        """Acquires workers or clients; calling it again does nothing."""

    @abc.abstractmethod
    def invoke(self, request: bytes) -> concurrent.futures.Future:
        """Starts one invocation without blocking.

        Returns:
            A future of the response payload (bytes); it fails with :class:`InvocationError`
            or :class:`WorkerLost` (module docstring).

        Raises:
            RuntimeError: the executor is closed.
        """

    @abc.abstractmethod
    def abort(self, future: concurrent.futures.Future) -> None:
        """Gives up on an invocation: its future fails with :class:`WorkerLost` ("aborted")
        unless it already finished. Aborting a finished or unknown future does nothing."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stops every worker and thread; pending invocations fail with :class:`WorkerLost`.
        Idempotent."""

    def _check_open(self) -> None:
        """Refuses work once ``close`` ran (callers hold ``self._lock``)."""
        if self._closed:
            raise StateError(f"{type(self).__name__} is closed; build a new one")

    def _accept(self, request: Any) -> bytes:
        """``request`` as bytes once it is checked and the executor started (for ``invoke``)."""
        if not isinstance(request, (bytes, bytearray, memoryview)):
            raise InvalidTypeError(f"request: expected bytes, got {type(request).__name__}")
        self.start()
        return bytes(request)

    def stats(self) -> dict[str, Any]:
        """Counters: invocations, worker_restarts, bytes_sent, bytes_received, busy_s (wall
        seconds summed over invocations), errors (function errors), lost (WorkerLost
        failures), memory_mb and gb_s (busy_s x memory in GB, the unit Lambda bills)."""
        out = self.counters.as_dict()
        out["memory_mb"] = self.config.memory_mb
        out["gb_s"] = out["busy_s"] * self.config.memory_mb / 1024.0
        out["capacity"] = self.capacity
        return out

    def __enter__(self) -> "Executor":
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
