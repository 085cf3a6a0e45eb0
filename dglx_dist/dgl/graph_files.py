"""DGL's graph files: the ``graph.dgl`` of one part of DGL's ``partition_graph`` output, read
with ``dgl.load_graphs`` after its magic number is checked (docs/partition_format.md), for
:func:`~dglx_dist.partition.dgl_files.load_part_graph`. The rest of DGL's partition files
(the feature files, GraphBolt's part graphs, the id maps) are read without DGL in
:mod:`dglx_dist.partition`.
"""
from __future__ import annotations

import re
from pathlib import Path

import dgl
import numpy as np

from dglx_dist.errors import PartitionFormatError
from dglx_dist.partition.dgl_tensors import PartGraph

__all__ = ["load_graph_file"]

_ERR = PartitionFormatError


def load_graph_file(file: Path, typed: bool) -> PartGraph:
    """The one partition graph of a ``graph.dgl``, with the data DGL's ``partition_graph``
    gives it (``_TYPE`` of nodes and edges as well when ``typed``)."""
    _check_graph_magic(file)
    try:
        graphs, _ = dgl.load_graphs(str(file))
    except (dgl.DGLError, OSError) as exc:
        raise _ERR(f"{file}: not a readable DGL graph file ({_dgl_reason(exc)}); expected "
                   f"the graph.dgl partition_graph writes") from None
    if len(graphs) != 1:
        raise _ERR(f"{file}: holds {len(graphs)} graphs; expected one partition graph")
    g = graphs[0]
    if len(g.ntypes) != 1 or len(g.canonical_etypes) != 1:
        raise _ERR(f"{file}: node types {g.ntypes}, edge types {g.canonical_etypes}; expected "
                   f"the homogeneous part graph partition_graph writes (types in "
                   f"ndata/edata['_TYPE'])")
    wanted = [("ndata", "inner_node"), ("ndata", "_ID"), ("edata", "_ID")]
    if typed:
        wanted += [("ndata", "_TYPE"), ("edata", "_TYPE")]
    found: dict[str, dict[str, np.ndarray]] = {"ndata": {}, "edata": {}}
    for kind, key in wanted:
        data = getattr(g, kind)
        if key not in data:
            raise _ERR(f"{file}: {kind}[{key!r}] is missing (found {sorted(data.keys())}); "
                       f"expected a part graph written by dgl.distributed.partition_graph"
                       f"{' of a heterograph' if typed else ''}")
        found[kind][key] = data[key].numpy().astype(bool if key == "inner_node" else np.int64)
    src, dst = (t.numpy().astype(np.int64) for t in g.edges())
    return PartGraph(file, g.num_nodes(), src, dst, found["ndata"], found["edata"])


_GRAPH_MAGIC = 0xDD2E4FF046B4A13F  # kDGLSerializeMagic, the first u64 of save_graphs' files


def _check_graph_magic(file: Path) -> None:
    """Refuses a file that does not start as DGL's graph files do, in our words: DGL's own
    refusal carries its C++ stack trace."""
    try:
        with open(file, "rb") as stream:
            head = stream.read(8)
    except OSError as exc:
        raise _ERR(f"{file}: cannot be read ({exc.strerror or exc}); expected a DGL graph "
                   f"file") from None
    found = int.from_bytes(head, "little") if len(head) == 8 else None
    if found != _GRAPH_MAGIC:
        start = f"it starts with {found:#018x}" if found is not None else f"{len(head)} bytes"
        raise _ERR(f"{file}: not a DGL graph file ({start}); expected DGL's graph file magic "
                   f"{_GRAPH_MAGIC:#018x} (the graph.dgl partition_graph writes)")


def _dgl_reason(exc: Exception) -> str:
    """DGL's message without the C++ stack trace and log prefix it carries (about 1.5 kB),
    so that the refusal stays one short line."""
    text = str(exc).split("Stack trace:")[0].strip()
    return re.sub(r"^\[[\d:]+\] \S+:\d+: ", "", text)
