"""Entry points of a tensor task: bytes in, bytes out, and the AWS Lambda wrapper.

The request is a payload (see :mod:`.payload`) whose header names the task in ``"op"``; the
response is a payload with header ``{"op": ..., "ok": True}`` and the task's outputs. Errors in
the request raise :class:`~.payload.PayloadError`; a real Lambda turns the raised exception into
``FunctionError: Unhandled`` with the message as ``errorMessage``, which the caller reports.
"""
from __future__ import annotations

import base64
import binascii
import logging

from .ops import OPS
from .payload import PayloadError, decode, encode

__all__ = ["handle", "lambda_handler"]

log = logging.getLogger(__name__)


def handle(request: bytes | bytearray | memoryview) -> bytes:
    """Runs the task a request payload names and returns the response payload.

    Raises:
        PayloadError: a malformed payload, an unknown op or invalid inputs for the op.
    """
    header, arrays = decode(request)
    name = header.get("op")
    op = OPS.get(name) if isinstance(name, str) else None
    if op is None:
        raise PayloadError(f"header field 'op': got {name!r}, expected one of {sorted(OPS)}")
    missing = [k for k in op.inputs if k not in arrays]
    if missing:
        raise PayloadError(f"op {name!r}: missing input array(s) {missing}; it needs "
                           f"{list(op.inputs)}, got {list(arrays)}")
    outputs = op.fn(header, arrays)
    return encode({"op": name, "ok": True}, outputs)


def lambda_handler(event: dict, context: object) -> dict:
    """AWS Lambda entry point (``dglx_dist.offload.tensor_fn.handler.lambda_handler``).

    Args:
        event: ``{"payload": base64 of the request payload}``.
        context: the Lambda context (unused).

    Returns:
        ``{"payload": base64 of the response payload}``.

    Raises:
        PayloadError: a malformed event or request; Lambda reports it as a function error.
    """
    if not isinstance(event, dict) or not isinstance(event.get("payload"), str):
        raise PayloadError("event: expected a JSON object with a base64 string field "
                           f"'payload', got {type(event).__name__} with keys "
                           f"{sorted(event) if isinstance(event, dict) else '-'}")
    try:
        request = base64.b64decode(event["payload"], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise PayloadError(f"event field 'payload': not valid base64 ({exc})") from None
    response = handle(request)
    log.debug("handled %d request bytes -> %d response bytes", len(request), len(response))
    return {"payload": base64.b64encode(response).decode("ascii")}
