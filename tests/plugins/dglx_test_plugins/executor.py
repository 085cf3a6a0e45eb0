"""``threads``: tensor tasks run in a thread pool inside the graph server's process.

Between ``inline`` (one task at a time, in the caller's thread) and ``local`` (worker
processes): up to ``workers`` tasks at once, numpy releasing the GIL in its kernels. A task
already running cannot be stopped, so :meth:`abort` fails its future and drops the late answer.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import time

from dglx_dist.errors import StateError
from dglx_dist.offload import Executor, InvocationError, WorkerLost
from dglx_dist.offload.tensor_fn import handler
from dglx_dist.offload.tensor_fn.payload import PayloadError
from dglx_dist.registry import Bounds


class ThreadExecutor(Executor):
    """``workers`` threads, each running the tensor-task handler on one request at a time."""

    @dataclasses.dataclass(frozen=True)
    class Config:
        workers: int = dataclasses.field(default=2, metadata={"help": "Threads.",
                                                               "bounds": Bounds(1)})
        memory_mb: int = dataclasses.field(default=0, metadata={"help": "Billed memory."})

    def __init__(self, config, name: str = ""):
        super().__init__(config, name)
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: set[concurrent.futures.Future] = set()
        self._closed = False

    @property
    def capacity(self) -> int:
        return self.config.workers

    def start(self) -> None:
        with self._lock:
            if self._pool is None and not self._closed:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    self.config.workers, thread_name_prefix="dglx-task")

    def invoke(self, request: bytes) -> concurrent.futures.Future:
        self.start()
        answer: concurrent.futures.Future = concurrent.futures.Future()
        answer.set_running_or_notify_cancel()
        with self._lock:
            if self._closed:
                raise StateError("the threads executor is closed; build a new one")
            self._pending.add(answer)
            self._pool.submit(self._run, bytes(request), answer)
        self.counters.add(bytes_sent=len(request))
        return answer

    def _run(self, request: bytes, answer: concurrent.futures.Future) -> None:
        t0 = time.perf_counter()
        try:
            response = handler.handle(request)
        except PayloadError as exc:
            self.counters.add(errors=1)
            self._finish(answer, exc=InvocationError(str(exc)))
            return
        self.counters.add(invocations=1, busy_s=time.perf_counter() - t0,
                          bytes_received=len(response))
        self._finish(answer, result=response)

    def _finish(self, answer: concurrent.futures.Future, result=None, exc=None) -> bool:
        with self._lock:
            self._pending.discard(answer)
        return _settle(answer, result, exc)

    def abort(self, future: concurrent.futures.Future) -> None:
        if self._finish(future, exc=WorkerLost("aborted")):
            self.counters.add(lost=1)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
            pending, self._pending = self._pending, set()
        for answer in pending:
            _settle(answer, exc=WorkerLost("dropped: executor closed"))
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def _settle(future: concurrent.futures.Future, result=None, exc=None) -> bool:
    """Sets ``future``'s outcome unless it already has one; whether this call set it."""
    try:
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:
        return False
    return True
