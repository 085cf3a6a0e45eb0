"""The edge functions a link-prediction scorer calls, by DGL's names (``dgl.function``'s
``u_add_v``, ``u_sub_v``, ``u_mul_v``, ``u_div_v``, ``u_dot_v``), written in torch, so that
a DGL scorer runs where DGL is not installed with one changed import::

    import dglx_dist.function as fn          # was: import dgl.function as fn

    with pair_graph.local_scope():
        pair_graph.ndata["h"] = h
        pair_graph.apply_edges(fn.u_dot_v("h", "h", "score"))
        return pair_graph.edata["score"][:, 0]

Each is a callable ``(edges) -> {out: rows}``, DGL's form of an edge function, so it also
runs on DGL's graphs (``apply_edges`` takes it as a user-defined function). ``u`` reads the
source nodes' ``lhs_field``, ``v`` the destination nodes' ``rhs_field``; the features'
shapes (the first dimension aside) broadcast as DGL's do, and ``dot`` keeps its reduced last
dimension as 1 (``(E, D)`` rows give ``(E, 1)``; one number per node gives one per edge).
The package's graphs also take DGL's own ``dgl.function`` objects of these names
(:func:`~dglx_dist.graphcore.message.edge_function`).
"""
from __future__ import annotations

from dglx_dist.graphcore.message import EdgeFunction

__all__ = ["EdgeFunction", "u_add_v", "u_sub_v", "u_mul_v", "u_div_v", "u_dot_v"]


def _u_op_v(op: str, what: str):
    """DGL's edge function ``u_<op>_v``: ``what`` each edge's source ``lhs_field`` and its
    destination ``rhs_field`` make, into ``out``."""
    def edge_function(lhs_field: str, rhs_field: str, out: str) -> EdgeFunction:
        return EdgeFunction(op, lhs_field, rhs_field, out)

    edge_function.__name__ = edge_function.__qualname__ = f"u_{op}_v"
    edge_function.__doc__ = f"{what} of each edge's source ``lhs_field`` and destination " \
                            "``rhs_field``, into ``out``."
    return edge_function


u_add_v = _u_op_v("add", "The sum")
u_sub_v = _u_op_v("sub", "The difference (source minus destination)")
u_mul_v = _u_op_v("mul", "The product")
u_div_v = _u_op_v("div", "The quotient (source over destination)")
u_dot_v = _u_op_v("dot", "The dot product over the last dimension (kept, as 1)")
