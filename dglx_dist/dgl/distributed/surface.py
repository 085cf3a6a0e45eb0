"""The rest of ``dgl.distributed``'s public names, as :mod:`dglx_dist.dgl.distributed` gives them
(docs/porting.md): functions over a ``DistGraph`` call the graph's own methods, with DGL's
signatures; DGL's offline tools and constants are DGL's own (:data:`DGLS_OWN`); its servers,
RPC and process machinery are stand-ins that raise one line naming what to use
(:data:`SERVER_ONLY`). ``tests/unit/test_dgl_surface.py`` holds every public name of the
installed DGL's module to one of these kinds (or to the replaced ones).
"""
from __future__ import annotations

from typing import Any, Callable

from dglx_dist.errors import NotSupportedError

__all__ = ["sample_neighbors", "sample_etype_neighbors", "find_edges", "in_subgraph",
           "DGLS_OWN", "SERVER_ONLY", "server_only"]

DGLS_OWN = frozenset({
    "partition_graph", "load_partition", "load_partition_book", "load_partition_feats",
    "dgl_partition_to_graphbolt", "GraphPartitionBook", "PartitionPolicy", "read_ip_config",
    "DEFAULT_NTYPE", "DEFAULT_ETYPE", "expand_as_pair", "backend_name", "DistConnectError",
    "MAX_QUEUE_SIZE", "SERVER_EXIT"})
"""Names a script gets from DGL itself: they read files or hold no state of a running job."""

_SERVERS = "dglx_dist runs no servers: torchrun starts the trainers, and each holds its part"
_RPC = "dglx_dist has no RPC layer: ranks talk through torch.distributed collectives"
SERVER_ONLY: dict[str, str] = {
    **{n: _SERVERS for n in ("start_server", "DistGraphServer", "KVServer", "ServerState",
                             "copy_data_to_shared_memory")},
    **{n: _RPC for n in ("KVClient", "Request", "Response", "register_service",
                         "remote_call", "remote_call_to_machine", "send_request",
                         "send_request_to_machine", "recv_request", "send_response",
                         "recv_response", "fast_pull", "connect_to_server", "create_sender",
                         "create_receiver", "finalize_sender", "finalize_receiver",
                         "connect_receiver", "wait_for_senders", "client_barrier")},
    **{n: "torchrun sets the job's layout: use torch.distributed.get_rank() / "
          "get_world_size(), or g.rank()"
       for n in ("get_rank", "set_rank", "get_num_client", "set_num_client", "get_machine_id",
                 "set_machine_id", "get_num_machines", "set_num_machines", "get_group_id")},
}
"""DistDGL's server and RPC names, each with what to use instead."""


def server_only(name: str) -> Callable[..., Any]:
    """A stand-in for DGL's ``name``: importing it works, calling it raises one line."""

    def refuse(*args: Any, **kwargs: Any):
        raise NotSupportedError(f"dgl.distributed.{name}: {SERVER_ONLY[name]}")

    refuse.__name__ = refuse.__qualname__ = name
    refuse.__doc__ = f"Not here: {SERVER_ONLY[name]}."
    return refuse


def sample_neighbors(g, nodes, fanout, edge_dir: str = "in", prob=None, replace: bool = False,
                     use_graphbolt: bool = False):
    """DGL's ``dgl.distributed.sample_neighbors(g, ...)``: ``g.sample_neighbors`` (collective:
    every rank calls it at once). ``use_graphbolt`` is DGL's; accepted."""
    return g.sample_neighbors(nodes, fanout, edge_dir=edge_dir, prob=prob, replace=replace)


def sample_etype_neighbors(g, nodes, fanout, edge_dir: str = "in", prob=None,
                           replace: bool = False, etype_sorted: bool = True,
                           use_graphbolt: bool = False):
    """DGL's ``sample_etype_neighbors``: :func:`sample_neighbors` (``fanout`` one number, or a
    dict by edge type where the graph takes one); ``etype_sorted`` is DGL's, accepted."""
    return sample_neighbors(g, nodes, fanout, edge_dir, prob, replace)


def find_edges(g, edge_ids):
    """DGL's ``dgl.distributed.find_edges(g, edge_ids)``: ``g.find_edges(edge_ids)``."""
    return g.find_edges(edge_ids)


def in_subgraph(g, nodes):
    """DGL's ``dgl.distributed.in_subgraph(g, nodes)``: ``g.in_subgraph(nodes)``
    (collective)."""
    return g.in_subgraph(nodes)
