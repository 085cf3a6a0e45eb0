"""The ``inline`` executor: tensor tasks run on the graph server itself, in its own thread.

This is Dorylus's CPU-only variant (the paper's baseline with the same computation separation
and pipeline, but no serverless threads): the same payloads go through the same handler, so
only where the work runs changes. Each invocation runs synchronously inside ``invoke``, so
a graph server's graph and tensor tasks never overlap; nothing leaves the process.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import time

from dglx_dist.offload.executor import EXECUTORS, Executor, InvocationError
from dglx_dist.offload.tensor_fn import handler
from dglx_dist.offload.tensor_fn.payload import PayloadError

__all__ = ["InlineExecutor"]


@EXECUTORS.register("inline")
class InlineExecutor(Executor):
    """Runs every request in the calling thread (see the module docstring)."""

    @dataclasses.dataclass(frozen=True)
    class Config:
        memory_mb: int = dataclasses.field(
            default=0, metadata={"help": "Billed memory per invocation (0: nothing billed "
                                         "besides the graph server itself)."})

    @property
    def capacity(self) -> int:
        return 1

    def start(self) -> None:
        self._closed = False

    def invoke(self, request: bytes) -> concurrent.futures.Future:
        self._check_open()
        future: concurrent.futures.Future = concurrent.futures.Future()
        t0 = time.perf_counter()
        try:
            response = handler.handle(request)
        except PayloadError as exc:
            self.counters.add(errors=1)
            future.set_exception(InvocationError(str(exc)))
            return future
        self.counters.add(invocations=1, busy_s=time.perf_counter() - t0)
        future.set_result(response)
        return future

    def abort(self, future: concurrent.futures.Future) -> None:
        """Nothing runs in the background: every future is already done."""

    def close(self) -> None:
        self._closed = True
