"""DGL's ``dgl.graph`` / ``dgl.heterograph`` without DGL: the package's
:class:`~dglx_dist.graphcore.heterograph.Graph` from DGL's arguments.

``graph((src, dst), num_nodes=None, idtype=None, device=None)`` and
``heterograph({(src_type, relation, dst_type): (src, dst), ...}, num_nodes_dict=None, ...)``.
As in DGL: the edges keep the order given (their ids); ids are int64 unless ``idtype`` (int32
or int64) says otherwise or the ends are int32 tensors; the node counts are the largest id + 1
unless given (a CSR/CSC matrix counts its rows); the graph is on the ends' device unless
``device`` moves it. Input DGL would refuse is refused in one line (a
:class:`~dglx_dist.errors.DglxError`), and so are negative ids and ids past the graph's
nodes, which DGL's checks let through. :func:`to_graph` is the package's graph of a dataset.
"""
from __future__ import annotations

import operator
import types
from typing import Any, Mapping

import torch

from dglx_dist.errors import (IdOutOfRangeError, InvalidTypeError, InvalidValueError,
                              UnknownNameError)
from dglx_dist.graphcore.heterograph import Graph
from dglx_dist.graphcore.types import ONE_ETYPE, ONE_NTYPE, Etype

__all__ = ["graph", "heterograph", "to_graph", "MASK_KEYS"]

MASK_KEYS = {"train": "train_mask", "val": "val_mask", "test": "test_mask"}
"""The dataset's splits (ours) -> the names of their masks in a graph's node data (DGL's)."""

_IDTYPES = (torch.int32, torch.int64)


def graph(data, *, num_nodes: int | None = None, idtype: torch.dtype | None = None,
          device=None, row_sorted: bool = False, col_sorted: bool = False) -> Graph:
    """A graph of one node type and one edge type (DGL's ``dgl.graph``).

    Args:
        data: the edges: ``(src, dst)`` (tensors or sequences of ids), ``("coo", (src,
            dst))``, ``("csr", (indptr, indices, eids))`` or ``("csc", (indptr, indices,
            eids))`` (``eids`` empty: the edges in the matrix's order).
        num_nodes: the node count (default: the largest id + 1).
        idtype: ``torch.int32`` or ``torch.int64`` (default: the ends' dtype if they are
            tensors, else int64).
        device: where the graph is (default: where the ends are).
        row_sorted: DGL's hint that the edges are sorted by source; taken, not needed.
        col_sorted: DGL's hint that they are sorted by destination; taken, not needed.
    """
    del row_sorted, col_sorted
    src, dst, needs = _ends(data, idtype, "graph")
    n = max(needs) if num_nodes is None else _count(num_nodes, "graph: num_nodes")
    if n < max(needs):
        raise IdOutOfRangeError(f"graph: num_nodes is {n}, but the largest id is "
                                f"{max(needs) - 1}; expected more nodes than the largest id")
    return _built({ONE_NTYPE: n}, {ONE_ETYPE: (src, dst)}, device, "graph")


def heterograph(data_dict: Mapping, num_nodes_dict: Mapping[str, int] | None = None,
                idtype: torch.dtype | None = None, device=None) -> Graph:
    """A graph of node types and edge types (DGL's ``dgl.heterograph``).

    Args:
        data_dict: ``(src_type, relation, dst_type)`` -> the edges of that type, in per-type
            ids, in any form :func:`graph` takes.
        num_nodes_dict: node type -> node count (default: each type's largest id + 1; a type
            named here only is a type without edges).
        idtype: as :func:`graph`'s (every edge type's ids of one dtype).
        device: as :func:`graph`'s.
    """
    if not isinstance(data_dict, Mapping) or not data_dict:
        raise InvalidValueError(f"heterograph: data_dict is {data_dict!r}; expected a non-empty "
                                "dict of (src_type, relation, dst_type) -> (src, dst)")
    ends, needs = {}, {}
    for key, data in data_dict.items():
        etype = _canonical(key)
        src, dst, (n_src, n_dst) = _ends(data, idtype, f"heterograph: edge type {etype}")
        ends[etype] = (src, dst)
        for ntype, need in ((etype[0], n_src), (etype[2], n_dst)):
            needs[ntype] = max(needs.get(ntype, 0), need)
    counts = needs if num_nodes_dict is None else _given_counts(num_nodes_dict, needs)
    return _built(counts, ends, device, "heterograph")


def _canonical(key: Any) -> Etype:
    if not (isinstance(key, tuple) and len(key) == 3 and all(isinstance(k, str) for k in key)):
        raise InvalidValueError(f"heterograph: edge type {key!r}; expected a (src_type, "
                                "relation, dst_type) triple of strings")
    return key


def _count(value: Any, what: str) -> int:
    try:
        n = operator.index(value)
    except TypeError:
        raise InvalidTypeError(f"{what} is a {type(value).__name__}; expected an int") from None
    if n < 0:
        raise InvalidValueError(f"{what} is {n}; expected a count >= 0")
    return n


def _given_counts(num_nodes_dict: Mapping, needs: dict[str, int]) -> dict[str, int]:
    """``num_nodes_dict`` checked against the ids of the edges (``needs``: each node type's
    largest id + 1)."""
    if not isinstance(num_nodes_dict, Mapping):
        raise InvalidTypeError(f"heterograph: num_nodes_dict is a "
                               f"{type(num_nodes_dict).__name__}; expected a dict of node type "
                               "-> count")
    counts = {t: _count(n, f"heterograph: num_nodes_dict[{t!r}]")
              for t, n in num_nodes_dict.items()}
    missing = sorted(set(needs) - set(counts))
    if missing:
        raise UnknownNameError(f"heterograph: node types {missing} of the edge types have no "
                               f"count in num_nodes_dict (it names {sorted(counts)}); expected "
                               "every node type")
    for ntype, need in needs.items():
        if counts[ntype] < need:
            raise IdOutOfRangeError(f"heterograph: num_nodes_dict[{ntype!r}] is "
                                    f"{counts[ntype]}, but node type {ntype!r}'s largest id is "
                                    f"{need - 1}; expected more nodes than the largest id")
    return counts


def _built(counts: dict[str, int], ends: dict[Etype, tuple], device, what: str) -> Graph:
    dtypes = {src.dtype for src, _ in ends.values()}
    if len(dtypes) > 1:
        raise InvalidTypeError(f"{what}: the edge types' ids are of dtypes "
                               f"{sorted(map(str, dtypes))}; expected one (or give idtype=...)")
    places = {src.device for src, _ in ends.values()}
    if len(places) > 1:
        raise InvalidValueError(f"{what}: the edge types' ids are on devices "
                                f"{sorted(map(str, places))}; expected one")
    g = Graph(counts, ends, dtypes.pop(), places.pop())
    return g if device is None else g.to(device)


def _ends(data: Any, idtype: torch.dtype | None, what: str) -> tuple:
    """``(src, dst, (sources' count, destinations' count))`` of edges ``data`` in a form
    :func:`graph` takes (the counts: what the ids and the matrix's rows need)."""
    if not isinstance(data, tuple) or len(data) != 2:
        raise InvalidTypeError(f"{what}: edges given as a {type(data).__name__}; expected "
                               f"(src, dst) or (format, arrays) with a format of {list(_FORMATS)}")
    fmt, arrays = data if isinstance(data[0], str) else ("coo", data)
    if fmt not in _FORMATS:
        raise InvalidValueError(f"{what}: sparse format {fmt!r}; expected one of "
                                f"{list(_FORMATS)}")
    names = _FORMATS[fmt][1]
    if not isinstance(arrays, (tuple, list)) or len(arrays) != len(names):
        raise InvalidValueError(f"{what}: {fmt} edges take {len(names)} arrays "
                                f"({', '.join(names)})")
    return _FORMATS[fmt][0](*_id_arrays(arrays, names, idtype, what), what)


def _id_arrays(arrays, names: tuple[str, ...], idtype, what: str) -> list[torch.Tensor]:
    """``arrays`` as 1-D id tensors of one dtype (``idtype``; else that of the tensors
    given, int64 for sequences) on one device (the tensors'), none negative."""
    if idtype is not None and idtype not in _IDTYPES:
        raise InvalidValueError(f"{what}: idtype {idtype}; expected torch.int32 or torch.int64")
    out = [_id_tensor(a, name, what) for a, name in zip(arrays, names)]
    given = [t for a, t in zip(arrays, out) if isinstance(a, torch.Tensor) and t.numel()]
    if len({t.device for t in given}) > 1 or idtype is None and len({t.dtype for t in given}) > 1:
        raise InvalidTypeError(f"{what}: {', '.join(names)} differ in dtype or device "
                               f"({', '.join(f'{t.dtype} on {t.device}' for t in given)}); "
                               "expected one (or give idtype=...)")
    dtype = idtype or (given[0].dtype if given else torch.int64)
    if dtype not in _IDTYPES:
        raise InvalidTypeError(f"{what}: ids of dtype {dtype}; expected torch.int32 or "
                               "torch.int64 (or give idtype=...)")
    out = [t.to(given[0].device if given else t.device, dtype) for t in out]
    for t, name in zip(out, names):
        if t.numel() and int(t.min()) < 0:
            raise IdOutOfRangeError(f"{what}: {name} holds id {int(t.min())}; expected ids >= 0")
    return out


def _id_tensor(a: Any, name: str, what: str) -> torch.Tensor:
    """``a`` (a tensor, or a sequence of ids: int64) as a 1-D integer tensor."""
    try:
        t = a if isinstance(a, torch.Tensor) else torch.as_tensor(a)
    except (TypeError, ValueError, RuntimeError):
        raise InvalidTypeError(f"{what}: {name} is a {type(a).__name__}; expected a tensor "
                               "or a sequence of ids") from None
    if not isinstance(a, torch.Tensor) and not t.numel():
        t = t.to(torch.int64)  # [] reads as float
    if t.dim() != 1 or t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise InvalidTypeError(f"{what}: {name} has shape {tuple(t.shape)} and dtype "
                               f"{t.dtype}; expected a 1-D sequence of integer ids")
    return t if isinstance(a, torch.Tensor) else t.to(torch.int64)


def _top(ids: torch.Tensor) -> int:
    return int(ids.max()) + 1 if ids.numel() else 0


def _coo(src: torch.Tensor, dst: torch.Tensor, what: str) -> tuple:
    if src.numel() != dst.numel():
        raise InvalidValueError(f"{what}: src has {src.numel()} ids and dst {dst.numel()}; "
                                "expected one source and one destination per edge")
    return src, dst, (_top(src), _top(dst))


def _compressed(indptr: torch.Tensor, indices: torch.Tensor, eids: torch.Tensor,
                what: str, by_dst: bool = False) -> tuple:
    """A compressed matrix's edges ``(src, dst, (sources' count, destinations' count))`` in
    edge-id order: rows are the sources (CSR), or with ``by_dst`` the destinations (CSC)."""
    m, rows = indices.numel(), indptr.numel() - 1
    if rows < 0 or int(indptr[0]) != 0 or int(indptr[-1]) != m or \
            bool((indptr[1:] < indptr[:-1]).any()):
        raise InvalidValueError(f"{what}: indptr is not a row pointer of {m} indices; expected "
                                f"0 first, {m} last, never decreasing")
    row = torch.repeat_interleave(torch.arange(rows, dtype=indices.dtype, device=indices.device),
                                  (indptr[1:] - indptr[:-1]).long())
    if eids.numel():
        order = torch.arange(m, dtype=eids.dtype, device=eids.device)
        if eids.numel() != m or not torch.equal(torch.sort(eids).values, order):
            raise InvalidValueError(f"{what}: the edge ids are not one each of 0..{m - 1}; "
                                    "expected one id per index, or none")
        by_id = torch.empty_like(eids).index_put_((eids.long(),), order)  # each id's entry
        row, indices = row.index_select(0, by_id.long()), indices.index_select(0, by_id.long())
    ends, counts = (row, indices), (rows, _top(indices))
    return (*ends[::-1], counts[::-1]) if by_dst else (*ends, counts)


def _csc(indptr, indices, eids, what: str) -> tuple:
    return _compressed(indptr, indices, eids, what, by_dst=True)


# sparse format -> (its edges, the names of its arrays)
_FORMATS = types.MappingProxyType({"coo": (_coo, ("src", "dst")),
                                   "csr": (_compressed, ("indptr", "indices", "eids")),
                                   "csc": (_csc, ("indptr", "indices", "eids"))})


def to_graph(ds) -> Graph:
    """The package's graph of a :class:`~dglx_dist.data.dataset.GraphDataset`, without DGL:
    its edges (in file order) and its node and edge data."""
    g = heterograph({et: (torch.from_numpy(e.src), torch.from_numpy(e.dst))
                     for et, e in ds.edges.items()},
                    num_nodes_dict={t: n.num_nodes for t, n in ds.nodes.items()})
    for ntype, n in ds.nodes.items():
        data = g.nodes[ntype].data
        if n.feat is not None:
            data["feat"] = torch.from_numpy(n.feat)
        if n.labeled:
            data["label"] = torch.from_numpy(n.label)
            for ours, values in n.masks().items():
                data[MASK_KEYS[ours]] = torch.from_numpy(values)
    for etype, e in ds.edges.items():
        for name, values in e.edata.items():
            g.edges[etype].data[name] = torch.from_numpy(values)
    return g
