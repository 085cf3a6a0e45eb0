"""The "aws" executor: tensor tasks as synchronous AWS Lambda invocations through boto3.

The function is the ``tensor_fn`` package (``scripts/package_lambda.py``; see
docs/strategies/dorylus.md); ``endpoint_url`` points boto3 elsewhere (the tests'
tests/doubles/invoke_api.py). Each invocation sends ``{"payload": base64(request)}`` and reads
the same shape back.

Lambda caps a synchronous request and response at about 6 MB. A request whose encoding (or
whose estimated response) would exceed ``max_payload_bytes`` is split along the op's row inputs
into chunks that fit; the chunks run concurrently and their responses are merged (row outputs
concatenated in order, sum outputs added), so the caller sees one response either way.

boto3's own retries are off: :class:`~dglx_dist.offload.controller.TaskController` retries.
Throttling, 5xx answers and connection failures become ``WorkerLost``; function errors and
refused requests become ``InvocationError``.
"""
from __future__ import annotations

import base64
import concurrent.futures
import dataclasses
import json
import time

import numpy as np

from dglx_dist.convs.ops_base import Op, output_size
from dglx_dist.errors import InvalidValueError, MissingDependencyError
from dglx_dist.offload.executor import EXECUTORS, Executor, InvocationError, WorkerLost
from dglx_dist.offload.tensor_fn.ops import OPS
from dglx_dist.offload.tensor_fn.payload import PayloadError, decode, encode

__all__ = ["AwsExecutor", "split_request", "merge_responses"]

_ENVELOPE = len(json.dumps({"payload": ""}))  # JSON around the base64 text
_RESPONSE_SLACK = 1024  # response header and array descriptors, generously
_RETRYABLE = {"TooManyRequestsException", "ServiceException", "EC2ThrottledException",
              "ResourceNotReadyException", "ResourceConflictException", "SnapStartNotReadyException"}


def split_request(request: bytes, max_payload_bytes: int) -> tuple[list[bytes], Op | None]:
    """Splits ``request`` along its op's row inputs so each chunk and its response fit.

    Returns:
        The chunk requests (``[request]`` when it fits, or when it cannot be read: the
        function then reports what is wrong) and the op, or None when not split.

    Raises:
        InvocationError: even a single row would not fit.
    """
    limit = max(0, (max_payload_bytes - _ENVELOPE) // 4 * 3)  # raw bytes whose base64 JSON fits
    try:
        header, arrays = decode(request)
        op = OPS[header["op"]]
        rows = {arrays[k].shape[0] for k in op.row_inputs}
        out_row, out_fixed = output_size(op, header, arrays)
    except (PayloadError, KeyError, TypeError, IndexError):
        return [request], None
    if not op.chunkable:
        if len(request) > limit:
            raise InvocationError(
                f"op {header['op']!r}: a request of {len(request)} bytes exceeds "
                f"max_payload_bytes={max_payload_bytes} (base64 adds 4/3) and this op cannot "
                f"be split by rows (its per-edge arrays); use more intervals")
        return [request], None
    if len(rows) != 1:
        return [request], None
    n = rows.pop()
    in_row = sum(arrays[k].nbytes // n if n else 0 for k in op.row_inputs)
    in_fixed = len(request) - n * in_row
    out_fixed += _RESPONSE_SLACK
    if in_fixed + n * in_row <= limit and out_fixed + n * out_row <= limit:
        return [request], None
    fits = [(limit - fixed) // per_row for fixed, per_row in
             ((in_fixed, in_row), (out_fixed, out_row)) if per_row]
    step = min(fits) if fits else 0
    if step < 1:
        raise InvocationError(
            f"op {header['op']!r}: one row does not fit max_payload_bytes={max_payload_bytes} "
            f"(request: {in_fixed} fixed + {in_row} per row bytes, response: about {out_fixed} "
            f"+ {out_row} per row, base64 adds 4/3); raise max_payload_bytes or shrink W")
    chunks = []
    for start in range(0, n, step):
        part = {k: (v[start:start + step] if k in op.row_inputs else v)
                for k, v in arrays.items()}
        chunks.append(encode(header, part))
    return chunks, op


def merge_responses(responses: list[bytes], op: Op) -> bytes:
    """One response from the chunks' responses (in chunk order)."""
    decoded = [decode(r) for r in responses]
    header, first = decoded[0]
    merged = {}
    for name, arr in first.items():
        parts = [arrays[name] for _, arrays in decoded]
        if name in op.row_outputs:
            merged[name] = np.concatenate(parts, axis=0)
        elif name in op.sum_outputs:
            merged[name] = np.sum(parts, axis=0, dtype=arr.dtype)
        else:
            merged[name] = arr
    return encode(header, merged)


@dataclasses.dataclass(eq=False)
class _Call:
    """One invoke(): its future, the futures of its chunks and their responses."""

    outer: concurrent.futures.Future
    op: Op | None
    parts: list[concurrent.futures.Future]
    results: list[bytes | None]
    done: bool = False


@EXECUTORS.register("aws")
class AwsExecutor(Executor):
    """Tensor tasks as synchronous AWS Lambda invocations."""

    @dataclasses.dataclass(frozen=True)
    class Config:
        function_name: str = dataclasses.field(default="dglx-tensor-fn", metadata={
            "help": "name (or ARN) of the deployed tensor_fn Lambda function"})
        region: str = dataclasses.field(default="us-east-1", metadata={"help": "AWS region"})
        endpoint_url: str = dataclasses.field(default="", metadata={
            "help": "Lambda API endpoint; empty for real AWS. When set, dummy credentials "
                    "are used (a local stand-in)"})
        concurrency: int = dataclasses.field(default=100, metadata={
            "help": "invocations in flight at once (threads and HTTP connections)"})
        memory_mb: int = dataclasses.field(default=512, metadata={
            "help": "the function's configured memory, for GB-second cost estimates"})
        max_payload_bytes: int = dataclasses.field(default=6_000_000, metadata={
            "help": "largest request/response body; bigger tasks are split by rows"})
        timeout_s: float = dataclasses.field(default=120.0, metadata={
            "help": "HTTP read timeout of one invocation, seconds"})
        connect_timeout_s: float = dataclasses.field(default=10.0, metadata={
            "help": "HTTP connect timeout, seconds"})

        def __post_init__(self):
            if self.concurrency < 1:
                raise InvalidValueError(f"concurrency must be >= 1, got {self.concurrency}")
            if self.max_payload_bytes <= _ENVELOPE + 64:
                raise InvalidValueError(f"max_payload_bytes={self.max_payload_bytes} leaves no "
                                        f"room for a payload; expected well above {_ENVELOPE + 64}")
            if self.timeout_s <= 0 or self.connect_timeout_s <= 0:
                raise InvalidValueError("timeout_s and connect_timeout_s must be > 0")

    def __init__(self, config: Config, name: str = ""):
        super().__init__(config, name)
        self._calls: dict[concurrent.futures.Future, _Call] = {}
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._client = None
        self._errors: tuple = ()

    @property
    def capacity(self) -> int:
        return self.config.concurrency

    def start(self) -> None:
        with self._lock:
            self._check_open()
            if self._client is not None:
                return
            self._client = self._make_client()
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.config.concurrency, thread_name_prefix="dglx-lambda")

    def _make_client(self):
        try:
            import boto3
            from botocore.config import Config as BotoConfig
            from botocore.exceptions import BotoCoreError, ClientError
        except ImportError as exc:
            raise MissingDependencyError("the 'aws' executor needs boto3: pip install "
                                         "'dglx_dist[aws]'") \
                from exc
        cfg = self.config
        self._errors = (ClientError, BotoCoreError)
        kwargs = {"region_name": cfg.region, "config": BotoConfig(
            retries={"max_attempts": 0, "mode": "standard"}, read_timeout=cfg.timeout_s,
            connect_timeout=cfg.connect_timeout_s, max_pool_connections=cfg.concurrency)}
        if cfg.endpoint_url:
            kwargs.update(endpoint_url=cfg.endpoint_url, aws_access_key_id="testing",
                          aws_secret_access_key="testing")
        return boto3.session.Session().client("lambda", **kwargs)

    def invoke(self, request: bytes) -> concurrent.futures.Future:
        request = self._accept(request)
        outer: concurrent.futures.Future = concurrent.futures.Future()
        outer.set_running_or_notify_cancel()
        try:
            chunks, op = split_request(request, self.config.max_payload_bytes)
        except InvocationError as exc:
            outer.set_exception(exc)
            return outer
        call = _Call(outer, op, [], [None] * len(chunks))
        with self._lock:
            self._check_open()
            self._calls[outer] = call
            call.parts = [self._pool.submit(self._invoke_one, c) for c in chunks]
        for index, part in enumerate(call.parts):
            part.add_done_callback(lambda f, i=index: self._part_done(call, i, f))
        return outer

    def _part_done(self, call: _Call, index: int, part: concurrent.futures.Future) -> None:
        exc = WorkerLost("invocation cancelled: executor closed") if part.cancelled() \
            else part.exception()
        with self._lock:
            if call.done:
                return
            if exc is None:
                call.results[index] = part.result()
                if any(r is None for r in call.results):
                    return
            call.done = True
            self._calls.pop(call.outer, None)
        if exc is not None:
            for other in call.parts:
                other.cancel()
            call.outer.set_exception(exc)
            return
        try:
            merged = call.results[0] if call.op is None else merge_responses(call.results, call.op)
        except PayloadError as err:
            call.outer.set_exception(InvocationError(f"unreadable response chunk: {err}"))
            return
        call.outer.set_result(merged)

    def abort(self, future: concurrent.futures.Future) -> None:
        with self._lock:
            call = self._calls.pop(future, None)
            if call is None or call.done:
                return
            call.done = True
        for part in call.parts:
            part.cancel()
        future.set_exception(WorkerLost(
            f"Lambda invocation of {self.config.function_name!r} aborted (a request already "
            f"sent runs to its end on AWS and its answer is dropped)"))

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pool, client = self._pool, self._client
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if client is not None:
            client.close()

    def _invoke_one(self, request: bytes) -> bytes:
        cfg = self.config
        body = json.dumps({"payload": base64.b64encode(request).decode("ascii")}).encode()
        where = f"Lambda function {cfg.function_name!r} ({cfg.endpoint_url or cfg.region})"
        start = time.monotonic()
        try:
            resp = self._client.invoke(FunctionName=cfg.function_name,
                                       InvocationType="RequestResponse", Payload=body)
            raw = resp["Payload"].read()
        except self._errors as exc:
            err = self._classify(exc, where)
            self.counters.add(**{"lost" if isinstance(err, WorkerLost) else "errors": 1})
            raise err from exc
        finally:
            self.counters.add(invocations=1, busy_s=time.monotonic() - start,
                              bytes_sent=len(body))
        self.counters.add(bytes_received=len(raw))
        if resp.get("FunctionError"):
            self.counters.add(errors=1)
            raise InvocationError(f"{where} failed: {_error_message(raw)}")
        try:
            return base64.b64decode(json.loads(raw)["payload"], validate=True)
        except (ValueError, KeyError, TypeError) as exc:
            raise InvocationError(f"{where} answered {raw[:200]!r}, expected a JSON object "
                                  f"with a base64 field 'payload' ({exc})") from None

    def _classify(self, exc: Exception, where: str) -> Exception:
        response = getattr(exc, "response", None)
        if response is None:  # BotoCoreError: connection refused, timeouts, ...
            return WorkerLost(f"{where} unreachable: {exc}")
        code = response.get("Error", {}).get("Code", "")
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if code in _RETRYABLE or status >= 500:
            return WorkerLost(f"{where}: {code or status}: {exc}")
        hint = (" (lower max_payload_bytes so requests are split)"
                if code == "RequestTooLargeException" else "")
        return InvocationError(f"{where} refused the request: {code}: {exc}{hint}")


def _error_message(raw: bytes) -> str:
    try:
        err = json.loads(raw)
        return f"{err.get('errorType', 'Error')}: {err.get('errorMessage', raw[:500])}"
    except (ValueError, AttributeError):
        return raw[:500].decode("utf-8", errors="replace")
