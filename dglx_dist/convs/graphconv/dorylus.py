"""Dorylus for GCN (``GraphConv``, ``norm="both"``): :class:`GcnLayers`, the stages
of the paper's own model (tasks ``av``, ``av_grad``, ``av_loss`` in :mod:`.ops`), which
:class:`~dglx_dist.convs.sage.dorylus.SageLayers` reuses. Per layer and vertex interval
``GA AV SC ... GA AVL | BSC BGA BAV ...``; docs/strategies/dorylus.md ("Tasks per interval")
describes each stage.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from dglx_dist.convs.dorylus_base import (LayerKind, Stage, activation_name, add_grad,
                                          dropout_header, dropout_p, f32, task_seed)
from dglx_dist.graphcore.norm import weight_problem
from dglx_dist.errors import InvalidValueError

__all__ = ["GcnLayers", "GcnPlan"]


@dataclasses.dataclass(frozen=True)
class GcnPlan:
    """Per layer: (input, output) widths and the conv's own activation ("relu" or "none")."""

    dims: tuple[tuple[int, int], ...]
    acts: tuple[str, ...]

    def act(self, layer: int) -> str:
        """What the layer's apply ends with: ReLU between layers (the model's; a conv's own
        ReLU before it changes nothing), the conv's own activation after the last."""
        return self.acts[layer] if layer == len(self.dims) - 1 else "relu"


class GcnLayers(LayerKind):
    """GCN (``GraphConv``, ``norm="both"``, ReLU and dropout between layers): gather, then
    apply (``A W + b``, ReLU, dropout) per interval; the last layer's apply fused with the loss.
    A conv's own activation (``activation=F.relu``) is applied in its apply too.

    Buffers: ``H[l]`` the input rows of layer l (own then ghosts), ``G[l]`` the gradients of
    layer l's gathered rows (own then reverse ghosts).

    A subclass with the same program (:class:`~dglx_dist.convs.sage.dorylus.SageLayers`) names
    its tasks in ``OPS`` (apply, its backward, the apply fused with the loss), their flag asking
    for the inputs' gradients in ``NEED``, the weights' gradients in ``GRADS``, and overrides
    :meth:`_arrays` and :meth:`_keep_input_grads`.
    """

    OPS = ("av", "av_grad", "av_loss")
    NEED = "need_dA"
    GRADS = ("W", "b")

    def __init__(self, plan: GcnPlan, gs, feat, spec):
        super().__init__(plan, gs, feat, spec)
        self.dims, self.L = plan.dims, len(plan.dims)
        n = gs.n
        self.H = [feat] + [torch.zeros(n + gs.num_ghosts, d[0]) for d in self.dims[1:]]
        self.G = [None] + [torch.zeros(n + gs.num_rghosts, d[0]) for d in self.dims[1:]]
        self.saved_a: dict[tuple[int, int], torch.Tensor] = {}  # (layer, interval) -> GA out
        self.saved_dh: dict[tuple[int, int], torch.Tensor] = {}  # (layer, interval) -> ∇GA
        self.ids = gs.core.numpy()

    @classmethod
    def check(cls, convs):
        for conv, name in convs:
            problems = [] if conv._norm == "both" else [f"norm={conv._norm!r} (expected 'both')"]
            problems += [p for p in [weight_problem(conv)] if p]
            if problems:
                raise InvalidValueError(f"dorylus cannot run {name} (GraphConv): "
                                        f"{'; '.join(problems)}")
            activation_name(conv._activation, f"{name} (GraphConv)")

    @classmethod
    def tensors(cls, conv):
        return (conv.weight, conv.bias)

    @classmethod
    def dropouts(cls, model, convs, override):
        p = dropout_p(getattr(model, "dropout", None), override)
        return tuple([p] * (len(convs) - 1) + [0.0])  # after every layer but the last

    @classmethod
    def plan(cls, gs, convs):
        return GcnPlan(tuple((conv.weight.shape[0], conv.weight.shape[1]) for conv, _ in convs),
                       tuple(activation_name(conv._activation, name) for conv, name in convs))

    @staticmethod
    def forward_stages(num_layers):
        out = []
        for l in range(num_layers):
            gate = (False, l - 1) if l else None
            out += [Stage("GA", l, gate=gate)] + \
                ([Stage("AV", l), Stage("SC", l)] if l < num_layers - 1 else [])
        return out

    @staticmethod
    def backward_stages(num_layers):
        out = []
        for l in reversed(range(num_layers)):
            out += [Stage("BAV", l)] if l != num_layers - 1 else []
            out += [Stage("BSC", l), Stage("BGA", l, gate=(True, l))] if l >= 1 else []
        return out

    @property
    def logits_width(self):
        return self.dims[-1][1]

    # -- graph side ----------------------------------------------------------------------------
    def graph_task(self, st, i):
        if st.kind == "GA":
            self.saved_a[(st.layer, i)] = self.gs.gather(i, self.H[st.layer])
        elif st.kind == "BGA":
            self.saved_dh[(st.layer, i)] = self.gs.gather_back(i, self.G[st.layer])

    def buffer(self, back, layer):
        return self.G[layer] if back else self.H[layer + 1]

    # -- tensor tasks --------------------------------------------------------------------------
    def _arrays(self, layer, i, rows, weights) -> dict:
        """The task's inputs but ``ids``, ``dH`` and the loss's."""
        W, b = weights[layer]
        b = b if b is not None else np.zeros(W.shape[1], dtype=np.float32)
        return {"A": self.saved_a[(layer, i)].numpy(), "W": W, "b": b}

    def _keep_input_grads(self, layer, i, rows, out) -> None:
        if "dA" in out:
            self.G[layer][rows] = torch.from_numpy(np.array(out["dA"]))

    def request(self, st, i, epoch, weights, train, extra):
        l, rows = st.layer, self.gs.rows(i)
        arrays = {**self._arrays(l, i, rows, weights), "ids": self.ids[rows]}
        header = {"act": self.plan.act(l), **dropout_header(
            self.spec.dropout[l], train, task_seed(self.spec.seed, epoch, l))}
        if st.kind == "AVL":
            header = {"op": self.OPS[2], "act": header["act"], self.NEED: self.L > 1}
            arrays.pop("ids")
            arrays.update(extra["labels"](rows))
        elif st.kind == "BAV":
            dh = extra["dlogits"][rows] if l == self.L - 1 else self.saved_dh[(l + 1, i)]
            header.update({"op": self.OPS[1], self.NEED: l >= 1})
            arrays["dH"] = f32(dh)
        else:  # AV, AVO
            header["op"] = self.OPS[0]
        return header, arrays

    def result(self, st, i, epoch, out, acc):
        l, rows = st.layer, self.gs.rows(i)
        if st.kind == "AV":
            self.H[l + 1][rows] = torch.from_numpy(np.array(out["H"]))
        elif st.kind == "AVO":
            acc["logits"][rows] = torch.from_numpy(np.array(out["H"]))
        else:  # AVL, BAV
            for name in self.GRADS:
                add_grad(acc, epoch, (l, name), out["d" + name], i)
            if st.kind == "AVL":
                acc["loss"][epoch] = acc["loss"].get(epoch, 0.0) + float(out["loss"][0])
            self._keep_input_grads(l, i, rows, out)
        self.saved_dh.pop((l + 1, i), None)
