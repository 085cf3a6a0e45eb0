"""P3's first layer: split by input columns over the ranks, optionally pipelined.

:class:`P3FirstLayer` replaces a model's first graph conv for the ``p3`` strategy (see
:mod:`dglx_dist.strategies.p3`). Synchronous mode: each call pushes the rank's block to every
rank, computes every rank's partial from this rank's columns, and reduces the partials to
their owners, all inside autograd (:func:`~dglx_dist.runtime.autograd.reduce_to_owners`).

Pipelined mode (P3's 2-forward-2-backward schedule, docs/strategies/p3.md, "Pipelining"):
the strategy calls :meth:`P3FirstLayer.launch` for a mini-batch two steps before it trains,
on a *stash* of the weight slices; :meth:`P3FirstLayer.after_backward` sends its output
gradient back, and one step later its slice gradients join that step's update (staleness 3).
"""
from __future__ import annotations

import collections
import dataclasses
import inspect
import warnings
from typing import TYPE_CHECKING, Callable

import torch
from torch import nn
from torch.nn import functional as F

from dglx_dist.convs import ConvAdapter, ConvWrapper
from dglx_dist.errors import InvalidTypeError, InvalidValueError, NotSupportedError, StateError
from dglx_dist.kvstore.policy import rows_at
from dglx_dist.runtime.autograd import (OwnerReduce, flatten_partials,
                                        reduce_to_owners, unflatten)
from dglx_dist.runtime.comm import Comm, Pending
from dglx_dist.sampling import id_dtype, pack_block, unpack_block
from dglx_dist.graphcore.frames import NID
from dglx_dist.strategies.steps import OUT_DEGREE, state_of

if TYPE_CHECKING:
    from dglx_dist.graphcore.block import Block

__all__ = ["ColumnSlice", "P3FirstLayer", "exchange_blocks", "whole_rows"]


def exchange_blocks(server: Comm, cross: Comm | None, block, dtype: torch.dtype,
                    edge_weight: torch.Tensor | None = None) -> list:
    """Every rank's block (structure and source ids only), in rank order (local order when
    ``cross`` is None: this server's ranks only); this rank's own block is returned as it is
    (collective: P3's push of the layer-1 graph). Two stages, so a block crosses to each other
    server once: gather across servers (``cross``), then share within the server.
    ``edge_weight`` (one per edge of ``block``) travels with it, as float32: every other
    rank's block that came with weights has them as ``edata[_EDGE_WEIGHT]``; the others'
    blocks are the package's (:class:`~dglx_dist.graphcore.block.Block`)."""
    mine, eids = pack_block(block, dtype)
    if edge_weight is not None:  # in the packed (CSC) order of the edges, as float32 bits
        bits = edge_weight.detach().reshape(-1)[eids].float().cpu().view(torch.int32)
        mine = torch.cat([mine, bits.to(dtype)])
    across = cross.all_gather_v(mine) if cross is not None else [mine]
    lengths = torch.tensor([m.numel() for m in across], dtype=dtype)
    shared = server.all_gather_v(torch.cat([lengths, *across]))
    num_servers = len(across)
    me = server.global_rank if cross is not None else server.group_rank
    out: list = [None] * (server.size * num_servers)
    for l, msg in enumerate(shared):  # msg: local rank l's blocks of every server
        sizes = msg[:num_servers].tolist()
        for s, packed in enumerate(torch.split(msg[num_servers:], sizes)):
            rank = s * server.size + l
            out[rank] = block if rank == me else _with_weights(packed)
    return out


def _weighed(edge_weight: torch.Tensor | None) -> dict:
    """``edge_weight=`` for an adapter's ``partial`` / ``finish`` when there are weights
    (adapters written before edge weights, a plug-in's, take none)."""
    return {} if edge_weight is None else {"edge_weight": edge_weight}


_EDGE_WEIGHT = "_dglx_edge_weight"
"""``edata`` key of the first conv's edge weights on the blocks :func:`exchange_blocks`
gives."""


def _with_weights(packed: torch.Tensor) -> "Block":
    """The block a rank packed, with the edge weights it sent after it (if any)."""
    num_src, num_dst, num_edges = packed[:3].tolist()
    size = 3 + num_src + num_dst + 1 + num_edges
    block = unpack_block(packed[:size])
    if packed.numel() > size:
        block.edata[_EDGE_WEIGHT] = packed[size:].to(torch.int32).view(torch.float32)
    return block


@dataclasses.dataclass(eq=False)
class _InFlight:
    """A pipelined mini-batch between its launch and the arrival of its gradients."""

    block: object  # the forward's block (the user's)
    stash: list[torch.Tensor]  # the weight slices its partials were computed with
    flats: list[torch.Tensor]  # its partials for every rank's batch (autograd to ``stash``)
    shapes: list[torch.Size]  # of the partials for this rank's batch
    plan: OwnerReduce
    sums: Pending  # the partial sums on their way
    total: torch.Tensor | None = None  # this batch's layer-1 sum (a leaf: its .grad)
    back: Pending | None = None  # the output gradient on its way back


class P3FirstLayer(ConvWrapper):
    """A first conv split by input columns across the ranks (see the module docstring).

    Args:
        conv: the model's first conv; its input weights are taken out (``adapter.strip``).
        adapter: the conv's layer adapter.
        cols: the input columns this rank holds (indices, increasing).
        feat: this rank's columns of every node's input features (global-id order).
        server / cross: this rank's server group and the ranks with its local index, which
            share the layer (cross None: each server's ranks share it among themselves, each
            server holding every column).
        out_degree: every node's out-degree in the whole graph (called when a block's
            sources carry theirs: the full-graph form and whole-degree loaders, where the
            strategy has computed them already).
    """

    def __init__(self, conv: nn.Module, adapter: ConvAdapter, cols: torch.Tensor,
                 feat: torch.Tensor, server: Comm, cross: Comm | None,
                 out_degree: Callable[[], torch.Tensor]):
        super().__init__()
        lins = adapter.input_linears(conv)
        self.weights = nn.ParameterList(
            nn.Parameter(lin.columns(conv.get_parameter(lin.path).detach(), cols).clone())
            for lin in lins)
        adapter.strip(conv)
        self.conv, self.adapter, self.feat = conv, adapter, feat
        self.server, self.cross = server, cross
        self.id_dtype = id_dtype(feat.shape[0])
        self._ahead: collections.deque[_InFlight] = collections.deque()  # launched
        self._trained: list[_InFlight] = []  # forward done, gradient not yet sent
        self._returning: list[_InFlight] = []  # gradient on its way back
        self.deferred: list[torch.Tensor] | None = None  # slice gradients to apply
        self.out_degree = out_degree

    def _partials(self, block, weights: list[torch.Tensor],
                  host = None, edge_weight: torch.Tensor | None = None):
        """Every rank's partial of layer 1 from this rank's columns, on the weights' device.
        The structure travels and the rows are gathered in host memory (``host``: ``block``
        there, when the caller has it; else it is copied back), then copied to the device;
        the conv's edge weights of each rank's block travel with it."""
        device = weights[0].device
        host = host if host is not None else block.cpu()
        # the full-graph form (every rank at once): blocks hold a share of their sources'
        # out-edges, so rows are rescaled to the sources' degrees in the whole graph
        whole = OUT_DEGREE in host.srcdata
        blocks = exchange_blocks(self.server, self.cross, host, self.id_dtype, edge_weight)
        partials = []
        for b in blocks:
            weight = edge_weight if b is host else b.edata.pop(_EDGE_WEIGHT, None)
            # the stored features in the weights' dtype (a bfloat16 model's layer 1 is too)
            partials.append(self.adapter.partial(
                self.conv, weights,
                block if b is host else b.to(device),
                self._rows(b, whole, device).to(weights[0].dtype),
                **_weighed(None if weight is None else weight.to(device))))
        return partials

    def _rows(self, block, whole: bool, device: torch.device) -> torch.Tensor:
        """This rank's columns of ``block``'s (on the host) source rows, on ``device``."""
        ids = block.srcdata[NID]
        rows = rows_at(self.feat, ids, pin=device.type == "cuda")
        if whole:
            scale = self.adapter.degree_source_scale(self.conv, block,
                                                     self.out_degree().index_select(0, ids))
            rows = rows if scale is None else rows * scale
        return rows.to(device, non_blocking=True)

    def forward(self, block, x=None, edge_weight=None, **kwargs) -> torch.Tensor:
        if kwargs:
            raise NotSupportedError(f"p3: the model's first conv runs split by input columns "
                                    f"and takes (block, features, edge_weight=) only, not "
                                    f"{sorted(kwargs)}")
        self._check_edge_weight(block, edge_weight)
        if isinstance(x, torch.Tensor):
            raise InvalidTypeError("p3: the model's first conv computes from the stored features, "
                                   "split by columns across the ranks; it takes "
                                   "g.ndata['feat'][input_nodes] unchanged, not a tensor made from "
                                   "it. Transform the features before dglx_dist.distribute")
        state = state_of(block)  # a launched batch's first layer travels with its step
        if self._ahead and state is not None and self._ahead[0] is state.plan:
            if edge_weight is not None:
                raise NotSupportedError("p3: the pipeline launched this batch's first conv "
                                        "before its forward, without the edge weights the "
                                        "forward passes; weigh the first conv's edges without "
                                        "the pipeline (p3's default, pipeline=False)")
            return self._forward_launched(self._ahead.popleft())
        totals = reduce_to_owners(self.server, self.cross, self._partials(
            block, list(self.weights), edge_weight=edge_weight))
        return self.adapter.finish(self.conv, block, totals, **_weighed(edge_weight))

    def _check_edge_weight(self, block, edge_weight) -> None:
        if edge_weight is None:
            return
        if "edge_weight" not in inspect.signature(self.adapter.partial).parameters:
            raise NotSupportedError(f"p3: the first conv, a {type(self.conv).__name__}, runs "
                                    "split by input columns through an adapter that takes no "
                                    "edge weights")
        if not isinstance(edge_weight, torch.Tensor) or edge_weight.numel() != \
                block.num_edges():
            raise InvalidValueError(f"p3: the first conv's edge_weight needs one value per "
                                    f"edge of its block ({block.num_edges()})")
        if edge_weight.requires_grad:
            raise NotSupportedError("p3: the first conv's edge weights travel to every rank "
                                    "as data, so they cannot be learned there (their gradient "
                                    "would not come back); detach them, or learn them in a "
                                    "later layer")

    # -- pipelined mode ---------------------------------------------------------------------
    def launch(self, block, host=None) -> "_InFlight":
        """Starts layer 1 of a training batch that a later forward will use (collective);
        ``block`` is the one the forward will get, ``host`` the same block in host memory.
        Returns the launch, for the step's state (:meth:`forward` finds it there)."""
        stash = [w.detach().clone().requires_grad_() for w in self.weights]
        with torch.enable_grad():
            partials = self._partials(block, stash, host)
            flats = flatten_partials(partials)
        plan = OwnerReduce(self.server, self.cross, [f.numel() for f in flats])
        self._ahead.append(_InFlight(block, stash, flats, [t.shape for t in partials[plan.me]],
                                     plan, plan.start_forward(flats)))
        return self._ahead[-1]

    def waiting(self, launch: object) -> bool:
        """Whether ``launch`` (a step's) is one whose forward has not run yet."""
        return any(entry is launch for entry in self._ahead)

    def _forward_launched(self, entry: _InFlight) -> torch.Tensor:
        entry.total = entry.plan.finish_forward(entry.sums).requires_grad_(self.training)
        if self.training:
            self._trained.append(entry)
        return self.adapter.finish(self.conv, entry.block, unflatten(entry.total, entry.shapes))

    def after_backward(self) -> None:
        """Collective, once per training step after the backward pass: finishes the gradient
        exchanges started one step ago, starts this step's, and adds every finished slice
        gradient to the weights' ``.grad``."""
        self.drain()
        for entry in self._trained:
            grad = entry.total.grad
            entry.back = entry.plan.start_backward(grad if grad is not None
                                                   else torch.zeros_like(entry.total))
            self._returning.append(entry)
        self._trained = []
        if self.deferred is not None:
            for w, g in zip(self.weights, self.deferred):
                w.grad = g if w.grad is None else w.grad + g
            self.deferred = None

    def drain(self) -> None:
        """Finishes the gradient exchanges under way (collective); their slice gradients wait
        for the next :meth:`after_backward`."""
        for entry in self._returning:
            torch.autograd.backward(entry.flats, entry.plan.finish_backward(entry.back))
            grads = [w.grad for w in entry.stash]
            if self.deferred is None:
                self.deferred = grads
            else:
                self.deferred = [a + g for a, g in zip(self.deferred, grads)]
        self._returning = []


def whole_rows(store, name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """A :class:`ColumnSlice`'s ``pull``: whole rows of ``name`` through the graph's KVStore
    ``store`` (this rank alone; None: no store, refused)."""
    def pull(ids: torch.Tensor) -> torch.Tensor:
        if store is None or name not in store.names():
            raise StateError("p3: whole feature rows can only be pulled through the graph "
                             "dglx_dist.distribute returns")
        return store.pull(name, ids, collective=False)
    return pull


class ColumnSlice:
    """What ``g.ndata["feat"][ids]`` gives under ``p3``: a handle on the rows of ``ids``
    that :class:`P3FirstLayer` consumes, computing layer 1 from the column slice every rank
    holds (P3 never moves whole feature rows).

    ``shape`` is the rows' and ``.to(...)``, ``.float()``, ``.contiguous()`` keep the handle
    (so it may sit in a block's ``srcdata``, where the loader's prefetch puts it).
    Any other use (a torch function, an operator, a tensor method) materialises the rows with a
    warning: this rank then pulls every other rank's columns of them, the traffic P3 exists to
    avoid, and the result is a plain tensor that the first layer refuses (it computes from the
    stored features; transform them before :func:`dglx_dist.distribute` instead).

    On a graph with node types (:mod:`dglx_dist.strategies.p3.projections`) the handle also has a
    ``linear``: ``F.linear(handle, weight, bias)`` (an ``nn.Linear``) then runs P3's split
    linear map instead of materialising.

    Args:
        ids: the rows' node ids (partitioned; row ids of the type on a graph with types).
        source: this rank's columns of every row, from which :attr:`columns` are gathered
            when first read (the first layer reads the stored columns itself: a handle that
            only rides to it gathers nothing).
        feat_dim: the rows' width.
        pull: ``pull(ids) -> rows``, whole rows from every rank's columns (this rank alone).
        linear: ``linear(handle, weight, bias) -> rows``, the split linear map, or None.
    """

    def __init__(self, ids: torch.Tensor, source: torch.Tensor, feat_dim: int,
                 pull: Callable[[torch.Tensor], torch.Tensor],
                 linear: Callable[..., torch.Tensor] | None = None):
        self.ids, self._source, self._pull, self._linear = ids, source, pull, linear
        self._columns: torch.Tensor | None = None
        self.shape = torch.Size([ids.numel(), feat_dim])
        self.dtype, self.device = source.dtype, source.device

    @property
    def columns(self) -> torch.Tensor:
        """This rank's columns of the rows (gathered on first use)."""
        if self._columns is None:
            self._columns = rows_at(self._source, self.ids)
        return self._columns

    def gathered(self) -> "ColumnSlice":
        """The handle, its :attr:`columns` gathered now (on the calling thread)."""
        _ = self.columns
        return self

    def to(self, *args, **kwargs) -> "ColumnSlice":
        return self

    float = contiguous = cpu = cuda = to  # DGL moves a block's data (the loader's prefetch)

    def __len__(self) -> int:
        return self.ids.numel()

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    def materialise(self, why: str = "") -> torch.Tensor:
        """The whole rows, pulled from every rank's columns (warns what that costs)."""
        rows = self._pull(self.ids)
        mib = rows.numel() * rows.element_size() / 2**20
        warnings.warn(f"p3: {why or 'this use'} needs the whole feature rows of a batch, "
                      f"pulled from every rank's column slices ({mib:.1f} MiB here); P3 "
                      f"avoids moving rows, and "
                      f"the model's first conv only takes the unchanged handle",
                      stacklevel=3)
        return rows

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        split = _split_linear(func, args, kwargs or {})
        if split is not None:
            return split
        why = f"{getattr(func, '__name__', func)}()"

        def whole(v):
            if isinstance(v, ColumnSlice):
                return v.materialise(why)
            if isinstance(v, (tuple, list)):
                return type(v)(whole(x) for x in v)
            return v

        return func(*whole(args), **{k: whole(v) for k, v in (kwargs or {}).items()})

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.materialise(f".{name}"), name)

    def __getitem__(self, key):
        return self.materialise("indexing")[key]

    def __array__(self, dtype=None):
        rows = self.materialise("numpy").numpy()
        return rows if dtype is None else rows.astype(dtype)


def _split_linear(func, args: tuple, kwargs: dict) -> torch.Tensor | None:
    """``F.linear(handle, weight, bias)`` by the handle's own split linear map, or None (not
    ``F.linear``, no such map, or a weight or bias that is itself a handle)."""
    if func is not F.linear:
        return None
    names = ("input", "weight", "bias")
    given = dict(zip(names, args), **kwargs)
    x, weight, bias = (given.get(n) for n in names)
    if not isinstance(x, ColumnSlice) or x._linear is None or \
            not isinstance(weight, torch.Tensor) or isinstance(bias, ColumnSlice):
        return None
    return x._linear(x, weight, bias)


def _binary(name: str):
    def op(self, other):
        return getattr(self.materialise(f"operator {name}"), name)(other)
    op.__name__ = name
    return op


for _op in ("add", "sub", "mul", "truediv", "matmul", "pow"):
    for _name in (f"__{_op}__", f"__r{_op}__"):
        setattr(ColumnSlice, _name, _binary(_name))
