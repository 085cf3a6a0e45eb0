"""The distributed graph of the drop-in API: DGL's ``DistGraph`` shape over our partitions.

``distribute(g, strategy=...)`` partitions the DGLGraph a script built once for the job's shape
(rank 0; cached by a fingerprint of the graph's content) and returns a :class:`DistGraph`;
``DistGraph(partition_dir)`` opens partitions made by ``dglx partition``. Node ids are those of
the graph given (partitioners relabel internally; the graph translates at its edges), and
``g.ndata[name]`` is a :class:`NodeDataView` (docs/porting.md: "Node ids", "Masks as tensors",
"Reads and writes need no lock-step"). One concept at some 400 lines: the graph, as DGL keeps
``DistGraph`` in one file; its views, book and structure are modules of their own.
"""
from __future__ import annotations

import contextvars
import hashlib
import itertools
import os
import types
from typing import Any

import numpy as np
import torch

from dglx_dist.api.book import PartitionBook
from dglx_dist.api.edata import EdgeData, EdgeSpace, EdgeTypes
from dglx_dist.api.ndata import DEFAULT_NTYPE, NodeData, NodeDataView, NodeSpace
from dglx_dist.api.step_rows import StepRows
from dglx_dist.api.store import node_data_store, part_comm, part_of, type_spaces
from dglx_dist.api.structure import EdgeStructure
from dglx_dist.data.convert import check_convertible, from_dgl, is_heterograph
from dglx_dist.data.format import write_dataset
from dglx_dist.graphcore.heterograph import Scheme
from dglx_dist.errors import (DatasetFormatError, DglxError, InvalidValueError, NotSupportedError,
                              StateError)
from dglx_dist.kvstore import RowPolicy
from dglx_dist.kvstore.policy import rows_at
from dglx_dist.partition.load import PartitionDir
from dglx_dist.partition.types import GraphTypes
from dglx_dist.planner import graph_of_dataset, graph_of_partitions
from dglx_dist.prepare import checked_cache, ensure_partitions, made_by_rank0
from dglx_dist.runtime.agree import differing_ranks
from dglx_dist.runtime.failure import same_on_every_rank
from dglx_dist.runtime.session import Session, current_session, init
from dglx_dist.sampling import PartitionSampler
from dglx_dist.strategies.abilities import FullGraphForm
from dglx_dist.strategies.base import (SetupRequest, Strategy, build_strategy,
                                       check_partitions, fits_partitions, implied_layers,
                                       trainer_loaders)
from dglx_dist.strategies.steps import LoaderSpec

__all__ = ["DistGraph", "NodeDataView", "distribute", "node_data_store", "current_graph",
           "job_session"]

# the graph DGL's DistTensor / DistEmbedding attach to when none is named, as DGL's own find
# theirs through the client they were started with
_CURRENT: contextvars.ContextVar["DistGraph | None"] = contextvars.ContextVar(
    "dglx_dist_graph", default=None)


def current_graph() -> "DistGraph":
    """The DistGraph built last in this context."""
    graph = _CURRENT.get()
    if graph is None:
        raise StateError("no DistGraph yet: build one with dglx_dist.distribute(g) or "
                         "dglx_dist.DistGraph(partition_dir) first")
    return graph


def job_session(session: Session | None = None) -> Session:
    """``session``, else the current one, else one started here (it adopts a process group
    the script made itself, and shuts down at exit: see Session)."""
    if session is not None:
        return session
    try:
        return current_session()
    except RuntimeError:
        return init()


class DistGraph(EdgeStructure):
    """A partitioned graph trained by one strategy (collective to build).

    Args:
        partitions: a partition directory (``dglx partition`` or :func:`distribute`).
        strategy: a registered strategy name (``"auto"``: the plan's choice among those the
            partitions fit, :mod:`dglx_dist.planner.auto`) or a built strategy.
        session: the job's session (default: the current one, started if there is none).
        **options: the strategy's options (defaults work; the depth of ``granndis`` and
            ``dorylus`` comes from the model or the loader's sampler).
    """

    def __init__(self, partitions: str | os.PathLike | PartitionDir,
                 strategy: str | Strategy = "distdgl", *, session: Session | None = None,
                 **options: Any):
        self.session = job_session(session)
        self.pdir = partitions if isinstance(partitions, PartitionDir) else \
            PartitionDir(partitions)
        strategy, options = planned(strategy, options, self.session,
                                    lambda: graph_of_partitions(self.pdir),
                                    lambda built: fits_partitions(built, self.pdir,
                                                                  self.session.topology))
        self.strategy = build_strategy(strategy, options)
        try:  # every rank refuses the same partitions alike: one line, from rank 0
            check_partitions(self.strategy, self.pdir, self.session.topology)
        except DglxError as exc:
            raise same_on_every_rank(exc) from None
        maps = self.pdir.relabeling  # partitioned id -> original id, and back
        self._orig, self._part = (torch.from_numpy(m) for m in maps) if maps else (None, None)
        self.node_space = NodeSpace(DEFAULT_NTYPE, RowPolicy(self.pdir.book),
                                    int(self.pdir.num_nodes), self._part,
                                    names=self.pdir.ndata_names)  # every node, by its own id
        self.spaces = type_spaces(self.pdir) if self.pdir.types is not None else \
            {DEFAULT_NTYPE: self.node_space}  # one per node type
        self.types = self.pdir.types or GraphTypes.one_type(  # without types: _N, _E
            int(self.pdir.num_nodes), int(self.pdir.num_edges), self.pdir.feat_dim)
        self.store = node_data_store(self.session, self.pdir, self.spaces)
        self._setup: SetupRequest | None = None  # what the strategy was set up for
        self._names = itertools.count()
        self._book: PartitionBook | None = None
        self._sampler: PartitionSampler | None = None
        self.ndata = NodeData(self)
        self.edata = EdgeData(self)
        self.step_rows = StepRows(self.store)  # what a loader pulls for its steps
        self.loader_lane = None  # its loaders' worker threads' groups (api.pipeline.Lane)
        _CURRENT.set(self)

    def new_name(self, prefix: str) -> str:
        """A fresh node-data name (the same on every rank: names are made in program order)."""
        return f"{prefix}{next(self._names)}"

    # -- DGL's DistGraph surface ---------------------------------------------------------------
    @property
    def is_typed(self) -> bool:
        """Whether the graph has node or edge types (a typed partitioning)."""
        return self.pdir.types is not None

    def refuse_types(self, message: str) -> None:
        """Refuses, with ``message``, what the package does on a graph without types only
        (yet): the one place that asks whether the graph has types to say no."""
        if self.is_typed:
            raise NotSupportedError(message)

    @property
    def ntypes(self) -> list[str]:
        return list(self.spaces)

    @property
    def canonical_etypes(self) -> list[tuple[str, str, str]]:
        return [tuple(e) for e in self.types.canonical_etypes]

    @property
    def etypes(self) -> list[str]:
        return [rel for _, rel, _ in self.canonical_etypes]

    def get_ntype_id(self, ntype: str) -> int:
        """The index of ``ntype`` in :attr:`ntypes` (DGL's)."""
        return self.ntypes.index(self.space(ntype).ntype)

    def get_etype_id(self, etype) -> int:
        """The index of ``etype`` in :attr:`canonical_etypes` (DGL's)."""
        return self.canonical_etypes.index(self.to_canonical_etype(etype))

    def node_attr_schemes(self) -> dict[str, Scheme]:
        """DGL's: each node-data name's row shape and dtype (a graph without types)."""
        return _schemes(self.ndata)

    def edge_attr_schemes(self) -> dict[str, Scheme]:
        """DGL's: each edge-data name's row shape and dtype (a graph of one edge type)."""
        return _schemes(self.edata)

    def is_pinned(self) -> bool:
        """DGL's: the graph's structure is not in pinned memory (it is held by parts)."""
        return False

    def space(self, ntype: str | None) -> NodeSpace:
        """Node type ``ntype``'s rows (None: the graph's one type; one line naming the types
        otherwise)."""
        if ntype is None and len(self.spaces) == 1:
            return next(iter(self.spaces.values()))
        if ntype not in self.spaces:
            raise InvalidValueError(f"node type {ntype!r} is not one of this graph's node types "
                                    f"{self.ntypes}")
        return self.spaces[ntype]

    def get_node_partition_policy(self, ntype: str) -> NodeSpace:
        """Where node type ``ntype``'s rows live: give it to ``DistTensor`` or
        ``DistEmbedding`` as ``part_policy`` (DGL's)."""
        return self.space(ntype)

    def get_edge_partition_policy(self, etype) -> EdgeSpace:
        """Where edge type ``etype``'s rows live: give it to ``DistTensor`` as
        ``part_policy`` for one row per edge of the type (DGL's)."""
        canonical = self.to_canonical_etype(etype)
        return EdgeSpace(canonical, self.num_edges(canonical), self.get_etype_id(canonical))

    @property
    def nodes(self) -> dict[str, NodeData]:
        """``g.nodes[ntype].data[name]``: node data by type (DGL's)."""
        return {t: NodeData(self, s) for t, s in self.spaces.items()}

    @property
    def edges(self) -> EdgeTypes:
        """``g.edges[etype].data[name]``: edge data by edge type (DGL's)."""
        return EdgeTypes(self)

    def num_nodes(self, ntype: str | None = None) -> int:
        if ntype is not None:
            return self.space(ntype).num_nodes
        return int(self.pdir.num_nodes)

    def num_edges(self, etype: str | tuple[str, str, str] | None = None) -> int:
        if etype is None:
            return int(self.pdir.num_edges)
        t, offsets = self.get_etype_id(etype), self.types.etype_offsets
        return int(offsets[t + 1] - offsets[t])

    number_of_nodes, number_of_edges = num_nodes, num_edges

    @property
    def num_classes(self) -> int:
        return int(self.pdir.num_classes)

    def rank(self) -> int:
        """This trainer's rank (DGL's ``DistGraph.rank()``)."""
        return self.session.rank

    def barrier(self) -> None:
        """Waits for every rank (DGL's ``DistGraph.barrier``); rows pulled ahead before it
        are not offered to reads after it, nor the store's copies of rows of names some rank
        wrote alone before it (other ranks' writes are seen after a barrier)."""
        self.session.world.barrier()
        self.step_rows.barriers += 1
        self.store.forget_written()

    @property
    def _client(self) -> types.SimpleNamespace:
        """DGL's KVStore client of the graph as DGL's published examples reach it
        (``g._client.barrier()``): its ``barrier`` is the graph's."""
        return types.SimpleNamespace(barrier=self.barrier)

    def get_partition_book(self) -> PartitionBook:
        """DGL's partition book, in the graph's own ids (``partid``, ``partid2nids``,
        ``map_to_homo_nid``...; ``node_split(nodes, g.get_partition_book())`` takes it)."""
        if self._book is None:
            self._book = PartitionBook(self, part_of(self.session, self.pdir))
        return self._book

    def part_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """The partitioned ids (what strategies and the KVStore use) of node ``ids``."""
        return self.node_space.rows(ids)

    def node_ids(self, part_ids: torch.Tensor) -> torch.Tensor:
        """The node ids (the graph's own) of partitioned ids."""
        return part_ids if self._orig is None else rows_at(self._orig, part_ids)

    def local_nodes(self) -> torch.Tensor:
        """This rank's nodes, in the order of a full-graph forward's output rows."""
        return self.node_ids(self.full_graph_form("g.local_nodes()").local_nodes())

    # -- the strategy ----------------------------------------------------------------------------
    @property
    def is_set_up(self) -> bool:
        return self._setup is not None

    def setup(self, request: SetupRequest) -> Strategy:
        """The strategy, set up for ``request`` by the first call that needs it (collective:
        the first DataLoader, parallelize or full-graph read of every rank; later requests
        find it set up)."""
        if self._setup is None:
            self.strategy.setup(self.session, self.pdir, self.store, request)
            self._setup = request
        return self.strategy

    def full_graph_form(self, by: str) -> FullGraphForm:
        """The strategy, set up, for the full-graph form (``by``: the call, for messages)."""
        self.refuse_types(f"{by}: a graph with node types {self.ntypes} has no full-graph "
                          "form yet; iterate a dglx_dist.DataLoader")
        if not isinstance(self.strategy, FullGraphForm):
            raise NotSupportedError(f"{by}: strategy {self.strategy.registered_name!r} has no "
                                    "full-graph form; iterate a dglx_dist.DataLoader instead")
        self.setup(SetupRequest(implied_layers(self.strategy) or 2, by=by))
        return self.strategy

    def trainer_loaders(self, num_layers: int | None = None) -> tuple[LoaderSpec, LoaderSpec]:
        """The training and evaluation loaders the :class:`~dglx_dist.trainer.Trainer` uses
        for a model of ``num_layers`` graph convs (from the strategy's options)."""
        n = num_layers or implied_layers(self.strategy) or 2
        return trainer_loaders(self.strategy, n, self.num_nodes())

    def sampler(self) -> PartitionSampler:
        """Distributed neighbour sampling over the partitions, for loaders the strategy does
        not serve itself (built on first use)."""
        if self._sampler is None:
            part_id = part_of(self.session, self.pdir)
            comm = part_comm(self.session, self.pdir, part_id)
            self._sampler = PartitionSampler.of(self.pdir, self.pdir.load_part(part_id), comm,
                                                self.store)
        return self._sampler

    def close(self) -> None:
        """Releases the strategy's and the store's memory and ends its loaders' sampler
        processes (the session stays up)."""
        if self.loader_lane is not None:
            self.loader_lane.close()
        if self._setup is not None:
            self.strategy.close()
            self._setup = None
        self.store.close()

    def __repr__(self) -> str:
        return (f"DistGraph(num_nodes={self.num_nodes()}, num_edges={self.num_edges()}, "
                f"parts={self.pdir.num_parts}, strategy={self.strategy.registered_name!r})")


def fingerprint(g) -> str:
    """A digest of a graph's structure, node and edge data (what its partitions hold): a
    DGLGraph or the package's graph, with or without types (one type: ``_N``, ``_E``), read
    through the same API (the same content, the same digest)."""
    h = hashlib.sha256()
    parts = []
    for et in g.canonical_etypes:  # every edge type's ends and data
        key = ":".join(et)
        src, dst = g.edges(etype=et)
        parts += [(f"src@{key}", src), (f"dst@{key}", dst)] + \
            [(f"edge:{name}@{key}", t) for name, t in sorted(g.edges[et].data.items())]
    for nt in g.ntypes:  # every node type's data and size
        parts += [(f"{name}@{nt}", t) for name, t in sorted(g.nodes[nt].data.items())]
        parts.append((f"nodes@{nt}", torch.tensor([g.num_nodes(nt)])))
    for name, t in parts:
        array = np.ascontiguousarray(t.detach().cpu().numpy())
        h.update(f"{name}:{array.dtype}:{array.shape}".encode())
        h.update(array.data)
    return h.hexdigest()[:16]


def _same_everywhere(session: Session, key: str) -> None:
    differ = differing_ranks(session, torch.tensor([int(key[:15], 16)]))
    if differ:
        error = InvalidValueError(f"distribute: the graph differs between ranks (ranks {differ} "
                                  "differ from rank 0); build it the same way on every rank (fixed "
                                  "seeds for random transforms)")
        raise same_on_every_rank(error)  # the same message everywhere: rank 0 says it


def distribute(g, strategy: str | Strategy = "distdgl", *,
               cache_dir: str | os.PathLike = "dglx-partitions", session: Session | None = None,
               wait_timeout: float = 3600.0, **options: Any) -> DistGraph:
    """The distributed graph of ``g`` for ``strategy`` (collective).

    Args:
        g: a DGLGraph with ndata ``feat`` (``label`` and masks optional), or a heterograph
            with node data by type (a type may have none), built the same way on every rank;
            or the package's graph of either kind (``dglx_dist.graph`` / ``heterograph``,
            no DGL needed); or a partition directory (opened as it is).
        strategy: a registered strategy name (``"auto"``: the plan's choice for this graph
            and the session's topology, :mod:`dglx_dist.planner.auto`) or a built strategy.
        cache_dir: where the graph and its partitions are cached (shared by every node of a
            multi-node job).
        session: the job's session (default: the current one, started if there is none).
        wait_timeout: seconds the other ranks wait for rank 0's partitions.
        **options: the strategy's options.
    """
    session = job_session(session)
    if isinstance(g, (str, os.PathLike, PartitionDir)):
        return DistGraph(g, strategy, session=session, **options)
    try:  # every rank holds its own copy of the same graph: one line, from rank 0
        if not is_heterograph(g):
            check_convertible(g, "distribute")
        dataset = from_dgl(g, source="dglx_dist.distribute")  # views of g's tensors mostly
    except DatasetFormatError as exc:
        raise same_on_every_rank(exc) from None
    strategy, options = planned(strategy, options, session, lambda: graph_of_dataset(dataset))
    built = build_strategy(strategy, options)
    if is_heterograph(g) and built.capabilities.typed_graphs:
        built.check_typed("the heterograph given to distribute")  # before any collective
    key = fingerprint(g)
    _same_everywhere(session, key)
    data = checked_cache(cache_dir) / f"graph-{key}"
    made_by_rank0(session, data, "meta.json", lambda: write_dataset(dataset, data),
                  "writing the graph given to distribute", wait_timeout)
    parts = ensure_partitions(data, built, session, cache_dir, wait_timeout)
    return DistGraph(parts, built, session=session)


def planned(strategy: str | Strategy, options: dict[str, Any], session: Session, graph,
            accept=None) -> tuple[str | Strategy, dict[str, Any]]:
    """``strategy`` and ``options``, with ``"auto"`` resolved by a plan
    (:func:`dglx_dist.planner.auto.resolve`) for ``graph()`` on the session's topology (a
    server's memory: the machine's total, shared by the servers emulated on it; the model
    is not known here: a GraphSAGE, hidden 64, of the depth the options imply; on the
    session's device: a GPU's model at its speed-up); rank 0 logs the plan's two lines."""
    import psutil

    from dglx_dist.planner.auto import Launch, resolve, server_cores, shared_cores

    topo, env = session.topology, session.env
    memory = psutil.virtual_memory().total * topo.ranks_per_server / env.ranks_on_host
    launch = Launch(topo.num_servers, topo.ranks_per_server, memory,
                    shared_cores=shared_cores(env.ranks_on_host, env.world_size),
                    loaders=True,  # a script's DataLoaders
                    server_cores=server_cores(env.ranks_on_host, topo.ranks_per_server),
                    gpu=session.device.type == "cuda")
    name, options, _ = resolve(strategy, options, graph, launch, accept=accept,
                               tell=session.is_main)
    return name, options


def _schemes(data) -> dict[str, Scheme]:
    """Each name of ``data`` (``g.ndata`` or ``g.edata``) with its rows' shape and dtype."""
    return {n: Scheme(tuple(data[n].shape[1:]), data[n].dtype) for n in data}
