"""``node_split`` / ``edge_split``: each rank's share of a set of nodes or edges, as DGL's
``dgl.distributed.node_split`` and ``edge_split``."""
from __future__ import annotations

import torch

from dglx_dist.api.book import PartitionBook, given_edge_ids
from dglx_dist.api.graph import DistGraph
from dglx_dist.api.ndata import DEFAULT_NTYPE, NodeDataView
from dglx_dist.errors import InvalidTypeError, InvalidValueError
from dglx_dist.runtime.agree import differing_ranks, ids_digest, on_every_rank
from dglx_dist.sampling import even_chunk
from dglx_dist.strategies.abilities import OwnSplit
from dglx_dist.strategies.base import split_ids

__all__ = ["node_split", "edge_split", "node_share", "edge_share", "trainer_share"]


def _all_ids(nodes, graph: DistGraph) -> torch.Tensor:
    if isinstance(nodes, NodeDataView):
        if nodes._g is not graph:
            raise InvalidValueError("node_split: the mask belongs to another DistGraph")
        return torch.nonzero(nodes.full().bool()).squeeze(1)
    return nodes


def _node_type(nodes, graph: DistGraph, ntype: str) -> str:
    """The node type ``node_split`` splits (``_N``, DGL's default, on a graph without types;
    where the graph has no ``_N``, a mask of a type says its type)."""
    view = nodes.space if isinstance(nodes, NodeDataView) else None
    if ntype == DEFAULT_NTYPE and ntype not in graph.spaces:  # DGL's default, not a type
        if view is None:
            raise InvalidValueError(f"node_split: this graph has node types {graph.ntypes}; "
                                    "pass ntype= naming the type of the nodes")
        ntype = view.ntype  # DGL asks for ntype; the view says it
    space = graph.space(ntype)  # refuses an unknown type, naming the graph's
    if view is not None and view is not space:
        raise InvalidValueError(f"node_split: {nodes.what} is a mask of node type "
                                f"{view.ntype!r}, not of ntype={ntype!r}")
    return space.ntype


def node_split(nodes, partition_book: DistGraph | PartitionBook | None = None,
               ntype: str = "_N",
               rank: int | None = None, force_even: bool = True,
               node_trainer_ids=None) -> torch.Tensor:
    """This rank's share of ``nodes`` (collective).

    Every rank passes the same ``nodes`` (a boolean mask over all nodes, e.g.
    ``g.ndata["train_mask"]``, or ids) and gets its part: disjoint parts, together all of
    them, each mostly of nodes its server holds. How they are cut is the strategy's (DistDGL's
    two-level split by default; the owners' nodes for the full-graph strategies).

    Args:
        nodes: boolean mask or node ids.
        partition_book: the :class:`~dglx_dist.api.DistGraph` (or its
            ``get_partition_book()``); may be left out when ``nodes`` is one of its views.
        ntype: the node type of ``nodes`` on a graph with node types (per-type ids come
            back); DGL's default ``"_N"`` on a graph without.
        force_even: DGL's; accepted (the split is always balanced).
        node_trainer_ids: each node's trainer, as DGL's ``partition_graph(...,
            num_trainers_per_machine=N)`` assigns them (``g.ndata["trainer_id"]``): where the
            strategy has no split of its own and a server has several ranks, its share is
            cut among them by trainer, as DGL does (:func:`trainer_share`).
        rank: must be this process's rank when given.
    """
    graph = _checked(partition_book if partition_book is not None else
                     getattr(nodes, "_g", None), rank, "node_split")
    ids = _all_ids(nodes, graph)
    kind = on_every_rank(graph.session, "node_split", lambda: _node_type(nodes, graph, ntype))
    ids = _same_everywhere(graph, "node_split", "node", lambda: torch.unique(
        graph.space(kind).check(ids, "node_split")))
    topo = graph.session.topology
    by_trainer = node_trainer_ids is not None and len(graph.spaces) == 1 and \
        topo.ranks_per_server > 1 and graph.pdir.num_parts == topo.num_servers
    if by_trainer and not isinstance(graph.strategy, OwnSplit):
        return trainer_share(ids, graph, node_trainer_ids)
    return node_share(ids, graph, kind)


def _even_run(ids: torch.Tensor, k: int, i: int) -> torch.Tensor:
    """Run ``i`` of ``k`` runs of ``ids``, the first ``len % k`` one longer (DGL's
    ``_even_offset``; :func:`~dglx_dist.sampling.even_chunk` lengthens the last ones)."""
    size, extra = divmod(ids.numel(), k)
    lo = i * size + min(i, extra)
    return ids[lo:lo + size + (i < extra)]


def trainer_share(ids: torch.Tensor, graph: DistGraph, trainer_ids) -> torch.Tensor:
    """DGL's ``node_split`` with ``node_trainer_ids`` (collective): the server's even run of
    the partitioned ``ids``; of it, the nodes whose trainer is one of this server's (trainer
    ``t`` is on server ``t // ranks_per_server``, after DGL's scaling when there were more
    trainers per machine at partitioning) ordered by trainer, and the others; each cut
    evenly among the server's ranks, this rank's two pieces together."""
    session, topo = graph.session, graph.session.topology
    mine = _even_run(graph.part_ids(ids).sort().values, topo.num_servers, session.server_id)
    mine = graph.node_ids(mine)
    tid = torch.as_tensor(trainer_ids[mine]).long().reshape(-1)
    part = torch.from_numpy(graph.pdir.core_ids(session.server_id))  # the server's nodes:
    own = torch.as_tensor(trainer_ids[graph.node_ids(part)])  # DGL's largest id is of all
    top = torch.tensor(int(own.max()) + 1 if own.numel() else 0)
    session.world.all_reduce(top, op="max")
    if int(top) > session.world_size:  # DGL's rule for fewer trainers than partitioned for
        tid = tid // (int(top) // session.world_size)
    here = tid // topo.ranks_per_server == session.server_id
    local = mine[here][torch.argsort(tid[here] % topo.ranks_per_server, stable=True)]
    per, r = topo.ranks_per_server, session.local_rank
    return torch.cat([_even_run(local, per, r), _even_run(mine[~here], per, r)])


def node_share(ids: torch.Tensor, graph: DistGraph, ntype: str | None = None) -> torch.Tensor:
    """This rank's share of node ids ``ids`` (unique, the same on every rank; per-type ids of
    ``ntype``, else homogeneous ids): the strategy's split of their partitioned ids, in the
    graph's ids."""
    offset = 0 if ntype is None else graph.space(ntype).hom_offset
    mine = split_ids(graph.strategy, graph.part_ids(ids + offset).sort().values, graph.pdir,
                     graph.session)
    return graph.node_ids(mine) - offset


def edge_split(edges, partition_book: DistGraph | PartitionBook, etype: str | None = None,
               rank: int | None = None, force_even: bool = True,
               edge_trainer_ids=None) -> torch.Tensor:
    """This rank's share of ``edges`` (a boolean mask over all edges or edge ids, the same
    on every rank), as DGL's ``dgl.distributed.edge_split`` (collective): disjoint, together
    all of them, sizes within one, each mostly of edges its server stores (see
    :func:`edge_share`). On a graph with edge types, ``edges`` are of edge type ``etype``
    (per-type ids in and out; it may be left out when there is one). ``force_even`` and
    ``edge_trainer_ids`` are DGL's, accepted."""
    graph = _checked(partition_book, rank, "edge_split")
    canonical = on_every_rank(graph.session, "edge_split",
                              lambda: graph.to_canonical_etype(etype))
    ids = _same_everywhere(graph, "edge_split", "edge", lambda: torch.unique(
        given_edge_ids(graph, {canonical: edges}, "edge_split")))
    return graph.get_partition_book().map_to_per_etype(edge_share(ids, graph))[1]


def edge_share(ids: torch.Tensor, graph: DistGraph) -> torch.Tensor:
    """This rank's contiguous chunk of edge ids ``ids`` (unique, the same on every rank) in
    stored order, where each part's edges are together."""
    order = torch.argsort(graph.edata.part_ids(ids))
    session = graph.session
    return even_chunk(ids[order], session.world_size, session.rank).sort().values


def _checked(graph, rank: int | None, what: str) -> DistGraph:
    if isinstance(graph, PartitionBook):
        graph = graph.graph
    if not isinstance(graph, DistGraph):
        raise InvalidTypeError(f"{what} needs the DistGraph ({what}(mask, g)); got "
                               f"{type(graph).__name__}")
    if rank is not None and rank != graph.session.rank:
        raise InvalidValueError(f"{what}: rank={rank} but this process is rank "
                                f"{graph.session.rank}")
    return graph


def _same_everywhere(graph: DistGraph, what: str, kind: str, ids_of) -> torch.Tensor:
    """The ids ``ids_of()`` gives, checked on every rank and refused when ranks differ."""
    ids = on_every_rank(graph.session, what, ids_of)
    differ = differing_ranks(graph.session, ids_digest(ids))
    if differ:
        raise InvalidValueError(f"{what}: ranks {differ} passed other {kind}s than rank 0; pass "
                                f"every rank the same mask or ids (each gets its share back)")
    return ids
