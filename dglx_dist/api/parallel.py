"""``parallelize``: the user's model as the strategy trains it, behind the model's own call.

``model = dglx_dist.parallelize(model, g)`` returns a :class:`DistModel`; the user's optimizer,
``loss.backward()`` and ``opt.step()`` stay as they were: what the strategy does after
backward runs in a callback queued on autograd's engine by a hook on the model's output. It
takes ``model(blocks, x)`` with a :class:`~dglx_dist.api.DataLoader` step, or ``model(g,
features)`` with the :class:`~dglx_dist.api.DistGraph` and ``g.ndata["feat"]`` (the
full-graph form: output rows ``g.local_nodes()``'s; each conv called as ``conv(g, h)`` gets
its layer's block). The model gets the package's blocks; a model of ``dgl.nn``'s modules is
wrapped once at its edge to get DGL's (:func:`~dglx_dist.convs.base.at_the_edge`).
docs/architecture.md says when each piece runs.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
from typing import Any

import torch
from torch import nn

from dglx_dist.api.graph import DistGraph, NodeDataView
from dglx_dist.convs import adapter_for, at_the_edge, graph_convs, is_foreign_conv
from dglx_dist.errors import InvalidTypeError, InvalidValueError
from dglx_dist.runtime.agree import on_every_rank
from dglx_dist.runtime.device import module_devices
from dglx_dist.data.convert import is_dgl
from dglx_dist.graphcore.block import Block
from dglx_dist.strategies.abilities import ConvTypes, OverlapsBackward, ShardedParams
from dglx_dist.strategies.base import SetupRequest, implied_layers
from dglx_dist.strategies.steps import OUT_DEGREE, Blocks, StepState

__all__ = ["parallelize", "DistModel"]


def _router(index: int):
    """A forward pre-hook handing a conv its layer's block when it is given a whole step (and,
    where the step's blocks hold a share of their sources' out-edges, rows rescaled so that
    the conv normalises by the sources' degrees in the whole graph)."""

    def hook(module: nn.Module, args: tuple) -> tuple | None:
        if not args or not (isinstance(args[0], Block | Blocks) or is_dgl(args[0])):
            return None
        block = args[0][index] if isinstance(args[0], Blocks) else args[0]
        rest = args[1:]
        if OUT_DEGREE in block.srcdata and rest and isinstance(rest[0], torch.Tensor):
            scale = _source_scale(module, block, block.srcdata[OUT_DEGREE])
            if scale is not None:
                rest = (rest[0] * scale, *rest[1:])
        return (block, *rest)

    return hook


def _source_scale(conv: nn.Module, block, out_degree: torch.Tensor) -> torch.Tensor | None:
    try:
        adapter = adapter_for(conv)
    except ValueError:  # no adapter: a conv that does not normalise by source degrees
        return None
    return adapter.degree_source_scale(conv, block, out_degree)


def _check_convs(model: nn.Module, strategy) -> list[tuple[nn.Module, str]]:
    convs = graph_convs(model)
    if not convs and type(model).__module__.startswith(("dgl.nn", "dglx_dist.nn")):
        raise InvalidValueError(f"parallelize: the model is a bare {type(model).__name__}; "
                                f"expected a module that holds its dglx_dist.nn or dgl.nn convs "
                                f"as submodules (self.conv = {type(model).__name__}(...), "
                                f"forward(blocks, x) passing blocks[i] to the i-th conv), as "
                                f"DGL's examples do")
    if not convs:
        raise InvalidValueError(f"parallelize: {type(model).__name__} has no graph conv; "
                                f"expected a model built from dglx_dist.nn or dgl.nn convs "
                                f"(SAGEConv, GraphConv, GATConv)")
    foreign = [f"{name}: {type(conv).__module__}.{type(conv).__name__}" for conv, name in convs
               if is_foreign_conv(conv)]
    if foreign and not strategy.capabilities.foreign_convs:
        raise InvalidValueError(f"parallelize: strategy {strategy.registered_name!r} runs "
                                f"dglx_dist.nn or dgl.nn convs (it splits or wraps them); the "
                                f"model has {', '.join(foreign)}: expected distdgl for PyG's "
                                f"convs, or their dglx_dist.nn counterparts")
    allowed = strategy.conv_types if isinstance(strategy, ConvTypes) else None
    bad = [f"{name}: {type(conv).__name__}" for conv, name in convs
           if allowed is not None and type(conv).__name__ not in allowed]
    if bad:
        raise InvalidValueError(f"parallelize: strategy {strategy.registered_name!r} runs "
                                f"{', '.join(allowed)} convs; the model has {', '.join(bad)}")
    return convs


def _check_device(model: nn.Module, strategy, session) -> None:
    device = strategy.compute_device(session)
    wrong = module_devices(itertools.chain(model.named_parameters(), model.named_buffers()),
                           device)
    if not wrong:
        return
    more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
    why = "" if device == session.device else (
        f" (strategy {strategy.registered_name!r} computes on the host; the job's device is "
        f"{session.device})")
    cpu = "" if device.type == "cpu" else " (or set DGLX_DEVICE=cpu to train on the CPU)"
    raise InvalidValueError(f"parallelize on rank {session.rank}: the model's {wrong[0]}{more}; "
                            f"expected every parameter on {device}{why}: call model.to("
                            f"'{device}') before parallelize{cpu}")


def _check_dtype(model: nn.Module, strategy) -> None:
    if not strategy.capabilities.float32_only:
        return
    other = [(name, p.dtype) for name, p in model.named_parameters()
             if p.is_floating_point() and p.dtype != torch.float32]
    if other:
        name, dtype = other[0]
        raise InvalidValueError(f"parallelize: strategy {strategy.registered_name!r} trains "
                                f"float32 models only; the model's {name} is {dtype}: "
                                f"expected model.float() (distdgl, p3, granndis and fullgraph "
                                f"train bfloat16 models)")


def _checked(model: nn.Module, strategy, session) -> list[tuple[nn.Module, str]]:
    _check_device(model, strategy, session)
    _check_dtype(model, strategy)
    return _check_convs(model, strategy)


def _autocast_on() -> bool:
    try:
        return any(torch.is_autocast_enabled(kind) for kind in ("cpu", "cuda"))
    except TypeError:  # torch < 2.4 takes no device type
        return torch.is_autocast_enabled() or torch.is_autocast_cpu_enabled()


def parallelize(model: nn.Module, g: DistGraph) -> "DistModel":
    """The model wrapped as ``g``'s strategy trains it (collective: sets the strategy up on
    first use, broadcasts rank 0's weights). The model must be on the strategy's device
    (:meth:`~dglx_dist.strategies.base.Strategy.compute_device`: the rank's GPU in a GPU job,
    ``dglx_dist.current_session().device``), as DDP's is."""
    if not isinstance(g, DistGraph):
        raise InvalidTypeError(f"parallelize needs the graph dglx_dist.distribute returned; got "
                               f"{type(g).__name__}")
    convs = graph_convs(model)
    strategy = g.setup(SetupRequest(len(convs) or implied_layers(g.strategy) or 2,
                                    by="parallelize"))
    convs = on_every_rank(g.session, "parallelize", lambda: _checked(model, strategy, g.session))
    names = [name for _, name in convs]
    wrapped = strategy.wrap_model(model)
    for i, name in enumerate(names):
        model.get_submodule(name).register_forward_pre_hook(_router(i))
    at_the_edge(model)  # after the routers: a conv picks its block, then it is made DGL's
    reads_blocks = next((name for conv, name in convs if is_foreign_conv(conv)), None)
    return DistModel(wrapped, g, len(convs), reads_blocks)


class DistModel(nn.Module):
    """The model as the strategy trains it (see the module docstring).

    Attributes:
        wrapped: what the strategy made of it (DDP's wrapper, or the model itself).
        module: the user's model (as DDP's ``.module``), its convs possibly wrapped by the
            strategy; a layer-wise inference loop over ``model.module.layers`` runs on it.
    """

    def __init__(self, wrapped: nn.Module, graph: DistGraph, num_layers: int,
                 reads_blocks: str | None = None):
        super().__init__()
        self.wrapped = wrapped
        self._graph, self._num_layers = graph, num_layers
        self._reads_blocks = reads_blocks  # a PyG conv's name: it needs the package's blocks
        self._full_steps = 0  # training full-graph forwards so far (they seed dropout)
        self._pass: list[StepState] | None = None  # the states a pending backward reached

    @property
    def module(self) -> nn.Module:
        inner = self.wrapped
        return inner.module if isinstance(inner, nn.parallel.DistributedDataParallel) else inner

    def __getattr__(self, name: str) -> Any:
        """What the wrapper does not have is the user's module's (as FSDP forwards it):
        ``model.inference(...)``, ``model.layers``."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "wrapped":
                raise
            return getattr(self.module, name)

    def forward(self, graph, x=None) -> torch.Tensor:
        strategy = self._graph.strategy
        if isinstance(graph, DistGraph):
            if not (x is None or isinstance(x, NodeDataView)):
                raise InvalidTypeError("model(g, features): in the full-graph form pass "
                                       "g.ndata[...] as the features (the strategy holds the rows)")
            form = self._graph.full_graph_form("model(g, features)")
            training = torch.is_grad_enabled()  # evaluation: the last training step's index
            index = self._full_steps if training else max(self._full_steps - 1, 0)
            blocks, x = self._on_device(*form.full_graph_step(self._num_layers, index))
            self._full_steps += training
        elif self._reads_blocks and (is_dgl(graph) or any(map(is_dgl, graph))):
            raise InvalidTypeError(f"model(blocks, x): the model's {self._reads_blocks} is "
                                   f"PyG's and reads block.edge_index, which DGL's blocks lack; "
                                   f"expected the package's blocks: dglx_dist.DataLoader's "
                                   f"(not the DGL loaders of dglx_dist.dgl)")
        elif is_dgl(graph):  # a subgraph step (ShaDow-GNN's sampler)
            blocks = graph
            self._check_inputs([graph], x)
        else:
            blocks = Blocks.of(graph)
            self._check_inputs(blocks, x)
        if strategy.capabilities.float32_only and _autocast_on():
            raise InvalidValueError(f"strategy {strategy.registered_name!r} runs float32 alone "
                                    f"(its tensor tasks are float32 arrays); expected its forward "
                                    f"outside torch.autocast (distdgl, p3, granndis and "
                                    f"fullgraph run under autocast)")
        with self._graph.session.peer_errors("forward (e.g. DDP's bucket broadcast)"):
            out = strategy.step_forward(self.wrapped, blocks, x)
        if torch.is_grad_enabled():  # a heterograph model's output: a tensor per node type
            for value in out.values() if isinstance(out, dict) else [out]:
                if isinstance(value, torch.Tensor) and value.requires_grad:
                    value.register_hook(functools.partial(
                        self._on_output_grad, getattr(blocks, "state", None) or StepState()))
        return out

    def _on_device(self, blocks: Blocks, x) -> tuple[Blocks, Any]:
        """The full-graph form's blocks and rows on the strategy's device."""
        device = self._graph.strategy.compute_device(self._graph.session)
        moved = Blocks([b.to(device) for b in blocks], blocks.state)
        return moved, x.to(device) if isinstance(x, torch.Tensor) else x

    def _check_inputs(self, blocks: list, x) -> None:
        """A step's blocks and rows must be where the model is (a clear line, not a device
        mismatch deep inside a conv)."""
        session = self._graph.session
        device = self._graph.strategy.compute_device(session)
        found = [(what, t.device) for what, t in (("blocks", blocks[0] if blocks else None),
                                                  ("input features", x))
                 if (isinstance(t, torch.Tensor | Block) or is_dgl(t)) and t.device != device]
        if found:
            what, where = found[0]
            raise InvalidValueError(f"rank {session.rank}: the step's {what} are on {where}; the "
                                    f"model is on {device}: move them with .to('{device}') "
                                    f"(the DataLoader's blocks and prefetched rows already are)")

    def _on_output_grad(self, state: StepState, grad: torch.Tensor) -> None:
        if self._pass is not None:  # the pass's callback is queued already
            if not any(s is state for s in self._pass):  # one entry per step's output(s)
                self._pass.append(state)
            return
        self._pass = [state]  # once per backward pass, however many outputs
        strategy = self._graph.strategy
        if isinstance(strategy, OverlapsBackward):
            strategy.before_backward()
        torch.autograd.Variable._execution_engine.queue_callback(self._after_backward)

    def _after_backward(self) -> None:
        steps, self._pass = self._pass, None
        with self._graph.session.peer_errors("after backward (gradient exchange)"):
            self._graph.strategy.after_backward(steps)

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """Clips the gradients by their norm over the whole model (FSDP's method of this
        name): a strategy that shards parameters across ranks (p3's first-layer slices) adds
        every rank's shard, so all ranks clip by the same factor, as
        ``torch.nn.utils.clip_grad_norm_`` does on one process. Returns the total norm."""
        strategy = self._graph.strategy
        sharded, comm = strategy.sharded_params() if isinstance(strategy, ShardedParams) else \
            ([], None)
        held = {p.data_ptr() for p in sharded}  # the memory of the sharded parameters
        grads = [p.grad for p in self.parameters() if p.grad is not None and
                 p.data_ptr() not in held]
        shard_grads = [p.grad for p in sharded if p.grad is not None]
        p = float(norm_type)
        if p == float("inf"):
            mine = torch.tensor([max((float(g.abs().max()) for g in shard_grads), default=0.)])
            shards = comm.all_reduce(mine, op="max") if comm is not None else mine
            total = torch.tensor(max([float(g.abs().max()) for g in grads] + [float(shards)]))
        else:
            mine = torch.tensor([sum(float(torch.linalg.vector_norm(g, p)) ** p
                                     for g in shard_grads)], dtype=torch.float64)
            shards = comm.all_reduce(mine) if comm is not None else mine
            dense = sum(float(torch.linalg.vector_norm(g, p)) ** p for g in grads)
            total = torch.tensor((dense + float(shards)) ** (1.0 / p))
        coef = float(max_norm) / (float(total) + 1e-6)
        if coef < 1.0:
            for g in grads + shard_grads:
                g.mul_(coef)
        return total.to(torch.float32)

    def join(self, *args: Any, **kwargs: Any):
        """DDP's ``join()`` where the strategy uses DDP; otherwise nothing to do (every rank
        takes the same number of steps)."""
        if isinstance(self.wrapped, nn.parallel.DistributedDataParallel):
            return self.wrapped.join(*args, **kwargs)
        return contextlib.nullcontext()
