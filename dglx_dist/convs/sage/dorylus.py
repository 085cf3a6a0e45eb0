"""Dorylus for GraphSAGE (``SAGEConv``, mean aggregator): :class:`SageLayers` runs
GCN's program (:class:`~dglx_dist.convs.graphconv.dorylus.GcnLayers`) and routes with the
neighbour mean ``M`` (:func:`build_means`) in place of GCN's normalised sum, the rows' own part
kept in the applies (tasks in :mod:`.ops`); docs/strategies/dorylus.md ("GraphSAGE", "Models")
describes the stages and the models it runs, as :class:`dglx_dist.models.SAGE`.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from dglx_dist.convs.dorylus_base import activation_name, cross_edges, csr, f32
from dglx_dist.convs.graphconv.dorylus import GcnLayers, GcnPlan
from dglx_dist.errors import InvalidValueError

__all__ = ["SageLayers", "SagePlan", "build_means"]


@dataclasses.dataclass(frozen=True, eq=False)
class SagePlan(GcnPlan):
    """GCN's plan plus the neighbour-mean matrices.

    Attributes:
        mean_in: own rows x (own rows, then ghosts): ``1 / in_deg(v)`` per in-edge ``u -> v``
            (repeated edges add up, as DGL's mean counts them).
        mean_out: own rows x (own rows, then reverse ghosts): its transpose over the
            graph, ``mean_out[u, v] = mean_in[v, u]``.
    """

    mean_in: torch.Tensor
    mean_out: torch.Tensor


def build_means(gs) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean_in, mean_out)`` of :class:`SagePlan` (collective: every in-edge whose source
    lives elsewhere goes, with its weight, to the source's owner)."""
    dst_row, col, src, src_owner = gs.in_edges
    n = gs.n
    in_deg = torch.bincount(dst_row, minlength=n).double()
    val = (1.0 / in_deg[dst_row]).float()  # every row here has its in-edges: exact degrees
    mean_in = csr(dst_row, col, val, (n, n + gs.num_ghosts))
    local = src_owner == gs.comm.group_rank
    rows, cols, vals = zip(*cross_edges(gs, val)[1])
    mean_out = csr(torch.cat([torch.searchsorted(gs.core, src[local]), *rows]),
                   torch.cat([dst_row[local], *cols]), torch.cat([val[local], *vals]),
                   (n, n + gs.num_rghosts))
    return mean_in, mean_out


_SUPPORTED = ("dorylus runs SAGEConv with aggregator 'mean', norm=None, feat_drop=0 and "
              "activation None or ReLU (dropout between layers: the model's `dropout` module, "
              "as in dglx_dist.models.SAGE)")


class SageLayers(GcnLayers):
    """GraphSAGE-mean's stages (see the module docstring): GCN's program, buffers and
    messages; the gathers use the mean matrices and the applies keep the rows' own part.

    Buffers: GCN's ``H[l]`` and ``G[l]`` (here: the gradients of the neighbour means).
    """

    OPS = ("sage_av", "sage_av_grad", "sage_loss")
    NEED = "need_dX"
    GRADS = ("Ws", "Wn", "b")
    TRANSPOSED = frozenset({"Ws", "Wn"})

    def __init__(self, plan: SagePlan, gs, feat, spec):
        super().__init__(plan, gs, feat, spec)
        self.saved_dx: dict[tuple[int, int], torch.Tensor] = {}  # (layer, interval) -> ∇X

    # -- the model -----------------------------------------------------------------------------
    @classmethod
    def check(cls, convs):
        for conv, name in convs:
            problems = []
            if conv._aggre_type != "mean":
                problems.append(f"aggregator {conv._aggre_type!r}")
            if conv.norm is not None:
                problems.append(f"norm={conv.norm!r}")
            drop = getattr(conv.feat_drop, "p", 0.0)
            if drop:
                problems.append(f"feat_drop={drop}")
            if conv._in_src_feats != conv._in_dst_feats:
                problems.append(f"separate source and destination input sizes "
                                f"({conv._in_src_feats}, {conv._in_dst_feats})")
            try:
                activation_name(conv.activation, name)
            except ValueError:
                problems.append(f"activation={conv.activation!r}")
            if problems:
                raise InvalidValueError(f"dorylus cannot run {name} (SAGEConv {conv._in_src_feats} "
                                        f"-> {conv._out_feats}): it has {'; '.join(problems)}. "
                                        f"{_SUPPORTED}")

    @classmethod
    def tensors(cls, conv):
        return (conv.fc_self.weight, conv.fc_neigh.weight, conv.fc_self.bias)

    @classmethod
    def plan(cls, gs, convs):
        return SagePlan(tuple((c.fc_neigh.weight.shape[1], c.fc_neigh.weight.shape[0])
                              for c, _ in convs),
                        tuple(activation_name(c.activation, name) for c, name in convs),
                        *build_means(gs))

    # -- graph side ----------------------------------------------------------------------------
    def graph_task(self, st, i):
        l = st.layer
        if st.kind == "GA":
            self.saved_a[(l, i)] = self.gs.rows_mm(self.plan.mean_in, i, self.H[l])
        elif st.kind == "BGA":
            self.saved_dh[(l, i)] = self.gs.rows_mm(self.plan.mean_out, i, self.G[l]) + \
                self.saved_dx.pop((l, i))

    # -- tensor tasks --------------------------------------------------------------------------
    def _arrays(self, layer, i, rows, weights) -> dict:
        ws, wn, b = weights[layer]
        return {"X": f32(self.H[layer][rows]), "M": f32(self.saved_a[(layer, i)]),
                "Ws": f32(ws.T), "Wn": f32(wn.T),
                "b": b if b is not None else np.zeros(ws.shape[0], dtype=np.float32)}

    def _keep_input_grads(self, layer, i, rows, out) -> None:
        if "dM" in out:
            self.G[layer][rows] = torch.from_numpy(np.array(out["dM"]))
            self.saved_dx[(layer, i)] = torch.from_numpy(np.array(out["dX"]))
