"""The "local" executor: tensor tasks in worker processes on this machine.

Each worker is a separate Python process running ``tensor_fn.worker`` (numpy only, one compute
thread, never torch or DGL), fed over its stdin/stdout pipes by one thread of this process.
Requests wait in one shared queue, so ``workers`` is the concurrency cap, like a Lambda
account's concurrency limit. A worker that dies fails its invocation with
:class:`~dglx_dist.offload.executor.WorkerLost` and is replaced (a cold start).

:meth:`LocalExecutor.worker_command` is the one seam for subclasses (e.g. the tests'
``faulty-local``, docs/strategies/dorylus.md): a worker that speaks the same framed protocol.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from dglx_dist.errors import InvalidValueError
from dglx_dist.offload.executor import EXECUTORS, Executor, InvocationError, WorkerLost
from dglx_dist.offload.tensor_fn.worker import STATUS_OK, THREAD_VARS, read_frame, write_frame

__all__ = ["LocalExecutor"]

log = logging.getLogger(__name__)
_ROOT = str(Path(__file__).resolve().parents[2])  # the directory that holds dglx_dist
_BOOT = (f"import sys; sys.path.insert(0, {_ROOT!r}); "
         "from dglx_dist.offload.tensor_fn.worker import main; sys.exit(main())")


@dataclasses.dataclass(eq=False)
class _Job:
    seq: int
    request: bytes
    future: concurrent.futures.Future
    aborted: bool = False


@dataclasses.dataclass(eq=False)
class _Slot:
    index: int
    proc: subprocess.Popen | None = None
    job: _Job | None = None
    doomed: bool = False  # abort() killed (or is killing) the current process
    thread: threading.Thread | None = None


@EXECUTORS.register("local")
class LocalExecutor(Executor):
    """Tensor tasks in ``workers`` local processes."""

    @dataclasses.dataclass(frozen=True)
    class Config:
        workers: int = dataclasses.field(default=2, metadata={
            "help": "worker processes, one invocation each at a time: the concurrency cap"})
        memory_mb: int = dataclasses.field(default=512, metadata={
            "help": "memory per worker assumed for GB-second cost estimates (not enforced)"})
        cold_start_s: float = dataclasses.field(default=0.0, metadata={
            "help": "seconds a (re)started worker sleeps before serving"})

        def __post_init__(self):
            if self.workers < 1:
                raise InvalidValueError(f"workers must be >= 1, got {self.workers}")
            if self.cold_start_s < 0:
                raise InvalidValueError(f"cold_start_s must be >= 0, got {self.cold_start_s}")

    def __init__(self, config: Config, name: str = ""):
        super().__init__(config, name)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._slots: list[_Slot] = []
        self._jobs: dict[concurrent.futures.Future, _Job] = {}
        self._seq = 0
        self._started = False

    @property
    def capacity(self) -> int:
        return self.config.workers

    def start(self) -> None:
        with self._lock:
            self._check_open()
            if self._started:
                return
            self._started = True
            self._slots = [_Slot(i, proc=self._spawn()) for i in range(self.config.workers)]
        for slot in self._slots:
            slot.thread = threading.Thread(target=self._feed, args=(slot,), daemon=True,
                                           name=f"dglx-local-worker-{slot.index}")
            slot.thread.start()
        log.debug("started %d local workers: %s", len(self._slots), self.worker_pids())

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers."""
        with self._lock:
            return [s.proc.pid for s in self._slots if s.proc is not None]

    def invoke(self, request: bytes) -> concurrent.futures.Future:
        request = self._accept(request)
        with self._lock:
            self._check_open()
            job = _Job(self._seq, request, concurrent.futures.Future())
            self._seq += 1
            self._jobs[job.future] = job
        self.counters.add(invocations=1)
        self._queue.put(job)
        return job.future

    def abort(self, future: concurrent.futures.Future) -> None:
        with self._lock:
            job = self._jobs.pop(future, None)
            if job is None or job.aborted:
                return
            job.aborted = True
            slot = next((s for s in self._slots if s.job is job), None)
            proc = slot.proc if slot is not None else None
            if slot is not None:
                slot.doomed = True
        where = f"its worker (pid {proc.pid}) killed" if proc else "it had not started"
        future.set_exception(WorkerLost(f"invocation #{job.seq} aborted; {where}"))
        if proc is not None:
            proc.kill()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            procs = [s.proc for s in self._slots if s.proc is not None]
        for proc in procs:
            proc.kill()
        for _ in self._slots:
            self._queue.put(None)
        for slot in self._slots:
            if slot.thread is not None:
                slot.thread.join(timeout=10)
        for proc in procs:
            self._reap(proc)
        while not self._queue.empty():
            job = self._queue.get_nowait()
            if job is not None:
                self._drop(job)
        log.debug("closed local executor: %s", self.stats())

    def stats(self) -> dict:
        out = super().stats()
        out["workers"] = self.config.workers
        return out

    # -- worker side ---------------------------------------------------------------------

    def worker_command(self) -> list[str]:
        """The command that starts one worker: :mod:`~dglx_dist.offload.tensor_fn.worker` alone
        (numpy only), with the configured cold start; the one seam for subclasses (module
        docstring)."""
        return [sys.executable, "-c", _BOOT, "--cold-start", repr(self.config.cold_start_s)]

    def _spawn(self) -> subprocess.Popen:
        env = dict(os.environ)
        env.update({var: "1" for var in THREAD_VARS})
        return subprocess.Popen(self.worker_command(), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env=env, close_fds=True)

    @staticmethod
    def _reap(proc: subprocess.Popen) -> int | None:
        if proc.poll() is None:
            proc.kill()
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log.warning("local worker pid %d did not exit after SIGKILL", proc.pid)
            code = None
        for pipe in (proc.stdin, proc.stdout):
            try:
                pipe.close()
            except OSError:  # a broken pipe's buffered bytes can no longer be written
                pass
        return code

    def _respawn(self, slot: _Slot, old: subprocess.Popen) -> int | None:
        code = self._reap(old)
        with self._lock:
            slot.doomed = False
            slot.proc = None if self._closed else self._spawn()
            restarted = slot.proc is not None
        if restarted:
            self.counters.add(worker_restarts=1)
            log.info("local worker %d (pid %d, exit code %s) replaced by pid %d",
                     slot.index, old.pid, code, slot.proc.pid)
        return code

    def _feed(self, slot: _Slot) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            with self._lock:
                if job.aborted:
                    continue
                proc = None if self._closed else slot.proc
                if proc is not None and job.future.set_running_or_notify_cancel():
                    slot.job = job
                elif proc is not None:  # cancelled by its owner before it started
                    self._jobs.pop(job.future, None)
                    continue
            if proc is None:
                self._drop(job)
                continue
            self._run(slot, proc, job)

    def _run(self, slot: _Slot, proc: subprocess.Popen, job: _Job) -> None:
        request = job.request
        start = time.monotonic()
        try:
            write_frame(proc.stdin, request)
            reply = read_frame(proc.stdout)
        except (OSError, EOFError, ValueError):  # ValueError: the pipe was closed under us
            reply = None
        self.counters.add(busy_s=time.monotonic() - start, bytes_sent=len(request),
                          bytes_received=len(reply or b""))
        with self._lock:
            slot.job = None
            doomed = slot.doomed
        if reply is None or doomed:
            code = self._respawn(slot, proc)
            reason = "executor closed" if self._closed else f"exit code {code}"
            self.counters.add(lost=0 if job.aborted else 1)
            self._finish(job, error=WorkerLost(f"invocation #{job.seq}: local worker {slot.index} "
                                       f"(pid {proc.pid}) died mid-invocation ({reason})"))
        elif reply[:1] == bytes([STATUS_OK]):
            self._finish(job, result=reply[1:])
        else:
            self.counters.add(errors=1)
            message = reply[1:].decode("utf-8", errors="replace")
            self._finish(job, error=InvocationError(
                f"invocation #{job.seq} rejected by the tensor function: {message}"))

    def _drop(self, job: _Job) -> None:
        self._finish(job, error=WorkerLost(f"invocation #{job.seq} dropped: executor closed"))

    def _finish(self, job: _Job, result: bytes | None = None,
                error: Exception | None = None) -> None:
        """Settles ``job`` once (with ``error`` or ``result``); abort() leaves it alone after."""
        with self._lock:
            self._jobs.pop(job.future, None)
            if job.aborted:
                return
            job.aborted = True
        if job.future.done():  # cancelled by its owner before it started
            return
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(result)
