"""Dorylus for GAT (``GATConv``): attention as ApplyEdge tasks, sums over edges on the
graph servers (tasks in :mod:`.ops`). Per layer and interval, ``AV SC AE GA ... AVL | ∇AE ∇SC
∇GA ∇AV ...`` (AVO / BAVO: the logits only, and the backward from given logit gradients);
each source's backward sums are done by its owner (pull), so async mode reads possibly stale
rows and edges but never partial sums. docs/strategies/dorylus.md ("GAT", "Models") describes
each stage and the models it runs, as :class:`dglx_dist.models.GAT`.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from dglx_dist.convs.dorylus_base import (LayerKind, Stage, add_grad, cross_edges,
                                          dropout_header, dropout_p, f32, task_seed)
from dglx_dist.errors import InvalidValueError

__all__ = ["GatEdges", "GatLayers", "projection_problems"]


def projection_problems(conv) -> list[str]:
    """What keeps a ``GATConv`` from being one shared projection ``fc`` of its input (empty: it
    is one), said once for P3's column split (:mod:`.adapter`) and dorylus, which both need
    it."""
    problems = []
    if not hasattr(conv, "fc"):
        problems.append("(src, dst) input sizes: two projections fc_src/fc_dst (build it with "
                        "one int in_feats)")
    if getattr(conv, "res_fc", None) is not None:
        problems.append("residual=True: it adds the input or its own projection of it to the "
                        "output (build it with residual=False)")
    return problems


@dataclasses.dataclass(frozen=True)
class GatEdges:
    """A graph server's in-edges and its own nodes' out-edges, edge by edge.

    Attributes:
        dst / col: in-edges sorted by (destination row, source column); columns are own
            rows, then ghosts (as in ``GraphServer.a_in``).
        ptr: in-edges of destination row v are ``ptr[v]:ptr[v+1]``.
        send: (peer, my interval) -> in-edges whose source the peer owns.
        recv: (peer, its interval) -> edge slots its edges fill (after my ``E`` in-edges).
        out_src / out_col / out_slot / out_ptr: out-edges of my own nodes sorted by source row:
            destination column (own rows, then reverse ghosts) and edge slot.
        slots: edge slots (my in-edges, then the received ones).
        keys: per in-edge ``source id * num_nodes + destination id`` (attention dropout's
            mask is a hash of it).
        heads / feats / attn_drop: per layer.
    """

    dst: torch.Tensor
    col: torch.Tensor
    ptr: torch.Tensor
    send: dict
    recv: dict
    out_src: torch.Tensor
    out_col: torch.Tensor
    out_slot: torch.Tensor
    out_ptr: torch.Tensor
    slots: int
    keys: torch.Tensor
    heads: tuple[int, ...]
    feats: tuple[int, ...]
    attn_drop: tuple[float, ...]


def _ptr(rows: torch.Tensor, n: int) -> torch.Tensor:
    return torch.cat([torch.zeros(1, dtype=torch.int64),
                      torch.cumsum(torch.bincount(rows, minlength=n), 0)])


def build_edges(gs, heads: tuple[int, ...], feats: tuple[int, ...],
                attn_drop: tuple[float, ...]) -> GatEdges:
    """The plan (collective: exchanges the cross-partition edges with their sources' owners)."""
    dst_row, col, _, _ = gs.in_edges
    n = gs.n
    order = torch.argsort(dst_row * (n + gs.num_ghosts + 1) + col, stable=True)
    at = torch.empty_like(order)
    at[order] = torch.arange(order.numel())  # original edge index -> sorted position
    dst_iv = gs.interval_of(dst_row)
    cross, arrived = cross_edges(gs, dst_iv)
    send = {}
    for p, sent in enumerate(cross):
        for i in torch.unique(dst_iv[sent]).tolist():
            send[(p, i)] = at[torch.nonzero(sent & (dst_iv == i)).squeeze(1)]
    recv, rows, cols, slots, base = {}, [], [], [], order.numel()
    for p, (row, column, g_iv) in enumerate(arrived):
        idx = torch.arange(base, base + row.numel())
        for i in torch.unique(g_iv).tolist():
            recv[(p, i)] = idx[g_iv == i]
        rows.append(row)
        cols.append(column)
        slots.append(idx)
        base += row.numel()
    s_dst, s_col = dst_row[order], col[order]
    own = torch.nonzero(s_col < n).squeeze(1)
    o_src = torch.cat([s_col[own]] + rows)
    o_col = torch.cat([s_dst[own]] + cols)
    o_slot = torch.cat([own] + slots)
    by_src = torch.argsort(o_src, stable=True)
    keys = torch.cat([gs.core, gs.ghost_ids])[s_col] * gs.num_nodes + gs.core[s_dst]
    return GatEdges(s_dst, s_col, _ptr(s_dst, n), send, recv, o_src[by_src], o_col[by_src],
                    o_slot[by_src], _ptr(o_src, n), base, keys, heads, feats, attn_drop)


class GatLayers(LayerKind):
    """GAT's stages (see the module docstring).

    Buffers per layer l: ``Z[l]`` ``[z | el]`` of own rows then ghosts; ``ER[l]`` own rows;
    ``A[l]`` α of my in-edges; ``GD[l]`` dout of own rows then reverse ghosts; ``EB[l]``
    ``[α | ds]`` per edge slot.
    """

    GRADS = ("W", "al", "ar", "b")
    TRANSPOSED = frozenset({"W"})

    def __init__(self, plan: GatEdges, gs, feat, spec):
        super().__init__(plan, gs, feat, spec)
        self.L, e = len(plan.heads), plan.ptr[-1]
        hf = [h * f for h, f in zip(plan.heads, plan.feats)]
        n, hs = gs.n, plan.heads
        self.Z = [torch.zeros(n + gs.num_ghosts, w + h) for w, h in zip(hf, hs)]
        self.ER = [torch.zeros(n, h) for h in hs]
        self.A = [torch.zeros(int(e), h) for h in hs]
        self.GD = [torch.zeros(n + gs.num_rghosts, w) for w in hf]
        self.EB = [torch.zeros(plan.slots, 2 * h) for h in hs]
        self.saved: dict[tuple[str, int, int], torch.Tensor] = {}  # (what, layer, interval)
        self.ids = gs.core.numpy()

    # -- the model -----------------------------------------------------------------------------
    @classmethod
    def check(cls, convs):
        for conv, name in convs:
            problems = projection_problems(conv)
            if conv.activation is not None:
                problems.append("an activation inside the conv (expected None: apply ELU in "
                                "the model)")
            if conv.leaky_relu.negative_slope != 0.2:
                problems.append(f"negative_slope={conv.leaky_relu.negative_slope} (the tasks "
                                f"use GATConv's default 0.2)")
            if problems:
                raise InvalidValueError(f"dorylus cannot run {name} ({conv!r}): "
                                        + "; ".join(problems))

    @classmethod
    def tensors(cls, conv):
        return (conv.fc.weight, conv.attn_l, conv.attn_r, conv.bias)

    @classmethod
    def dropouts(cls, model, convs, override):
        return tuple(dropout_p(conv.feat_drop, override) for conv, _ in convs)

    @classmethod
    def plan(cls, gs, convs):
        return build_edges(gs, tuple(c._num_heads for c, _ in convs),
                           tuple(c._out_feats for c, _ in convs),
                           tuple(float(c.attn_drop.p) for c, _ in convs))

    #: from given logit gradients: the last layer's bias and head mean backward
    LOGITS_BACKWARD = "BAVO"

    @staticmethod
    def forward_stages(num_layers):
        return [Stage(kind, l, gate=(False, l) if kind == "AE" else None)
                for l in range(num_layers) for kind in ("AV", "SC", "AE", "GA")]

    @staticmethod
    def backward_stages(num_layers):
        return [Stage(kind, l, gate=(True, l) if kind == "BGA" else None)
                for l in reversed(range(num_layers)) for kind in ("BAE", "BSC", "BGA", "BAV")]

    @property
    def logits_width(self):
        return self.plan.feats[-1]

    # -- graph side ----------------------------------------------------------------------------
    def _edges(self, i: int) -> tuple[slice, torch.Tensor, torch.Tensor]:
        r = self.gs.rows(i)
        lo, hi = int(self.plan.ptr[r.start]), int(self.plan.ptr[r.stop])
        return slice(lo, hi), self.plan.dst[lo:hi] - r.start, self.plan.col[lo:hi]

    def _hf(self, layer: int) -> tuple[int, int]:
        return self.plan.heads[layer], self.plan.feats[layer]

    def graph_task(self, st, i):
        l, r = st.layer, self.gs.rows(i)
        h, f = self._hf(l)
        if st.kind == "GA":
            e, d, c = self._edges(i)
            msg = self.A[l][e].unsqueeze(2) * self.Z[l][c, :h * f].view(-1, h, f)
            out = torch.zeros(r.stop - r.start, h, f).index_add_(0, d, msg)
            self.saved[("out", l, i)] = out.view(r.stop - r.start, h * f)
        elif st.kind == "BSC":
            e, _, _ = self._edges(i)
            self.GD[l][r] = self.saved.pop(("dout", l, i))
            self.EB[l][e] = torch.cat([self.A[l][e], self.saved.pop(("ds", l, i))], 1)
        elif st.kind == "BGA":
            lo, hi = int(self.plan.out_ptr[r.start]), int(self.plan.out_ptr[r.stop])
            s = self.plan.out_src[lo:hi] - r.start
            eb = self.EB[l][self.plan.out_slot[lo:hi]]
            msg = eb[:, :h].unsqueeze(2) * self.GD[l][self.plan.out_col[lo:hi]].view(-1, h, f)
            n = r.stop - r.start
            self.saved[("dz", l, i)] = torch.zeros(n, h, f).index_add_(0, s, msg).view(n, -1)
            self.saved[("del", l, i)] = torch.zeros(n, h).index_add_(0, s, eb[:, h:])

    def buffer(self, back, layer):
        return self.GD[layer] if back else self.Z[layer]

    # a backward scatter carries the edges' [α | ds] after the rows
    def pack(self, back, layer, route):
        rows = super().pack(back, layer, route)
        if not back:
            return rows
        return torch.cat([rows, self.EB[layer][self.plan.send[(route.peer, route.interval)]]
                          .reshape(-1)])

    def recv_numel(self, back, layer, route):
        edges = self.plan.recv[(route.peer, route.interval)].numel() if back else 0
        return super().recv_numel(back, layer, route) + edges * self.EB[layer].shape[1]

    def unpack(self, back, layer, route, msg):
        super().unpack(back, layer, route, msg)
        if back:
            eb, slots = self.EB[layer], self.plan.recv[(route.peer, route.interval)]
            eb[slots] = msg[msg.numel() - slots.numel() * eb.shape[1]:].view(-1, eb.shape[1])

    # -- tensor tasks --------------------------------------------------------------------------
    def _x(self, layer: int, i: int) -> torch.Tensor:
        """The layer's input rows of interval i: features or the previous gather's output."""
        return self.feat[self.gs.rows(i)] if layer == 0 else self.saved[("out", layer - 1, i)]

    def _vertex(self, st, i, epoch, weights, train) -> tuple[dict, dict]:
        l = st.layer
        w, al, ar, _ = weights[l]
        header = {"heads": self.plan.heads[l], "prev": "elu" if l else "none",
                  **dropout_header(self.spec.dropout[l], train,
                                   task_seed(self.spec.seed, epoch, l))}
        h, f = self._hf(l)
        arrays = {"X": f32(self._x(l, i)), "W": np.ascontiguousarray(w.T),
                  "al": al.reshape(h, f), "ar": ar.reshape(h, f),
                  "ids": self.ids[self.gs.rows(i)]}
        if l:
            arrays["bprev"] = self._bias(weights, l - 1)
        return header, arrays

    def _bias(self, weights, layer: int) -> np.ndarray:
        b = weights[layer][3]
        h, f = self._hf(layer)
        return b if b is not None else np.zeros(h * f, dtype=np.float32)

    def _scores(self, op: str, l: int, i: int, epoch: int, train: bool
                ) -> tuple[dict, dict]:
        """An edge task's header and arrays: scores, segments and attention dropout."""
        e, _, c = self._edges(i)
        r = self.gs.rows(i)
        w = self.plan.heads[l] * self.plan.feats[l]
        arrays = {"EL": f32(self.Z[l][c, w:]), "ER": f32(self.ER[l][r]),
                  "ptr": (self.plan.ptr[r.start:r.stop + 1] - e.start).numpy()}
        header = {"op": op, **dropout_header(  # seeds apart from feature dropout's
            self.plan.attn_drop[l], train, task_seed(self.spec.seed, epoch, self.L + l))}
        if header["train"]:
            arrays["keys"] = self.plan.keys[e].numpy()
        return header, arrays

    def request(self, st, i, epoch, weights, train, extra):
        l, rows = st.layer, self.gs.rows(i)
        if st.kind == "AV":
            header, arrays = self._vertex(st, i, epoch, weights, train)
            return {**header, "op": "gat_av"}, arrays
        if st.kind == "AE":
            return self._scores("gat_ae", l, i, epoch, train)
        if st.kind in ("AVL", "AVO"):
            arrays = {"X": f32(self.saved[("out", l, i)]), "b": self._bias(weights, l)}
            if st.kind == "AVL":
                arrays.update(extra["labels"](rows))
            return {"op": "gat_loss" if st.kind == "AVL" else "gat_out",
                    "heads": self.plan.heads[l]}, arrays
        if st.kind == "BAVO":
            return {"op": "gat_out_grad", "heads": self.plan.heads[l]}, \
                {"dH": f32(extra["dlogits"][rows])}
        if st.kind == "BAE":
            h, f = self._hf(l)
            _, d, c = self._edges(i)
            dout = self.saved[("dout", l, i)].view(-1, h, f)
            da = (dout[d] * self.Z[l][c, :h * f].view(-1, h, f)).sum(2)
            header, arrays = self._scores("gat_ae_grad", l, i, epoch, train)
            return header, {**arrays, "dA": f32(da)}
        header, arrays = self._vertex(st, i, epoch, weights, train)  # BAV
        arrays.update(dZ=f32(self.saved.pop(("dz", l, i))),
                      dEL=f32(self.saved.pop(("del", l, i))),
                      dER=f32(self.saved.pop(("der", l, i))))
        return {**header, "op": "gat_av_grad", "need_dX": l > 0}, arrays

    def result(self, st, i, epoch, out, acc):
        l, rows = st.layer, self.gs.rows(i)
        get = lambda k: torch.from_numpy(np.array(out[k]))  # noqa: E731  (a writable copy)
        if st.kind == "AV":
            self.Z[l][rows] = torch.cat([get("Z"), get("EL")], 1)
            self.ER[l][rows] = get("ER")
        elif st.kind == "AE":
            self.A[l][self._edges(i)[0]] = get("A")
        elif st.kind == "AVO":
            acc["logits"][rows] = get("H")
        elif st.kind in ("AVL", "BAVO"):
            if st.kind == "AVL":
                acc["loss"][epoch] = acc["loss"].get(epoch, 0.0) + float(out["loss"][0])
            add_grad(acc, epoch, (l, "b"), out["db"], i)
            self.saved[("dout", l, i)] = get("dX")
        elif st.kind == "BAE":
            self.saved[("ds", l, i)] = get("DS")
            self.saved[("der", l, i)] = get("dER")
        else:  # BAV
            for name in ("W", "al", "ar"):
                add_grad(acc, epoch, (l, name), out["d" + name], i)
            if l:
                add_grad(acc, epoch, (l - 1, "b"), out["dbprev"], i)
                self.saved[("dout", l - 1, i)] = get("dX")
