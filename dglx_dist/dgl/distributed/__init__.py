"""``dgl.distributed``'s API over dglx_dist: a DistDGL script runs with its imports changed.

``import dglx_dist.dgl as dgl`` (or ``import dglx_dist.dgl.distributed``) in place of DGL gives
``initialize``, ``DistGraph(graph_name, part_config=...)``, the splits, ``DistTensor``,
``DistEmbedding``, ``optim``, the loaders and the functions over a graph with DGL's
signatures, under torchrun: no ip_config, no servers, no SSH; the rest of DGL's names are
placed by :mod:`~dglx_dist.dgl.distributed.surface` (docs/porting.md says which is whose).
Partitions written by DGL's ``partition_graph`` are imported once (rank 0, cached by the
JSON's content; :func:`~dglx_dist.partition.import_dgl_partitions`), laid out by columns once
more for a strategy that needs it (``p3``). The graph trains under ``distdgl`` unless
``dglx_dist.run --strategy NAME`` (:mod:`dglx_dist.dgl.run`) or ``strategy=`` says otherwise.
"""
from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any


from dglx_dist.api import graph as _graph
from dglx_dist.api.embedding import DistEmbedding
from dglx_dist.api.split import edge_split, node_split
from dglx_dist.api.tensor import DistTensor
from dglx_dist.dgl.distributed import optim
from dglx_dist.dgl.distributed.dataloader import (DistDataLoader, DistEdgeDataLoader,
                                                  DistNodeDataLoader)
from dglx_dist.dgl.distributed.surface import (DGLS_OWN, SERVER_ONLY, find_edges,
                                               in_subgraph, sample_etype_neighbors,
                                               sample_neighbors, server_only)
from dglx_dist.config import AUTO
from dglx_dist.errors import InvalidValueError
from dglx_dist.prepare import checked_cache, made_by_rank0
from dglx_dist.strategies.base import Strategy, build_strategy

__all__ = ["initialize", "DistGraph", "node_split", "edge_split", "DistTensor", "DistEmbedding",
           "optim", "DistNodeDataLoader", "DistEdgeDataLoader", "DistDataLoader",
           "sample_neighbors",
           "sample_etype_neighbors", "find_edges", "in_subgraph", "exit_client",
           "import_cached"]

log = logging.getLogger(__name__)


def __getattr__(name: str) -> Any:
    """DGL's offline tools (``partition_graph``, ``load_partition_book``...) are DGL's own; its
    server and RPC names are stand-ins that refuse in one line
    (:mod:`~dglx_dist.dgl.distributed.surface`)."""
    if name in SERVER_ONLY:
        return server_only(name)
    if name in DGLS_OWN:
        import dgl.distributed

        return getattr(dgl.distributed, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def initialize(ip_config: str | None = None, *args: Any, **kwargs: Any) -> None:
    """DGL's ``initialize``: nothing to start here (torchrun started the processes; there are
    no servers). The session starts with the first :class:`DistGraph`, after the script's own
    ``init_process_group`` if it has one."""
    if ip_config is not None:
        log.info("dglx_dist.dgl.distributed.initialize: ip_config %s is not needed (torchrun)",
                 ip_config)


def exit_client() -> None:
    """DGL's ``exit_client``: the session shuts down at interpreter exit by itself."""


_IMPORT = b"2"  # what the import keeps (2: every node data name); a change re-imports


def _key(json_path: Path) -> str:
    h = hashlib.sha256(_IMPORT + json_path.read_bytes())
    # one walk: the part files, DGL's (.dgl) and GraphBolt's (.pt)
    parts = (p for p in json_path.parent.rglob("*") if p.suffix in (".dgl", ".pt"))
    for p in sorted(parts):
        st = p.stat()
        h.update(f"{p.relative_to(json_path.parent)}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def import_cached(json_path: str | os.PathLike, session, cache_dir: str | os.PathLike,
                  wait_timeout: float = 3600.0, layout: str = "rows") -> Path:
    """DGL's partitions as a dglx partition directory: imported by rank 0 into ``cache_dir``
    the first time (the other ranks wait for the files), reused afterwards. With ``layout``
    "columns" (P3's), the import's features laid out by columns
    (:func:`~dglx_dist.partition.columns.by_columns`), cached beside it: DGL's node
    assignment and ids are kept either way."""
    from dglx_dist.partition import import_dgl_partitions
    from dglx_dist.partition.columns import by_columns
    from dglx_dist.partition.io import MANIFEST

    if layout not in ("rows", "columns"):
        raise InvalidValueError(f"import_cached: layout {layout!r}; expected 'rows' or "
                                "'columns'")
    json_path = Path(json_path)
    out = checked_cache(cache_dir) / f"dgl-{json_path.stem}-{_key(json_path)}"
    rows = made_by_rank0(session, out, MANIFEST, lambda: import_dgl_partitions(json_path, out),
                         f"importing DGL partitions {json_path}", wait_timeout)
    if layout == "rows":
        return rows
    cols = out.with_name(out.name + "-columns")
    return made_by_rank0(session, cols, MANIFEST, lambda: by_columns(rows, cols),
                         f"laying DGL partitions {json_path} out by columns", wait_timeout)


def DistGraph(graph_name: str, gpb=None, part_config: str | os.PathLike | None = None, *,
              strategy: str | Strategy = "distdgl",
              cache_dir: str | os.PathLike = "dglx-partitions", **options: Any) -> _graph.DistGraph:
    """DGL's ``DistGraph(graph_name, part_config=...)``: the graph of DGL's partitions (a
    ``partition_graph`` JSON) or of a dglx partition directory.

    Args:
        graph_name: DGL's graph name (kept for the log).
        gpb: DGL's; accepted (the partition book comes from the partitions).
        part_config: the JSON ``partition_graph`` wrote, or a dglx partition directory.
        strategy: the strategy to train with (DistDGL's own by default), a registered name
            (``"auto"``: the plan's choice among the strategies the partitions fit) or a
            built strategy.
        cache_dir: where imported partitions are kept.
        **options: the strategy's options.
    """
    if part_config is None:
        raise InvalidValueError(f"DistGraph({graph_name!r}): part_config is required (the JSON "
                                "dgl.distributed.partition_graph wrote, or a dglx partition "
                                "directory); standalone graphs without partitions are not "
                                "supported")
    session = _graph.job_session()
    path = Path(part_config)
    if strategy == AUTO:  # DGL's parts are METIS rows: 'auto' chooses among those they fit
        layout, built, options = "rows", strategy, options
    else:
        built, options = build_strategy(strategy, options), {}
        layout = built.partition_spec(session.topology).feature_layout or "rows"
    if path.suffix == ".json":  # the layout the strategy's partitioner writes, DGL's ids kept
        path = import_cached(path, session, cache_dir, layout=layout)
    return _graph.DistGraph(path, built, session=session, **options)


