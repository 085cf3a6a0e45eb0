"""The task controller of a graph server: launches, times, relaunches and autotunes (Dorylus's
Lambda controller, here for every executor).

A graph server submits tensor tasks under keys of its choosing (e.g. ``(layer, interval)``) and
collects their results as they finish; the controller keeps up to ``concurrency`` invocations in
flight on an :class:`~dglx_dist.offload.executor.Executor`::

    ctl = TaskController(executor, timeout_s=30, concurrency=min(num_intervals, 100))
    for i in range(num_intervals):
        ctl.submit(("av", 0, i), {"op": "av", "act": "relu"}, {"A": ..., "W": ..., ...})
    while ctl.pending:
        ctl.wait_any(timeout=0.01)           # blocks until something is ready (or timeout)
        for key, header, arrays in ctl.poll():
            ...                              # each key comes back exactly once
        ctl.observe_queue(len(cpu_task_queue))

Failure handling (Dorylus §6): a timed-out or lost attempt is relaunched, up to
``max_attempts`` (then :class:`TaskFailedError`); a function error is raised at once. A result
is delivered once per submission: an answer from a superseded attempt is dropped.

Autotuning (``observe_queue``): the graph server reports its task-queue length periodically.
When the last ``AUTOTUNE_WINDOW`` observations grew strictly every time, graph tasks pile up
faster than the CPUs drain them, so one fewer invocation is kept in flight (at least 1); when
the queue at least halved (``SHRINK_RATIO``) over the window, the CPUs are outpacing the
workers, so one more is allowed (at most ``executor.capacity``). After a change the window
starts afresh.

The controller has no threads of its own: it makes progress whenever ``submit``, ``poll``,
``wait_any`` or ``drain`` is called, and must be driven from one thread.
"""
from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import logging
import time
from typing import Any, Hashable

import numpy as np

from dglx_dist.errors import DeadlineError, DglxError, InvalidValueError
from dglx_dist.offload.executor import Executor, InvocationError, WorkerLost
from dglx_dist.offload.tensor_fn.ops import OPS
from dglx_dist.offload.tensor_fn.payload import PayloadError, decode, encode

__all__ = ["TaskController", "TaskFailedError", "Result"]

log = logging.getLogger(__name__)
Result = tuple[Hashable, dict, dict[str, np.ndarray]]


class TaskFailedError(DglxError, RuntimeError):
    """A tensor task failed on every one of its attempts."""


@dataclasses.dataclass(eq=False)
class _Task:
    key: Hashable
    request: bytes
    attempts: int = 0
    failures: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(eq=False)
class _Attempt:
    task: _Task
    number: int
    started: float
    finished: float | None = None


class TaskController:
    """Runs keyed tensor tasks on an executor with timeouts, relaunches and autotuning.

    Args:
        executor: where invocations run; the controller does not start or close it.
        timeout_s: an attempt running longer than this is aborted and relaunched.
        max_attempts: attempts per task before :class:`TaskFailedError`.
        concurrency: invocations in flight at first (Dorylus: ``min(#intervals, 100)``);
            default ``min(executor.capacity, 100)``; clamped to ``[1, executor.capacity]``.
    """

    AUTOTUNE_WINDOW = 4  # queue observations compared by observe_queue
    SHRINK_RATIO = 0.5  # the queue shrinking to this fraction over the window: quickly

    def __init__(self, executor: Executor, timeout_s: float, max_attempts: int = 3,
                 concurrency: int | None = None):
        if timeout_s <= 0:
            raise InvalidValueError(f"timeout_s must be > 0, got {timeout_s}")
        if max_attempts < 1:
            raise InvalidValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self.executor = executor
        self.timeout_s = float(timeout_s)
        self.max_attempts = max_attempts
        self._max_concurrency = max(1, executor.capacity)
        wanted = min(executor.capacity, 100) if concurrency is None else concurrency
        self._concurrency = min(max(1, wanted), self._max_concurrency)
        self._observed: collections.deque[int] = collections.deque(maxlen=self.AUTOTUNE_WINDOW)
        self._queue: collections.deque[_Task] = collections.deque()
        self._running: dict[concurrent.futures.Future, _Attempt] = {}
        self._pending: dict[Hashable, _Task] = {}
        self._ready: list[Result] = []
        self._stats = dict.fromkeys(
            ("invocations", "relaunches", "timeouts", "worker_lost", "duplicates_dropped",
             "results", "bytes_to_executor", "bytes_from_executor", "concurrency_changes"), 0)
        self._busy_s = 0.0

    # -- state ---------------------------------------------------------------------------

    @property
    def concurrency(self) -> int:
        """Invocations currently allowed in flight (changed by :meth:`observe_queue`)."""
        return self._concurrency

    @property
    def in_flight(self) -> int:
        """Invocations running now."""
        return len(self._running)

    @property
    def queued(self) -> int:
        """Tasks (first attempts and relaunches) waiting for a free invocation slot."""
        return len(self._queue)

    @property
    def pending(self) -> int:
        """Submitted tasks whose results have not been returned yet (including results
        finished but not yet collected by ``poll``)."""
        return len(self._pending) + len(self._ready)

    def stats(self) -> dict[str, Any]:
        """invocations (attempts launched), relaunches, timeouts, worker_lost,
        duplicates_dropped, results, bytes_to_executor, bytes_from_executor, busy_s (wall
        seconds summed over finished attempts), concurrency, concurrency_changes."""
        return {**self._stats, "busy_s": self._busy_s, "concurrency": self._concurrency}

    # -- work ----------------------------------------------------------------------------

    def submit(self, key: Hashable, header: dict, arrays: dict[str, np.ndarray]) -> None:
        """Queues one task and launches it if a slot is free (never blocks).

        Raises:
            ValueError: ``key`` is already pending.
            PayloadError: an unknown ``header["op"]`` or arrays that cannot be encoded.
        """
        if key in self._pending or any(k == key for k, _, _ in self._ready):
            raise InvalidValueError(f"task {key!r} is already pending; collect its result before "
                                    f"submitting it again")
        if header.get("op") not in OPS:
            raise PayloadError(f"task {key!r}: header field 'op' is {header.get('op')!r}, "
                               f"expected one of {sorted(OPS)}")
        task = _Task(key, encode(header, arrays))
        self._pending[key] = task
        self._queue.append(task)
        self._launch()

    def poll(self) -> list[Result]:
        """Results of the tasks finished since the last call, as ``(key, header, arrays)``;
        never blocks. Arrays are read-only views into the response (copy to modify them).

        Raises:
            InvocationError: the function rejected a task's request.
            TaskFailedError: a task failed ``max_attempts`` times.
        """
        self._advance()
        ready, self._ready = self._ready, []
        return ready

    def wait_any(self, timeout: float | None = None) -> int:
        """Blocks until at least one result is ready for :meth:`poll`, nothing is in flight,
        or ``timeout`` seconds passed; attempt timeouts and relaunches are handled while
        waiting. Results are left for :meth:`poll` to collect; raises what :meth:`poll` raises.

        Returns:
            The number of results ready to be collected.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._advance()
            if self._ready or not self._running:
                return len(self._ready)
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return 0
            next_expiry = min(a.started for a in self._running.values()) + self.timeout_s
            wait_s = max(0.0, next_expiry - now) + 1e-3
            if deadline is not None:
                wait_s = min(wait_s, max(0.0, deadline - now))
            concurrent.futures.wait(list(self._running), timeout=wait_s,
                                    return_when=concurrent.futures.FIRST_COMPLETED)

    def drain(self, timeout: float | None = None) -> list[Result]:
        """Waits for every submitted task and returns all results not yet collected.

        Raises:
            TimeoutError: tasks are still pending after ``timeout`` seconds. On any error the
                results collected so far stay available to later calls.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        out: list[Result] = []
        try:
            while True:
                out += self.poll()
                if not self._pending:
                    return out
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise DeadlineError(f"{len(self._pending)} task(s) still pending after "
                                        f"{timeout}s: {list(self._pending)[:5]}")
                self.wait_any(left)
        except BaseException:
            self._ready = out + self._ready  # nothing collected is lost
            raise

    def observe_queue(self, length: int) -> None:
        """Records the graph server's task-queue length and adjusts concurrency (see the
        module docstring for the rule)."""
        if not isinstance(length, (int, np.integer)) or length < 0:
            raise InvalidValueError(f"queue length must be an int >= 0, got {length!r}")
        self._observed.append(int(length))
        if len(self._observed) < self.AUTOTUNE_WINDOW:
            return
        obs = list(self._observed)
        if all(b > a for a, b in zip(obs, obs[1:])):
            self._set_concurrency(self._concurrency - 1, f"queue grew {obs}")
        elif obs[0] > 0 and obs[-1] <= obs[0] * self.SHRINK_RATIO:
            self._set_concurrency(self._concurrency + 1, f"queue shrank {obs}")

    def close(self) -> None:
        """Aborts running invocations and forgets every unfinished task (the executor stays
        open)."""
        for future in list(self._running):
            self.executor.abort(future)
        self._running.clear()
        self._queue.clear()
        self._pending.clear()

    def __enter__(self) -> "TaskController":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------

    def _advance(self) -> None:
        self._harvest()
        self._expire()
        self._launch()

    def _set_concurrency(self, value: int, why: str) -> None:
        value = min(max(1, value), self._max_concurrency)
        self._observed.clear()
        if value != self._concurrency:
            log.debug("lambda concurrency %d -> %d (%s)", self._concurrency, value, why)
            self._concurrency = value
            self._stats["concurrency_changes"] += 1
            self._launch()

    def _launch(self) -> None:
        while self._queue and len(self._running) < self._concurrency:
            task = self._queue.popleft()
            task.attempts += 1
            attempt = _Attempt(task, task.attempts, time.monotonic())
            future = self.executor.invoke(task.request)
            future.add_done_callback(lambda f, a=attempt: setattr(a, "finished", time.monotonic()))
            self._running[future] = attempt
            self._stats["invocations"] += 1
            self._stats["bytes_to_executor"] += len(task.request)

    def _harvest(self) -> None:
        for future in [f for f in self._running if f.done()]:
            attempt = self._running.pop(future)
            self._busy_s += (attempt.finished or time.monotonic()) - attempt.started
            exc = future.exception()
            if exc is None:
                self._deliver(attempt, future.result())
            elif isinstance(exc, WorkerLost):
                self._stats["worker_lost"] += 1
                self._retry(attempt, f"attempt {attempt.number}: {exc}")
            else:
                self._pending.pop(attempt.task.key, None)
                if isinstance(exc, InvocationError):
                    raise InvocationError(f"task {attempt.task.key!r} (attempt "
                                          f"{attempt.number}): {exc}") from exc
                exc.add_note(f"while running task {attempt.task.key!r}")
                raise exc

    def _deliver(self, attempt: _Attempt, response: bytes) -> None:
        key = attempt.task.key
        self._stats["bytes_from_executor"] += len(response)
        if self._pending.get(key) is not attempt.task:
            self._stats["duplicates_dropped"] += 1
            return
        del self._pending[key]
        try:
            header, arrays = decode(response)
        except PayloadError as exc:
            raise InvocationError(f"task {key!r}: unreadable response: {exc}") from exc
        self._stats["results"] += 1
        self._ready.append((key, header, arrays))

    def _expire(self) -> None:
        now = time.monotonic()
        for future, attempt in list(self._running.items()):
            if future.done() or now - attempt.started <= self.timeout_s:
                continue
            self.executor.abort(future)
            del self._running[future]
            self._busy_s += now - attempt.started
            self._stats["timeouts"] += 1
            self._retry(attempt, f"attempt {attempt.number}: timed out after "
                                 f"{now - attempt.started:.1f}s (timeout_s={self.timeout_s})")

    def _retry(self, attempt: _Attempt, reason: str) -> None:
        task = attempt.task
        if self._pending.get(task.key) is not task:
            return
        task.failures.append(reason)
        if task.attempts >= self.max_attempts:
            del self._pending[task.key]
            raise TaskFailedError(f"task {task.key!r} failed all {task.attempts} attempts: "
                                  + "; ".join(task.failures))
        log.info("relaunching task %r: %s", task.key, reason)
        self._stats["relaunches"] += 1
        self._queue.appendleft(task)
