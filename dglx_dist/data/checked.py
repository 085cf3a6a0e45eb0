"""Checked reading of Parquet, Arrow IPC and JSON files, shared by the dataset and partition
loaders (and the options their Parquet writers use, :data:`WRITE_OPTIONS`).

Arrow IPC files (suffix :data:`ARROW_SUFFIX`, the partition parts since format version 2) are
memory-mapped: their columns are read without decoding, which is what makes a part load in a
fraction of a Parquet read's time.

Schema, row counts, nulls and value ranges are checked before data is used; each problem raises
the caller's error class with a message naming the file, the field, what was found and what was
expected. Row counts come from the file footer, so a file declaring a different size than
expected is refused before its columns are read.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dglx_dist.errors import InvalidValueError

__all__ = ["read_checked", "arrow_numpy", "to_arrow", "column_numpy", "read_feat",
           "feat_to_numpy", "check_range", "check_finite", "check_plausible", "read_json_object",
           "write_arrow", "WRITE_OPTIONS", "NONFINITE", "PLAUSIBLE", "ARROW_SUFFIX"]

NONFINITE = ("reject", "warn")  # what a loader does with NaN / Inf features

log = logging.getLogger(__name__)

# the largest sizes a graph file may declare: far beyond any graph trained today (the largest
# public ones have ~10^10 edges), yet small enough that a declared size never reaches an
# allocation that fails with a raw numpy or torch error
PLAUSIBLE = {"num_nodes": 1 << 36, "num_edges": 1 << 40, "feat_dim": 1 << 20,
             "num_classes": 1 << 24}

# every Parquet file we write carries a CRC per data page, checked whenever it is read, so a
# damaged byte is an error instead of different data (files written elsewhere may have none)
WRITE_OPTIONS = {"write_page_checksum": True}


ARROW_SUFFIX = ".arrow"
_READ_ERRORS = (pa.ArrowException, OSError, ValueError)


class _Source:
    """One file's schema, row count and reads, whether Parquet or memory-mapped Arrow IPC."""

    def __init__(self, file: Path, error_cls: type[Exception]):
        self.file, self.error_cls = file, error_cls
        ipc, self._parquet = file.suffix == ARROW_SUFFIX, None
        try:
            if not ipc:
                self._parquet = pq.ParquetFile(file, page_checksum_verification=True)
                self.schema = self._parquet.schema_arrow
                self.num_rows = self._parquet.metadata.num_rows
                return
            self._ipc = pa.ipc.open_file(pa.memory_map(str(file)))
            self.schema = self._ipc.schema
            self.num_rows = sum(self._ipc.get_batch(i).num_rows
                                for i in range(self._ipc.num_record_batches))
        except _READ_ERRORS as exc:
            raise error_cls(f"{file}: not a readable {'Arrow IPC' if ipc else 'Parquet'} file "
                            f"({exc})") from None

    def read(self, columns: list[str] | None) -> pa.Table:
        try:
            if self._parquet is not None:
                return self._parquet.read(columns=columns)
            table = self._ipc.read_all()
            table.validate()  # buffer sizes against lengths: a damaged file is an error
            return table if columns is None else table.select(columns)
        except _READ_ERRORS as exc:
            raise self.error_cls(f"{self.file}: could not be read ({exc})") from None

    def chunks(self, field: str):
        """``field``'s values a block at a time (a row group, or an IPC record batch)."""
        ipc = self._parquet is None
        count = self._ipc.num_record_batches if ipc else self._parquet.metadata.num_row_groups
        for i in range(count):
            try:
                arrays = ([self._ipc.get_batch(i).column(field)] if ipc else
                          self._parquet.read_row_group(i, columns=[field]).column(field).chunks)
                for array in arrays:
                    array.validate()
            except _READ_ERRORS as exc:
                raise self.error_cls(f"{self.file}: {'record batch' if ipc else 'row group'} "
                                     f"{i} could not be read ({exc})") from None
            yield from arrays


def write_arrow(table: pa.Table, file: Path, max_chunk_rows: int | None = None) -> None:
    """Writes ``table`` as an uncompressed Arrow IPC file (record batches of at most
    ``max_chunk_rows`` rows), to be memory-mapped by :func:`read_checked` and
    :func:`read_feat`."""
    with pa.OSFile(str(file), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=max_chunk_rows)


def read_json_object(file: Path, error_cls: type[Exception], max_bytes: int = 64 << 20) -> dict:
    """Reads a JSON object from ``file``, refusing missing, oversized or malformed files."""
    if not file.is_file():
        raise error_cls(f"{file}: missing")
    size = file.stat().st_size
    if size > max_bytes:
        raise error_cls(f"{file}: {size} bytes; expected at most {max_bytes}")
    try:
        value = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise error_cls(f"{file}: not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise error_cls(f"{file}: expected a JSON object, got {type(value).__name__}")
    return value


def check_plausible(values: dict, file: Path, error_cls: type[Exception]) -> None:
    """Refuses a declared size (``num_nodes``, ``num_edges``, ``feat_dim``, ``num_classes``)
    above :data:`PLAUSIBLE`, naming the field, before anything is sized by it."""
    for key, limit in PLAUSIBLE.items():
        value = values.get(key)
        if isinstance(value, int) and value > limit:
            raise error_cls(f"{file}: field {key!r} = {value} is implausible (at most {limit} "
                            f"is accepted); the file is damaged or was written wrong")


def _type_ok(t: pa.DataType, kind: str) -> bool:
    if kind == "integer":
        return pa.types.is_integer(t)
    if kind == "bool":
        return pa.types.is_boolean(t)
    return ((pa.types.is_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_large_list(t))
            and pa.types.is_floating(t.value_type))


def read_checked(file: Path, fields: dict[str, str], rows: int | None,
                 error_cls: type[Exception], read: tuple[str, ...] | None = None,
                 all_columns: bool = False) -> pa.Table:
    """Reads a Parquet or Arrow IPC file's columns after checking ``fields`` exist with the
    right kind.

    Args:
        file: the Parquet file, or an Arrow IPC file (suffix :data:`ARROW_SUFFIX`).
        fields: name -> kind, one of "integer", "bool", "float list".
        rows: the expected row count, or None for any.
        error_cls: exception class raised on any problem.
        read: the columns to read (default: all of ``fields``); checked-only columns are
            left for a streaming reader such as :func:`read_feat`.
        all_columns: read every column of the file, ``fields`` and the others (edge data).
    """
    if not file.is_file():
        raise error_cls(f"{file}: missing")
    source = _Source(file, error_cls)
    schema = source.schema
    for name, kind in fields.items():
        idx = schema.get_field_index(name)
        if idx < 0:
            raise error_cls(f"{file}: missing field {name!r}; expected fields {list(fields)} "
                            f"(found {schema.names})")
        if not _type_ok(schema.field(idx).type, kind):
            raise error_cls(f"{file}: field {name!r} has type {schema.field(idx).type}; "
                            f"expected {kind}")
    if rows is not None and source.num_rows != rows:
        raise error_cls(f"{file}: {source.num_rows} rows; expected {rows}")
    return source.read(None if all_columns else list(fields if read is None else read))


def arrow_numpy(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A numeric or bool Arrow array without nulls as numpy: zero-copy (read-only) for one
    chunk of numbers, a fresh array for several or for booleans. Through DLPack, not
    ``to_numpy``: pyarrow's ``to_numpy`` imports pandas (to look for its types), 0.75 s of
    every rank's start where nothing else needs it."""
    chunks = (arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]) or \
        [pa.nulls(0, arr.type)]
    if pa.types.is_boolean(arr.type):  # bit-packed: a byte each first
        return np.concatenate([np.from_dlpack(pc.cast(c, pa.uint8())) for c in chunks]
                              ).view(bool)
    parts = [np.from_dlpack(c) for c in chunks]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def to_arrow(values: np.ndarray) -> pa.Array:
    """A numeric or bool numpy array as an Arrow column without nulls, :func:`arrow_numpy`'s
    inverse: one value per row, or a 2-D array as a ``fixed_size_list`` per row. Built on the
    array's own buffer (no copy, but for packing booleans into bits), not with ``pa.array``,
    which imports pandas to look for its types: about 0.5 s of CPU in every process that
    writes a dataset, a partition or an export."""
    values = np.ascontiguousarray(values)
    if values.ndim == 2:
        return pa.FixedSizeListArray.from_arrays(to_arrow(values.reshape(-1)), values.shape[1])
    if values.ndim != 1:
        raise InvalidValueError(f"an array of shape {values.shape}: expected one value or one "
                                f"vector per row")
    if values.dtype == bool:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), values.size, [None, pa.py_buffer(bits)])
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), values.size,
                                 [None, pa.py_buffer(values)])


def column_numpy(table: pa.Table, name: str, file: Path, error_cls: type[Exception]) -> np.ndarray:
    """A writable numpy copy of an integer (as int64) or bool column without nulls."""
    col = table.column(name)
    if col.null_count:
        raise error_cls(f"{file}: field {name!r} has {col.null_count} nulls; expected none")
    out = arrow_numpy(col)
    target = bool if out.dtype == bool else np.int64
    if out.dtype != target or not out.flags.writeable:
        out = out.astype(target)
    return out


def read_feat(file: Path, rows: int, feat_dim: int, error_cls: type[Exception],
              field: str = "feat") -> np.ndarray:
    """Reads a list<float> column into a (rows, feat_dim) float32 array, one row group (or
    record batch) at a time, so the peak is the result plus one block (not two full
    copies)."""
    out = np.empty((rows, feat_dim), dtype=np.float32)
    pos = 0
    for chunk in _Source(file, error_cls).chunks(field):
        block = feat_to_numpy(chunk, feat_dim, file, error_cls, field, row_offset=pos)
        end = pos + block.shape[0]
        if end <= rows:
            out[pos:end] = block
        pos = end
    if pos != rows:
        raise error_cls(f"{file}: field {field!r} has {pos} rows; expected {rows}")
    return out


def feat_to_numpy(arr: pa.Array, feat_dim: int, file: Path, error_cls: type[Exception],
                  field: str = "feat", row_offset: int = 0) -> np.ndarray:
    """A (rows, feat_dim) float32 view/array of one list<float> chunk, checking row widths."""
    if arr.null_count:
        raise error_cls(f"{file}: field {field!r} has {arr.null_count} null rows; expected a "
                        f"vector of {feat_dim} floats in every row")
    if pa.types.is_fixed_size_list(arr.type):
        if arr.type.list_size != feat_dim:
            raise error_cls(f"{file}: field {field!r} has width {arr.type.list_size}; "
                            f"expected {feat_dim}")
    else:
        lengths = np.diff(arrow_numpy(arr.offsets))
        bad = np.nonzero(lengths != feat_dim)[0]
        if bad.size:
            raise error_cls(f"{file}: field {field!r} row {row_offset + int(bad[0])} has "
                            f"{int(lengths[bad[0]])} values; expected {feat_dim}")
    values = arr.flatten()
    if values.null_count:
        raise error_cls(f"{file}: field {field!r} has {values.null_count} null values")
    out = arrow_numpy(values).astype(np.float32, copy=False)
    return out.reshape(len(arr), feat_dim)


def check_range(values: np.ndarray, lo: int, hi: int, file: Path, name: str, what: str,
                error_cls: type[Exception]) -> None:
    """Raises unless every value is in ``[lo, hi)``; the message names the first bad row."""
    if values.size == 0:
        return
    vmin, vmax = int(values.min()), int(values.max())
    if vmin < lo or vmax >= hi:
        bad = vmin if vmin < lo else vmax
        row = int(np.argmax(values == bad))
        raise error_cls(f"{file}: field {name!r} row {row} = {bad}; expected a {what} "
                        f"in [{lo}, {hi})")


def check_finite(feat: np.ndarray, file: Path, mode: str, error_cls: type[Exception],
                 field: str = "feat") -> None:
    """NaN / Inf in ``feat``: ``mode="reject"`` raises naming the first such cell, ``"warn"``
    logs how many there are."""
    if mode not in NONFINITE:
        raise InvalidValueError(f"nonfinite={mode!r}; expected one of {list(NONFINITE)}")
    bad = ~np.isfinite(feat)
    if not bad.any():
        return
    rows, cols = np.nonzero(bad)
    row, col, count = int(rows[0]), int(cols[0]), rows.size
    if mode == "reject":
        raise error_cls(f"{file}: field {field!r} row {row} column {col} = {feat[row, col]}; "
                        f"expected finite values (NaN or Inf in {count} cells; "
                        f"nonfinite='warn', or `dglx partition --nonfinite warn`, reads them "
                        f"anyway)")
    log.warning("%s: %d cells are NaN or Inf (first: row %d column %d); read anyway "
                "(nonfinite='warn')", file, count, row, col)
