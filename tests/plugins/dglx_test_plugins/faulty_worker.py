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
import time

CRASH_EXIT_CODE = 17


def act_on_faults(header: dict) -> None:
    """Crashes or sleeps as the request header says."""
    if header.get("_crash"):
        os._exit(CRASH_EXIT_CODE)
    delay = header.get("_delay_s", 0)
    if isinstance(delay, (int, float)) and delay > 0:
        time.sleep(delay)


def handle(request: bytes) -> bytes:
    """The tensor tasks' handler, after the request's faults (imported at the first request:
    the worker has set its thread limits by then)."""
    from dglx_dist.offload.tensor_fn.handler import handle as compute
    from dglx_dist.offload.tensor_fn.payload import decode_header

    act_on_faults(decode_header(request))
    return compute(request)


def main(argv: list[str] | None = None) -> int:
    """The ``local`` worker's loop (:func:`dglx_dist.offload.tensor_fn.worker.main`) with
    :func:`handle`."""
    from dglx_dist.offload.tensor_fn.worker import main as serve

    return serve(argv, handle)
