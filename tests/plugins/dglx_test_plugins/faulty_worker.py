"""The worker of ``faulty-local`` (:mod:`.faulty`): the protocol of
:mod:`dglx_dist.offload.tensor_fn.worker` (a frame in, a status byte and a body out), acting on a
request's fault fields before the tensor-task handler computes it:

* ``_crash``: exit at once with status :data:`CRASH_EXIT_CODE` (killed mid-invocation);
* ``_delay_s``: sleep this many seconds first (latency, or a hung invocation).

It imports the numpy-only ``dglx_dist.offload.tensor_fn`` and the tasks alone, as the
``local`` worker does.
"""
from __future__ import annotations

import os
import sys
import time

CRASH_EXIT_CODE = 17
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def act_on_faults(header: dict) -> None:
    """Crashes or sleeps as the request header says."""
    if header.get("_crash"):
        os._exit(CRASH_EXIT_CODE)
    delay = header.get("_delay_s", 0)
    if isinstance(delay, (int, float)) and delay > 0:
        time.sleep(delay)


def main(argv: list[str] | None = None) -> int:
    """Serves framed requests from stdin until it ends; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    cold = float(argv[argv.index("--cold-start") + 1]) if "--cold-start" in argv else 0.0
    for var in _THREAD_VARS:
        os.environ[var] = "1"
    from dglx_dist.offload.tensor_fn.handler import handle
    from dglx_dist.offload.tensor_fn.payload import PayloadError, decode_header
    from dglx_dist.offload.tensor_fn.worker import STATUS_ERROR, STATUS_OK, read_frame, write_frame

    time.sleep(cold)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            request = read_frame(stdin)
        except EOFError:
            return 1
        if request is None:
            return 0
        try:
            act_on_faults(decode_header(request))
            status, body = STATUS_OK, handle(request)
        except PayloadError as exc:
            status, body = STATUS_ERROR, str(exc).encode("utf-8")
        except Exception as exc:  # noqa: BLE001  (as the local worker: it keeps serving)
            status, body = STATUS_ERROR, f"internal error: {type(exc).__name__}: {exc}".encode()
        try:
            write_frame(stdout, bytes([status]), body)
        except BrokenPipeError:
            return 1
