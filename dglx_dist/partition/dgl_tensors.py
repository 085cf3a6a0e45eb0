"""DGL's tensor files (a part's ``node_feat.dgl`` and ``edge_feat.dgl``), read without DGL,
and :class:`PartGraph`, what a part graph's file (``graph.dgl`` or GraphBolt's) is read into.

``dgl.data.utils.save_tensors`` writes them (DGL's ``src/graph/serialize/tensor_serialize.cc``
with dmlc-core's serializers for strings and vectors and ``SaveDLTensor`` of
``include/dgl/runtime/ndarray.h``; checked byte by byte on DGL 2.1), little-endian::

    u64 file magic 0xDD5A9FBE3FA2443F
    u64 number of tensors
    u64 number of tensors again (the length dmlc writes before a vector)
    per tensor:
        u64 name length, the name (UTF-8)
        u64 array magic 0xDD5E40F096B4A13F, u64 reserved
        i32 device type (1: CPU), i32 device id
        i32 ndim, u8 type code, u8 bits, u16 lanes
        i64 shape[ndim], i64 byte count (the elements times bits / 8)
        the bytes

Why not DGL's ``load_tensors``: its C++ reader trusts every length it reads and dies with
SIGSEGV on most files cut short (docs/reliability.md, case 2b). Here every header field is
checked against the file's size before the next is read, nothing is allocated until the whole
file has been walked, and a bad file is refused in one line naming it, the tensor, and the
size expected against the size found; the data is copied into tensors as the header says.
"""
from __future__ import annotations

import dataclasses
import math
import struct
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

from dglx_dist.errors import PartitionFormatError

__all__ = ["PartGraph", "read_tensor_file"]

_ERR = PartitionFormatError
_FILE_MAGIC = 0xDD5A9FBE3FA2443F
_ARRAY_MAGIC = 0xDD5E40F096B4A13F
_CPU = 1
# (type code, bits) -> dtype: DGL's codes are DLPack's (int, uint, float, -, bfloat, complex);
# DGL writes a bool tensor as uint8 and reads it back so
_DTYPES = {(0, 8): torch.int8, (0, 16): torch.int16, (0, 32): torch.int32, (0, 64): torch.int64,
           (1, 8): torch.uint8, (2, 16): torch.float16, (2, 32): torch.float32,
           (2, 64): torch.float64, (4, 16): torch.bfloat16, (5, 64): torch.complex64,
           (5, 128): torch.complex128}
_CHUNK = 1 << 26  # bytes per read: one read() of several GB returns short on Linux


@dataclasses.dataclass(frozen=True)
class _Entry:
    """One tensor's header: where its bytes start in the file and how many there are."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int
    nbytes: int

    def describe(self) -> str:
        return f"{self.name!r} {str(self.dtype).replace('torch.', '')} {self.shape}"


class _Walker:
    """Reads the header fields of one file in order, each checked to lie inside the file."""

    def __init__(self, stream: BinaryIO, file: Path, size: int):
        self.stream, self.file, self.size, self.pos = stream, file, size, 0

    def need(self, n: int, what: str, found: int | None = None) -> None:
        """Refuses the file when the next ``n`` bytes (``what``) run past its end (``found``:
        its size, when it was read shorter than it was at the start)."""
        found = self.size if found is None else found
        if self.pos + n > found:
            raise _ERR(f"{self.file}: {found:,} bytes, but its headers declare at least "
                       f"{self.pos + n:,} ({what}): the file is truncated; copy the partition "
                       f"again")

    def take(self, n: int, what: str) -> bytes:
        """The next ``n`` bytes (``what``)."""
        self.need(n, what)
        raw = self.stream.read(n)
        self.need(n, what, found=self.pos + len(raw))  # cut since it was measured
        self.pos += n
        return raw

    def fields(self, fmt: str, what: str) -> tuple:
        """The little-endian fields ``fmt`` (:mod:`struct`) at the current position."""
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))

    def skip(self, n: int, what: str) -> int:
        """Steps over ``n`` bytes (``what``), returning where they start."""
        self.need(n, what)
        start, self.pos = self.pos, self.pos + n
        self.stream.seek(self.pos)
        return start

    def refuse(self, what: str, expected: str) -> _ERR:
        return _ERR(f"{self.file}: {what}; expected {expected} (a file DGL's save_tensors "
                    f"writes: node_feat.dgl / edge_feat.dgl of partition_graph)")


def _entries(w: _Walker) -> list[_Entry]:
    """Every tensor's header, checked; the walker ends on the file's last byte."""
    (magic,) = w.fields("Q", "the file magic")
    if magic != _FILE_MAGIC:
        raise w.refuse(f"not a DGL tensor file: it starts with {magic:#018x}",
                       f"DGL's tensor file magic {_FILE_MAGIC:#018x}")
    count, length = w.fields("QQ", "the number of tensors")
    if count != length:
        raise w.refuse(f"declares {count:,} tensors, then {length:,}", "the same number twice")
    entries = [_entry(w, i, count) for i in range(count)]
    if w.pos != w.size:
        raise _ERR(f"{w.file}: {w.size:,} bytes, but its headers declare {w.pos:,} (its "
                   f"{count} tensors end there); expected the file to end after its last "
                   f"tensor (is it written over, or two files in one?)")
    names = [e.name for e in entries]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise w.refuse(f"names tensor(s) {twice} more than once", "each name once")
    return entries


def _entry(w: _Walker, i: int, count: int) -> _Entry:
    """Tensor ``i``'s header (name, array header, shape), its bytes stepped over."""
    at = f"tensor {i + 1} of {count}"
    (n,) = w.fields("Q", f"the name length of {at}")
    raw = w.take(n, f"the name of {at}: {n:,} bytes")
    try:
        name = raw.decode()
    except UnicodeDecodeError:
        raise w.refuse(f"the name of {at} is not UTF-8 text", "a tensor name") from None
    at = f"tensor {i + 1} of {count}, {name!r}"
    magic, _, device, _, ndim, code, bits, lanes = w.fields("QQiiiBBH", f"the header of {at}")
    if magic != _ARRAY_MAGIC or device != _CPU or ndim < 0:
        raise w.refuse(f"{at}: array magic {magic:#x}, device {device}, ndim {ndim}",
                       f"magic {_ARRAY_MAGIC:#x}, device 1 (CPU), ndim >= 0")
    dtype = _DTYPES.get((code, bits))
    if dtype is None or lanes != 1:
        raise w.refuse(f"{at}: type code {code}, {bits} bits, {lanes} lanes",
                       f"one of (code, bits) {sorted(_DTYPES)} with 1 lane")
    shape = w.fields(f"{ndim}q", f"the shape of {at}: {ndim} dimensions")
    (nbytes,) = w.fields("q", f"the byte count of {at}")
    if min(shape, default=0) < 0 or nbytes != math.prod(shape) * (bits // 8):
        raise w.refuse(f"{at}: shape {shape} of {bits}-bit elements, {nbytes:,} bytes",
                       f"sizes >= 0 and {bits // 8} bytes per element")
    kind = f"{str(dtype).replace('torch.', '')} {tuple(shape)}"
    offset = w.skip(nbytes, f"the data of {at}: {kind}, {nbytes:,} bytes")
    return _Entry(name, dtype, tuple(shape), offset, nbytes)


def _data(stream: BinaryIO, file: Path, e: _Entry) -> torch.Tensor:
    """``e``'s bytes as its tensor (read in chunks into one fresh buffer)."""
    buf = torch.empty(e.nbytes, dtype=torch.uint8)
    view = memoryview(buf.numpy())
    stream.seek(e.offset)
    for start in range(0, e.nbytes, _CHUNK):
        part = view[start:start + _CHUNK]
        if stream.readinto(part) != len(part):
            raise _ERR(f"{file}: ended inside the data of {e.describe()} while it was read: "
                       f"the file changed; expected it to stay {e.offset + e.nbytes:,} bytes "
                       f"or more")
    return buf.view(e.dtype).reshape(e.shape)


def read_tensor_file(file: str | Path) -> dict[str, torch.Tensor]:
    """The named tensors of a file DGL's ``save_tensors`` wrote, in the file's order.

    Every length the headers declare is checked against the file's size before anything is
    allocated (see the module docstring).

    Args:
        file: a ``node_feat.dgl`` / ``edge_feat.dgl``.

    Raises:
        PartitionFormatError: the file is missing, not a DGL tensor file, cut short, longer
            than its headers declare, or holds a dtype or device this reader does not know.
    """
    file = Path(file)
    try:
        with open(file, "rb") as stream:
            w = _Walker(stream, file, file.stat().st_size)
            return {e.name: _data(stream, file, e) for e in _entries(w)}
    except OSError as exc:
        raise _ERR(f"{file}: cannot be read ({exc.strerror or exc}); expected a DGL tensor "
                   f"file") from None


@dataclasses.dataclass(frozen=True, eq=False)
class PartGraph:
    """One DGL part graph as the importers read it, from ``graph.dgl`` or GraphBolt's
    ``fused_csc_sampling_graph.pt``: its edges in local ids and, as int64 (bool for
    ``inner_node``) numpy arrays, the node data ``_ID`` and ``inner_node`` (and ``_TYPE`` of a
    heterograph's ``graph.dgl``) and the edge data ``_ID`` (and ``_TYPE`` of a heterograph).
    A GraphBolt file has no node types: the importer takes them from ``node_map``."""

    file: Path
    num_nodes: int
    src: np.ndarray
    dst: np.ndarray
    ndata: dict[str, np.ndarray]
    edata: dict[str, np.ndarray]
