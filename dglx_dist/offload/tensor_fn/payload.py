"""The binary format of tensor-task requests and responses: a JSON header plus raw arrays.

Nothing is pickled: a payload is a small JSON object of scalars followed by arrays described by
explicit dtype codes and shapes. All integers are little-endian::

    offset  size        field
    0       4           magic b"DGLX"
    4       2  (u16)    format version (currently 1)
    6       4  (u32)    header length H
    10      H           header: UTF-8 JSON object; values are str, int, float (finite) or bool
    10+H    2  (u16)    array count N
            then N array descriptors, each:
            1  (u8)     name length L (1..255)
            L           name, UTF-8 (names are unique within a payload)
            1  (u8)     dtype code: 1 float32, 2 float64, 3 int64, 4 int32, 5 uint8, 6 bool
            1  (u8)     ndim (0..8)
            8*ndim      dims, one u64 each
            8  (u64)    nbytes, which must equal prod(dims) * itemsize
            then the raw little-endian data of every array, in descriptor order, back to back;
            the payload ends exactly where the last array does.

:func:`decode` checks every descriptor and the sizes they declare against the bytes actually
present before it creates any array, so a corrupt or hostile payload costs no memory; the
arrays it returns are read-only views into the buffer (copied only when misaligned).
"""
from __future__ import annotations

import json
import math
import struct

import numpy as np

from dglx_dist.convs.ops_base import PayloadError

__all__ = ["PayloadError", "encode", "decode", "decode_header", "replace_header",
           "MAGIC", "VERSION", "DTYPES", "MAX_NDIM"]

MAGIC = b"DGLX"
VERSION = 1
MAX_NDIM = 8
MAX_NAME_BYTES = 255
#: dtype code -> numpy dtype (little-endian)
DTYPES: dict[int, np.dtype] = {1: np.dtype("<f4"), 2: np.dtype("<f8"), 3: np.dtype("<i8"),
                               4: np.dtype("<i4"), 5: np.dtype("|u1"), 6: np.dtype("|b1")}
_CODES = {dt.str[1:]: code for code, dt in DTYPES.items()}
_DTYPE_NAMES = ", ".join(f"{c} ({DTYPES[c].name})" for c in sorted(DTYPES))
_PREFIX = struct.Struct("<4sHI")
_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U64 = struct.Struct("<Q")


def _check_header(header: object) -> dict:
    if not isinstance(header, dict):
        raise PayloadError(f"header: expected a JSON object, got {type(header).__name__}")
    for key, value in header.items():
        if not isinstance(key, str):
            raise PayloadError(f"header key {key!r}: expected a string")
        if not isinstance(value, (str, int, float, bool)):
            raise PayloadError(f"header field {key!r}: expected str, int, float or bool, "
                               f"got {type(value).__name__}")
        if isinstance(value, float) and not math.isfinite(value):
            raise PayloadError(f"header field {key!r}: expected a finite float, got {value}")
    return header


def _header_bytes(header: dict) -> bytes:
    """The payload's prefix and ``header``."""
    _check_header(header)
    raw = json.dumps(header, separators=(",", ":"), allow_nan=False).encode("utf-8")
    if len(raw) > 0xFFFFFFFF:
        raise PayloadError(f"header: {len(raw)} bytes of JSON, expected at most 4 GiB")
    return _PREFIX.pack(MAGIC, VERSION, len(raw)) + raw


def _descriptor(name: str, arr: np.ndarray) -> tuple[bytes, np.ndarray]:
    if not isinstance(name, str):
        raise PayloadError(f"array name {name!r}: expected a string")
    raw_name = name.encode("utf-8")
    if not 1 <= len(raw_name) <= MAX_NAME_BYTES:
        raise PayloadError(f"array name {name!r}: expected 1..{MAX_NAME_BYTES} UTF-8 bytes, "
                           f"got {len(raw_name)}")
    if isinstance(arr, np.generic):
        arr = np.asarray(arr)
    if not isinstance(arr, np.ndarray):
        raise PayloadError(f"array {name!r}: expected a numpy array, got {type(arr).__name__}")
    code = _CODES.get(arr.dtype.str[1:])
    if code is None or arr.dtype.kind not in "fiub":
        raise PayloadError(f"array {name!r}: dtype {arr.dtype} is not supported; expected one "
                           f"of {_DTYPE_NAMES}")
    if arr.ndim > MAX_NDIM:
        raise PayloadError(f"array {name!r}: {arr.ndim} dimensions, expected at most {MAX_NDIM}")
    data = np.ascontiguousarray(arr, dtype=DTYPES[code])
    parts = [_U8.pack(len(raw_name)), raw_name, _U8.pack(code), _U8.pack(arr.ndim)]
    parts += [_U64.pack(d) for d in arr.shape]
    parts.append(_U64.pack(data.nbytes))
    return b"".join(parts), data


def encode(header: dict, arrays: dict[str, np.ndarray]) -> bytes:
    """Serialises ``header`` and ``arrays`` (in the dict's order) into one payload.

    Raises:
        PayloadError: a non-scalar header value, an unsupported dtype, a bad name, too many
            dimensions or arrays.
    """
    if len(arrays) > 0xFFFF:
        raise PayloadError(f"{len(arrays)} arrays, expected at most {0xFFFF}")
    parts: list = [_header_bytes(header), _U16.pack(len(arrays))]
    datas = []
    for name, arr in arrays.items():
        desc, data = _descriptor(name, arr)
        parts.append(desc)
        datas.append(data)
    parts += [memoryview(d).cast("B") if d.nbytes else b"" for d in datas]
    return b"".join(parts)


class _Reader:
    """A cursor over the payload that refuses to read past its end."""

    def __init__(self, buf: bytes | bytearray | memoryview):
        if not isinstance(buf, (bytes, bytearray, memoryview)):
            raise PayloadError(f"payload: expected bytes, got {type(buf).__name__}")
        self.view = memoryview(buf).cast("B")
        self.pos = 0

    @property
    def remaining(self) -> int:
        return len(self.view) - self.pos

    def take(self, n: int, what: str) -> memoryview:
        if n > self.remaining:
            raise PayloadError(f"{what}: needs {n} bytes but {self.remaining} remain "
                               f"(truncated payload?)")
        out = self.view[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: struct.Struct, what: str) -> tuple:
        return fmt.unpack(self.take(fmt.size, what))


def _read_header(reader: _Reader) -> dict:
    magic, version, length = reader.unpack(_PREFIX, "payload prefix")
    if magic != MAGIC:
        raise PayloadError(f"magic: got {bytes(magic)!r}, expected {MAGIC!r} "
                           f"(not a dglx tensor payload)")
    if version != VERSION:
        raise PayloadError(f"format version: got {version}, expected {VERSION}")
    raw = reader.take(length, f"header ({length} bytes declared)")
    try:
        header = json.loads(bytes(raw).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PayloadError(f"header: not valid UTF-8 JSON ({exc})") from None
    return _check_header(header)


def decode_header(buf: bytes | bytearray | memoryview) -> dict:
    """Only the header of a payload (its arrays are neither checked nor read)."""
    return _read_header(_Reader(buf))


def replace_header(buf: bytes | bytearray | memoryview, header: dict) -> bytes:
    """The payload ``buf`` with its header replaced by ``header`` and its arrays untouched."""
    reader = _Reader(buf)
    _read_header(reader)
    return b"".join([_header_bytes(header), reader.view[reader.pos:]])


def _read_descriptor(reader: _Reader, index: int) -> tuple[str, np.dtype, tuple[int, ...], int]:
    (name_len,) = reader.unpack(_U8, f"array #{index} name length")
    try:
        name = bytes(reader.take(name_len, f"array #{index} name")).decode("utf-8")
    except UnicodeDecodeError:
        raise PayloadError(f"array #{index} name: not valid UTF-8") from None
    if not name:
        raise PayloadError(f"array #{index} name: empty, expected 1..{MAX_NAME_BYTES} bytes")
    code, ndim = reader.unpack(struct.Struct("<BB"), f"array {name!r} dtype and ndim")
    if code not in DTYPES:
        raise PayloadError(f"array {name!r}: dtype code {code} is unknown; expected one of "
                           f"{_DTYPE_NAMES}")
    if ndim > MAX_NDIM:
        raise PayloadError(f"array {name!r}: ndim {ndim}, expected at most {MAX_NDIM}")
    shape = struct.unpack(f"<{ndim}Q", reader.take(8 * ndim, f"array {name!r} dims"))
    (nbytes,) = reader.unpack(_U64, f"array {name!r} nbytes")
    dtype = DTYPES[code]
    expected = math.prod(shape) * dtype.itemsize
    if nbytes != expected:
        raise PayloadError(f"array {name!r}: nbytes is {nbytes} but shape {shape} of "
                           f"{dtype.name} needs {expected}")
    return name, dtype, shape, nbytes


def decode(buf: bytes | bytearray | memoryview) -> tuple[dict, dict[str, np.ndarray]]:
    """Parses a payload made by :func:`encode`.

    Every descriptor is validated, and the sizes they declare are checked against the bytes
    present, before any array is created.

    Returns:
        The header and the arrays, in payload order; arrays are read-only views into ``buf``.

    Raises:
        PayloadError: naming the field that is wrong, its value and what was expected.
    """
    reader = _Reader(buf)
    header = _read_header(reader)
    (count,) = reader.unpack(_U16, "array count")
    descriptors = []
    seen: set[str] = set()
    for index in range(count):
        desc = _read_descriptor(reader, index)
        if desc[0] in seen:
            raise PayloadError(f"array {desc[0]!r}: name appears twice, expected unique names")
        seen.add(desc[0])
        descriptors.append(desc)
    available = reader.remaining
    for name, _, _, nbytes in descriptors:
        if nbytes > available:
            raise PayloadError(f"array {name!r}: header declares {nbytes} bytes but "
                               f"{available} remain (truncated payload?)")
        available -= nbytes
    if available:
        raise PayloadError(f"payload: {available} trailing bytes after the last array "
                           f"(expected the payload to end there)")
    arrays = {}
    for name, dtype, shape, nbytes in descriptors:
        raw = reader.take(nbytes, f"array {name!r} data")
        if dtype.kind == "b" and nbytes and np.frombuffer(raw, np.uint8).max() > 1:
            raise PayloadError(f"array {name!r}: bool data holds bytes other than 0 and 1")
        arr = np.frombuffer(raw, dtype=dtype).reshape(shape)
        arrays[name] = np.require(arr, requirements="A")
    return header, arrays
