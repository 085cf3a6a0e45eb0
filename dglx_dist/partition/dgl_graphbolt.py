"""Reading a part graph that DGL saved in GraphBolt's format, ``fused_csc_sampling_graph.pt``
(named by the JSON's ``part-{i}.part_graph_graphbolt``; docs/partition_format.md, "GraphBolt's
part graphs", says what the file holds and how it is imported).

The file is ``torch.save``'s archive of a pickled ``FusedCSCSamplingGraph`` whose C++ graph
keeps its state as dicts of tensors (DGL's ``graphbolt/src/fused_csc_sampling_graph.cc``,
``GetState``: ``independent_tensors``, ``node_attributes``, ``edge_attributes``). It is read
**without DGL and without running anything from the file**: ``torch.load`` with an unpickler
that resolves only the globals such a file holds, stand-ins for DGL's two classes; any other
global is refused before it is looked up.
"""
from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dglx_dist.data.torch_files import RefusedGlobal, load_allowed
from dglx_dist.errors import PartitionFormatError
from dglx_dist.partition.dgl_tensors import PartGraph

__all__ = ["read_graphbolt"]

_ERR = PartitionFormatError
_SCRIPT_CLASS = "__torch__.torch.classes.graphbolt.FusedCSCSamplingGraph"


class _Stand:
    """Stands in for ``FusedCSCSamplingGraph`` and its TorchScript object: keeps the state
    the pickle gives it."""

    def __setstate__(self, state: Any) -> None:
        self.state = state


_ALLOWED = {
    ("dgl.graphbolt.impl.fused_csc_sampling_graph", "FusedCSCSamplingGraph"): _Stand,
    ("torch", "ScriptObject"): _Stand,
    ("torch._utils", "_rebuild_tensor_v2"): torch._utils._rebuild_tensor_v2,
    ("collections", "OrderedDict"): collections.OrderedDict,
}


def _graph_state(file: Path) -> dict[str, Any]:
    """The C++ graph's state dict, read with :data:`_ALLOWED`'s globals alone."""
    try:
        top = load_allowed(file, _ALLOWED)
    except RefusedGlobal as exc:
        raise _ERR(f"{file}: names {exc}, which a GraphBolt part graph does not hold; expected "
                   f"the FusedCSCSamplingGraph DGL's dgl_partition_to_graphbolt writes "
                   f"(nothing in the file was run)") from None
    except Exception as exc:  # noqa: BLE001 - any reader failure is a bad file for the user
        raise _ERR(f"{file}: not a readable GraphBolt graph file ({exc})") from None
    inner = getattr(top, "state", None)
    script = inner.get("_c_csc_graph") if isinstance(inner, dict) else None
    state = getattr(script, "state", None)
    if not (isinstance(state, tuple) and len(state) == 2 and state[1] == _SCRIPT_CLASS
            and isinstance(state[0], dict) and "independent_tensors" in state[0]):
        raise _ERR(f"{file}: holds {type(top).__name__}, not a FusedCSCSamplingGraph of "
                   f"GraphBolt; expected the file dgl_partition_to_graphbolt writes")
    return state[0]


def _ints(file: Path, where: str, t: Any, size: int | None = None) -> np.ndarray:
    if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.is_floating_point() or \
            t.is_complex() or (size is not None and t.numel() != size):
        shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
        want = f"{size} " if size is not None else ""
        raise _ERR(f"{file}: {where} is {shape}; expected a vector of {want}integers")
    return t.numpy().astype(np.int64)


def read_graphbolt(file: Path, core: tuple[int, int]) -> PartGraph:
    """The part graph in ``file``, local ids as in DGL's ``graph.dgl``: ``ndata`` holds
    ``_ID`` and ``inner_node`` (derived from ``core``, the part's ``[lo, hi)`` of new node
    ids, when the file has none), ``edata`` holds ``_ID`` and, on a heterograph, ``_TYPE``.

    Raises:
        PartitionFormatError: unreadable, not a GraphBolt graph, or its arrays disagree.
    """
    state = _graph_state(file)
    tensors = state["independent_tensors"]
    nattr, eattr = state.get("node_attributes") or {}, state.get("edge_attributes") or {}
    if "_ID" not in nattr:
        raise _ERR(f"{file}: node_attributes {sorted(nattr)} lack '_ID' (DGL's node ids); "
                   f"expected a part graph written by dgl_partition_to_graphbolt")
    gid = _ints(file, "node_attributes['_ID']", nattr["_ID"])
    indptr = _ints(file, "indptr", tensors.get("indptr"), gid.size + 1)
    indices = _ints(file, "indices", tensors.get("indices"))
    if indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != indices.size:
        raise _ERR(f"{file}: indptr runs from {indptr[0]} to {indptr[-1]} over {indices.size} "
                   f"edges; expected a non-decreasing run from 0 to the number of edges")
    if indices.size and (indices.min() < 0 or indices.max() >= gid.size):
        raise _ERR(f"{file}: indices holds node {int(indices.max())}; expected local node "
                   f"ids in [0, {gid.size})")
    if "_ID" not in eattr:
        raise _ERR(f"{file}: edge_attributes {sorted(eattr)} lack '_ID' (DGL's edge ids, which "
                   f"cannot be recovered once GraphBolt has reordered the edges); convert with "
                   f"dgl.distributed.dgl_partition_to_graphbolt(part_config, store_eids=True) "
                   f"(the default from DGL 2.2), or keep the part's graph.dgl in the JSON")
    edata = {"_ID": _ints(file, "edge_attributes['_ID']", eattr["_ID"], indices.size)}
    if tensors.get("type_per_edge") is not None:
        edata["_TYPE"] = _ints(file, "type_per_edge", tensors["type_per_edge"], indices.size)
    inner = nattr.get("inner_node")
    ndata = {"_ID": gid, "inner_node": (gid >= core[0]) & (gid < core[1]) if inner is None
             else _ints(file, "node_attributes['inner_node']", inner, gid.size) != 0}
    dst = np.repeat(np.arange(gid.size, dtype=np.int64), np.diff(indptr))
    return PartGraph(file, gid.size, indices, dst, ndata, edata)
