"""``node_split``: each rank's share of a set of nodes, as DGL's ``dgl.distributed.node_split``."""
from __future__ import annotations

import torch

from dglx_dist.api.agree import differing_ranks, ids_digest, on_every_rank
from dglx_dist.api.graph import DistGraph
from dglx_dist.api.ndata import NodeDataView, as_node_ids
from dglx_dist.errors import InvalidTypeError, InvalidValueError

__all__ = ["node_split"]


def _all_ids(nodes, graph: DistGraph) -> torch.Tensor:
    if isinstance(nodes, NodeDataView):
        if nodes._g is not graph:
            raise InvalidValueError("node_split: the mask belongs to another DistGraph")
        return torch.nonzero(nodes.full().bool()).squeeze(1)
    return nodes


def _check(nodes, graph: DistGraph) -> torch.Tensor:
    return torch.unique(as_node_ids(nodes, graph.num_nodes(), "node_split"))


def node_split(nodes, partition_book: DistGraph | None = None, ntype: str = "_N",
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
        ntype: DGL's; accepted (graphs here are homogeneous).
        force_even: DGL's; accepted (the split is always balanced).
        node_trainer_ids: DGL's; accepted.
        rank: must be this process's rank when given.
    """
    graph = partition_book if partition_book is not None else getattr(nodes, "_g", None)
    if not isinstance(graph, DistGraph):
        raise InvalidTypeError(f"node_split needs the DistGraph (node_split(mask, g)); got "
                               f"{type(graph).__name__}")
    session = graph.session
    if rank is not None and rank != session.rank:
        raise InvalidValueError(f"node_split: rank={rank} but this process is rank {session.rank}")
    ids = _all_ids(nodes, graph)
    ids = on_every_rank(session, "node_split", lambda: _check(ids, graph))
    differ = differing_ranks(session, ids_digest(ids))
    if differ:
        raise InvalidValueError(f"node_split: ranks {differ} passed other nodes than rank 0; pass "
                                f"every rank the same mask or ids (each gets its share back)")
    mine = graph._template.split_ids(graph.part_ids(ids).sort().values, graph.pdir, session)
    return graph.node_ids(mine)
