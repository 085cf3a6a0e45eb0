"""A local worker process: the stand-in for one warm Lambda container.

Protocol on stdin/stdout (binary). A request frame is an 8-byte little-endian length followed
by that many bytes of request payload. Each request is answered by one frame of the same shape
whose body starts with a status byte: 0 and the response payload, or 1 and a UTF-8 error
message. An error leaves the worker serving; it exits when stdin ends.

Cold start: ``--cold-start S`` sleeps S seconds before serving. The worker uses one compute thread, like a Lambda.
"""
from __future__ import annotations

import os
import struct
import sys
import time

__all__ = ["main", "STATUS_OK", "STATUS_ERROR", "THREAD_VARS", "read_frame", "write_frame"]

STATUS_OK = 0
STATUS_ERROR = 1
_LEN = struct.Struct("<Q")
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def read_frame(stream) -> bytes | None:
    """One length-prefixed frame from a binary stream; None at a clean end of stream.

    Raises:
        EOFError: the stream ended inside a frame.
    """
    head = stream.read(_LEN.size)  # a buffered stream reads all n bytes unless it ends
    if not head:
        return None
    if len(head) < _LEN.size:
        raise EOFError(f"stream ended after {len(head)} of {_LEN.size} bytes")
    (length,) = _LEN.unpack(head)
    body = stream.read(length)
    if len(body) < length:
        raise EOFError(f"stream ended inside a frame of {length} bytes")
    return body


def write_frame(stream, *parts: bytes) -> None:
    """Writes ``parts`` as one length-prefixed frame and flushes."""
    stream.write(_LEN.pack(sum(len(p) for p in parts)))
    for part in parts:
        stream.write(part)
    stream.flush()


def _cold_start(argv: list[str]) -> float:
    seconds = "0"
    if "--cold-start" in argv:
        index = argv.index("--cold-start")
        if index + 1 >= len(argv):
            raise SystemExit("--cold-start needs a number of seconds")
        seconds = argv[index + 1]
    try:
        return float(seconds)
    except ValueError:
        raise SystemExit(f"--cold-start: expected seconds, got {seconds!r}") from None


def _serve_one(request: bytes, handle, error_type) -> tuple[int, bytes]:
    try:
        return STATUS_OK, handle(request)
    except error_type as exc:
        return STATUS_ERROR, str(exc).encode("utf-8")
    except Exception as exc:  # a bug in a task must not take the worker down
        return STATUS_ERROR, f"internal error: {type(exc).__name__}: {exc}".encode("utf-8")


def main(argv: list[str] | None = None, handle=None) -> int:
    """Serves framed requests from stdin until it ends; returns the exit status.

    Args:
        handle: the request handler, bytes to bytes (default: the tensor tasks'
            :func:`~dglx_dist.offload.tensor_fn.handler.handle`, imported once the thread
            limits are set; a test's worker passes one that acts on a request first).
    """
    for var in THREAD_VARS:
        os.environ[var] = "1"
    cold = _cold_start(sys.argv[1:] if argv is None else argv)
    if handle is None:
        # the tasks load after the thread limits; the local executor also sets them in the
        # worker's environment, which is what counts once ``dglx_dist.offload`` imported numpy
        from .handler import handle
    from .payload import PayloadError

    if cold > 0:
        time.sleep(cold)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            request = read_frame(stdin)
        except EOFError:
            return 1
        if request is None:
            return 0
        status, body = _serve_one(request, handle, PayloadError)
        try:
            write_frame(stdout, bytes([status]), body)
        except BrokenPipeError:
            return 1


if __name__ == "__main__":
    sys.exit(main())
