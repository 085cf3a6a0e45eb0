"""Edge data as Parquet columns: the convention shared by datasets and partitions.

Every column of an edges file other than the structure (``src``, ``dst``, and ``eid`` in a
partition) is edge data under its own name, one row per edge: a scalar or a
``fixed_size_list<T>[k]`` per edge, T integer, floating or bool, its dtype kept as written and
nulls refused (docs/dataset_format.md, "Edge data").
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from dglx_dist.data.checked import arrow_numpy

__all__ = ["edge_data_columns", "edge_data_arrays", "edge_data_spec", "checked_spec",
           "STRUCTURE"]

STRUCTURE = ("src", "dst", "eid")  # edges-file columns that are not edge data


def _value_ok(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def edge_data_columns(schema: pa.Schema, file: Path, error_cls: type[Exception]) -> list[str]:
    """The edge-data column names of an edges file, checked for a supported type."""
    names = [n for n in schema.names if n not in STRUCTURE]
    for name in names:
        t = schema.field(name).type
        if not (_value_ok(t) or (pa.types.is_fixed_size_list(t) and _value_ok(t.value_type))):
            raise error_cls(f"{file}: edge data field {name!r} has type {t}; expected an "
                            f"integer, floating or bool column, or a fixed_size_list of one")
    return names


def edge_data_arrays(table: pa.Table, names: list[str], file: Path,
                     error_cls: type[Exception]) -> dict[str, np.ndarray]:
    """The edge-data columns ``names`` of ``table`` as numpy arrays (vectors as 2-D)."""
    out = {}
    for name in names:
        col = table.column(name).combine_chunks()
        if col.null_count or (pa.types.is_fixed_size_list(col.type)
                               and col.flatten().null_count):
            raise error_cls(f"{file}: edge data field {name!r} has nulls; expected a value "
                            f"for every edge")
        if pa.types.is_fixed_size_list(col.type):
            flat = arrow_numpy(col.flatten())
            out[name] = flat.reshape(len(col), col.type.list_size).copy()
        else:
            out[name] = arrow_numpy(col).copy()
    return out


def edge_data_spec(edata: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """``{name: {"dtype": ..., "shape": [...]}}`` (the row shape) for a manifest (of edge
    data, or of a partition's other node data: the same columns over nodes)."""
    return {name: {"dtype": str(a.dtype), "shape": list(a.shape[1:])}
            for name, a in edata.items()}


def checked_spec(manifest: dict[str, Any], field: str, file: Path,
                 error_cls: type[Exception]) -> dict[str, dict[str, Any]]:
    """A manifest's :func:`edge_data_spec` field ``field``, checked ({} when absent)."""
    spec = manifest.get(field, {})
    ok = isinstance(spec, dict) and all(
        isinstance(v, dict) and isinstance(v.get("dtype"), str) and isinstance(v.get("shape"), list)
        for v in spec.values())
    if not ok:
        raise error_cls(f"{file}: field {field!r} = {spec!r:.80}; expected "
                        f"{{name: {{\"dtype\": str, \"shape\": [...]}}}}")
    return spec
