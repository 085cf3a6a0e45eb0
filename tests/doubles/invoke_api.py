"""A local HTTP endpoint speaking AWS Lambda's Invoke API, serving the tensor_fn handler.

boto3 pointed at it (``endpoint_url``) behaves as with real Lambda for what the "aws" executor
uses: ``POST /2015-03-31/functions/{FunctionName}/invocations`` runs
``dglx_dist.offload.tensor_fn.handler.lambda_handler`` on the JSON body and answers 200 with
its JSON result. Like Lambda, a handler that raises is still a 200, with the header
``X-Amz-Function-Error: Unhandled`` and ``{"errorMessage", "errorType", "stackTrace"}`` as the
body; an unknown function is a 404 ``ResourceNotFoundException``.

A test double: the "aws" executor's tests run against it; nothing in the package uses it.

Run it as a separate process (prints ``listening http://127.0.0.1:PORT`` and serves until
SIGTERM), from the repository root::

    python -m tests.doubles.invoke_api --port 0 --function dglx-tensor-fn

Run as a script (``python tests/doubles/invoke_api.py``), which is what
:func:`serve_in_subprocess` does, it imports only the numpy-only tensor tasks of the installed
dglx_dist (``dglx_dist.offload.tensor_fn`` and the conv folders' ``ops.py``; no torch, no DGL),
as a Lambda would, and starts in a fraction of a second.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import select
import signal
import subprocess
import sys
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Iterator

# run as a script too, this imports only the numpy-only tensor_fn package and the conv folders'
# tasks (dglx_dist, dglx_dist.offload and dglx_dist.convs import neither torch nor DGL)
from dglx_dist.offload.tensor_fn.handler import lambda_handler

__all__ = ["make_server", "serve_in_subprocess", "main"]

log = logging.getLogger(__name__)
_PATH = re.compile(r"^/2015-03-31/functions/([^/]+)/invocations/?(\?.*)?$")


def _handler_class(function_name: str, handler: Callable[[dict, object], dict]) -> type:
    class InvokeHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            match = _PATH.match(self.path)
            if match is None:
                return self._send(404, {"Type": "User", "message": f"unknown path {self.path}"},
                                  {"x-amzn-ErrorType": "UnknownOperationException"})
            name = match.group(1)
            if name not in (function_name, f"{function_name}:$LATEST"):
                return self._send(404, {"Type": "User", "message": f"Function not found: {name}"},
                                  {"x-amzn-ErrorType": "ResourceNotFoundException"})
            try:
                event = json.loads(body or b"null")
            except ValueError as exc:
                return self._send(400, {"Type": "User", "message": f"invalid JSON: {exc}"},
                                  {"x-amzn-ErrorType": "InvalidRequestContentException"})
            try:
                result = handler(event, None)
            except Exception as exc:  # Lambda reports any exception as a function error
                error = {"errorMessage": str(exc), "errorType": type(exc).__name__,
                         "stackTrace": traceback.format_tb(exc.__traceback__)}
                return self._send(200, error, {"X-Amz-Function-Error": "Unhandled"})
            self._send(200, result, {"X-Amz-Executed-Version": "$LATEST"})

        def _send(self, status: int, obj: object, headers: dict[str, str]) -> None:
            data = json.dumps(obj).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, fmt: str, *args: object) -> None:
            log.debug("invoke api: " + fmt, *args)

    return InvokeHandler


def make_server(function_name: str, port: int = 0, host: str = "127.0.0.1",
                handler: Callable[[dict, object], dict] = lambda_handler) -> ThreadingHTTPServer:
    """An HTTP server (not yet serving) answering Invoke calls for ``function_name``."""
    server = ThreadingHTTPServer((host, port), _handler_class(function_name, handler))
    server.daemon_threads = True
    return server


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    """Serves until SIGTERM (or Ctrl-C); prints the URL once listening."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="TCP port (0: any free one)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind")
    parser.add_argument("--function", default="dglx-tensor-fn", help="function name served")
    args = parser.parse_args(argv)
    server = make_server(args.function, args.port, args.host)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    host, port = server.server_address[:2]
    sys.stdout.write(f"listening http://{host}:{port}\n")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


@contextlib.contextmanager
def serve_in_subprocess(function_name: str = "dglx-tensor-fn",
                        startup_timeout_s: float = 30.0) -> Iterator[str]:
    """Runs the endpoint in a child process for the ``with`` block.

    Yields:
        The endpoint URL (``http://127.0.0.1:PORT``) for boto3's ``endpoint_url``.

    Raises:
        RuntimeError: the server did not report its URL within ``startup_timeout_s``.
    """
    cmd = [sys.executable, str(Path(__file__).resolve()), "--port", "0",
           "--function", function_name]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env)
    try:
        yield _read_url(proc, startup_timeout_s)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def _read_url(proc: subprocess.Popen, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, left))
        if not ready:
            raise RuntimeError(f"invoke api (pid {proc.pid}) printed no URL within {timeout_s}s")
        chunk = proc.stdout.read1(256) if hasattr(proc.stdout, "read1") else proc.stdout.read(1)
        if not chunk:
            raise RuntimeError(f"invoke api (pid {proc.pid}) exited with code {proc.wait()} "
                               f"before listening")
        line += chunk
    text = line.decode().strip()
    if not text.startswith("listening "):
        raise RuntimeError(f"invoke api printed {text!r}, expected 'listening URL'")
    return text.split(" ", 1)[1]


if __name__ == "__main__":
    sys.exit(main())
