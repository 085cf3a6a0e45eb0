"""``faulty-local``: the ``local`` executor with faults injected, for tests and benchmarks.

The failure modes of serverless workers made reproducible: a delay added to every invocation
(emulated Lambda latency: the Dorylus sweep of benchmarks/ uses it), invocations whose worker
dies mid-invocation (``crash_on``) or stalls (``hang_on`` for ``hang_s``). Invocations are
numbered from 0 in the order of :meth:`~FaultyLocalExecutor.invoke` calls.

The executor writes the faults into the request header (``_delay_s``, ``_crash``); its workers
are :mod:`.faulty_worker`, started through the production executor's one seam,
:meth:`~dglx_dist.offload.local.LocalExecutor.worker_command`. The production worker has no
fault code: a ``local`` executor's worker runs a request carrying these fields as any other.
"""
from __future__ import annotations

import dataclasses
import sys
import threading
from pathlib import Path

from dglx_dist.errors import InvalidValueError
from dglx_dist.offload import local
from dglx_dist.offload.tensor_fn.payload import PayloadError, decode_header, replace_header

# the directory holding dglx_dist (its numpy-only tensor_fn and the conv folders' tasks) and
# this plug-in's package: the worker imports nothing else
_PATHS = [str(Path(local.__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]
_BOOT = (f"import sys; sys.path[:0] = {_PATHS!r}; "
         "from dglx_test_plugins.faulty_worker import main; sys.exit(main())")


class FaultyLocalExecutor(local.LocalExecutor):
    """Tensor tasks in ``workers`` local processes, with faults injected."""

    @dataclasses.dataclass(frozen=True)
    class Config(local.LocalExecutor.Config):
        latency_s: float = dataclasses.field(default=0.0, metadata={
            "help": "delay added to every invocation (emulated Lambda latency)"})
        crash_on: tuple[int, ...] = dataclasses.field(default=(), metadata={
            "help": "invocation numbers (0-based, counting every invoke() call) whose worker "
                    "dies mid-invocation"})
        hang_on: tuple[int, ...] = dataclasses.field(default=(), metadata={
            "help": "invocation numbers that stall for hang_s before computing"})
        hang_s: float = dataclasses.field(default=30.0, metadata={
            "help": "how long a hang_on invocation stalls"})

        def __post_init__(self):
            super().__post_init__()
            for name in ("latency_s", "hang_s"):
                if getattr(self, name) < 0:
                    raise InvalidValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    def __init__(self, config: Config, name: str = ""):
        super().__init__(config, name)
        self._count_lock = threading.Lock()
        self._count = 0

    def worker_command(self) -> list[str]:
        return [sys.executable, "-c", _BOOT, "--cold-start", repr(self.config.cold_start_s)]

    def invoke(self, request: bytes):
        if isinstance(request, (bytes, bytearray, memoryview)):  # else the base class refuses
            with self._count_lock:
                seq, self._count = self._count, self._count + 1
            request = self._inject(seq, bytes(request))
        return super().invoke(request)

    def _inject(self, seq: int, request: bytes) -> bytes:
        cfg, updates = self.config, {}
        delay = cfg.latency_s + (cfg.hang_s if seq in cfg.hang_on else 0.0)
        if delay > 0:
            updates["_delay_s"] = delay
        if seq in cfg.crash_on:
            updates["_crash"] = True
        if not updates:
            return request
        try:
            return replace_header(request, {**decode_header(request), **updates})
        except PayloadError:  # the worker will report what is wrong with it
            return request
