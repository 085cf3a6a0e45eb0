"""``g.ndata``: one view per node-data name of a :class:`~dglx_dist.api.DistGraph` (see
:mod:`dglx_dist.api.graph` for what a view means as an index and as a whole tensor). A view
holds its graph (``graph``: the DistGraph) without importing it: the graph imports its views.
One concept at some 420 lines: a node-data name's view, its spaces and the ids it takes."""
from __future__ import annotations

import abc
import dataclasses
from typing import Any, Iterator

import torch

from dglx_dist.errors import IdOutOfRangeError, InvalidValueError, UnknownNameError
from dglx_dist.kvstore import INTERNAL_PREFIX, PullUnderWay, RowPolicy, typed_key
from dglx_dist.kvstore.base import EDGE_PREFIX
from dglx_dist.kvstore.policy import rows_at
from dglx_dist.strategies.abilities import HoldsRows

__all__ = ["fit_rows", "stored_tensor", "DataViews", "NodeData", "NodeDataView", "NodeSpace",
           "space_for", "as_node_ids", "MASKS", "EDGE_PREFIX", "INTERNAL_PREFIX",
           "DEFAULT_NTYPE"]

MASKS = {"train_mask": "train", "val_mask": "val", "test_mask": "test"}
DEFAULT_NTYPE = "_N"  # DGL's name of the one node type of a graph without types


@dataclasses.dataclass(frozen=True, eq=False)
class NodeSpace:
    """The rows of one node type (DGL's node partition policy of that type), or of every
    node of a graph without types.

    Attributes:
        ntype: the type's name (:data:`DEFAULT_NTYPE` for a graph without types).
        policy: where the rows live, over row ids.
        num_nodes: nodes of the type.
        to_rows: ``to_rows[i]`` is the row id of node ``i`` (None: the same).
        hom_offset: the type's first id among the partitioning's original homogeneous ids.
        typed: whether this is one type of a graph with types.
        names: the user's names of stored node data, where they differ (``{"feat":
            "features"}``).
    """

    ntype: str
    policy: RowPolicy
    num_nodes: int
    to_rows: torch.Tensor | None = None
    hom_offset: int = 0
    typed: bool = False
    names: dict[str, str] = dataclasses.field(default_factory=dict)

    def stored(self, name: str) -> str:
        """The store's name of node data the user calls ``name`` (``names`` maps the
        partitions' ``ndata_names`` back; the stored names reach the same rows)."""
        return next((s for s, user in self.names.items() if user == name), name)

    def shown(self, stored: str) -> str:
        """The user's name of stored node data ``stored``."""
        return self.names.get(stored, stored)

    @property
    def policy_str(self) -> str:
        return f"node~{self.ntype}"  # DGL's name of a node policy

    @property
    def type_name(self) -> str:
        return self.ntype

    def get_size(self) -> int:
        """Rows of the type (DGL's ``PartitionPolicy.get_size``)."""
        return self.num_nodes

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """The row ids of node ids ``ids``."""
        return ids if self.to_rows is None else rows_at(self.to_rows, ids)

    def key(self, name: str) -> str:
        """The store's name of node data ``name`` of this type."""
        name = self.stored(name)
        return typed_key(self.ntype, name) if self.typed else name

    def what(self, name: str) -> str:
        """How a message names node data ``name`` of this type."""
        return f"g.nodes[{self.ntype!r}].data[{name!r}]" if self.typed else f"g.ndata[{name!r}]"

    def check(self, key, what: str) -> torch.Tensor:
        """Node ids of this type from a mask or ids (one line naming the type otherwise)."""
        where = f"{what} (node type {self.ntype!r})" if self.typed else what
        return as_node_ids(key, self.num_nodes, where)


def stored_tensor(store, key: str, policy, shape: tuple[int, ...], dtype: torch.dtype,
                  init, name: str) -> None:
    """DGL's ``DistTensor`` in the store: ``key`` created with rows of ``shape[1:]`` under
    ``policy`` (collective), or, when it exists with rows of that shape and dtype, attached
    to (its rows kept); one line otherwise."""
    if key not in store.names():
        store.init_data(key, policy, {}, trailing_shape=shape[1:], dtype=dtype,
                        init=init or "zeros")
    elif (tuple(store.shape(key)[1:]), store.dtype(key)) != (shape[1:], dtype):
        raise InvalidValueError(f"DistTensor: name {name!r} exists with shape "
                                f"{tuple(store.shape(key))} and {store.dtype(key)}; expected "
                                f"the same rows to attach to it (got {shape}, {dtype}), or "
                                "another name")


def fit_rows(values, shape: tuple[int, ...], dtype: torch.dtype, what: str) -> torch.Tensor:
    """``values`` written as rows of ``shape`` and ``dtype``: the shape must be that or
    broadcast to it (torch's rules, as DGL's), and a cast may not overflow the dtype.

    Raises:
        InvalidValueError: naming ``what``, the shapes, or the largest value."""
    values = torch.as_tensor(values)
    where = f"{what}[ids] = values"
    try:
        values = values.broadcast_to(shape)
    except RuntimeError:
        raise InvalidValueError(f"{where}: values of shape {tuple(values.shape)} for "
                                f"{shape[0]} rows of shape {tuple(shape[1:])}; expected "
                                f"{shape} (or a shape that broadcasts to it)") from None
    cast = values.to(dtype)
    if cast.is_floating_point() and values.is_floating_point() and \
            bool((torch.isinf(cast) & ~torch.isinf(values)).any()):
        raise InvalidValueError(f"{where}: values outside {dtype}'s range (largest "
                                f"{values.abs().max().item():.3g}) would become inf; scale "
                                f"them or store a wider dtype")
    return cast.contiguous()


class DataViews(abc.ABC):
    """A read-only mapping of names to views (``g.ndata``, ``g.edata``): subclasses say which
    names there are, how to view one, the graph's types when it has several (``_several``)
    and how a missing name is refused (``_missing``)."""

    kind = ""  # "node" or "edge", for messages

    @abc.abstractmethod
    def keys(self) -> list[str]:
        """The names there are."""

    @abc.abstractmethod
    def view(self, name: str) -> Any:
        """The view of ``name`` (an existing name)."""

    @property
    def data(self) -> "DataViews":
        """Itself: ``g.nodes[ntype]`` and ``g.edges[etype]`` are their type's data, so that
        DGL's ``g.nodes[ntype].data[name]`` reads it."""
        return self

    def __contains__(self, name: object) -> bool:
        return name in self.keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __getitem__(self, name: str) -> Any:
        k, several = self.kind[0], self._several()  # DGL's rule: g.ndata of several types
        if several:  # has no data; g.nodes[ntype].data has
            raise UnknownNameError(f"g.{k}data[{name!r}]: this graph has {self.kind} types "
                                   f"{several}; use g.{self.kind}s[{k}type].data[{name!r}]")
        if name not in self:
            raise UnknownNameError(self._missing(name))
        return self.view(name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.keys()})"


class NodeData(DataViews):
    """``g.ndata`` (a graph of one node type: ``space`` None) or ``g.nodes[ntype].data``
    (``space`` the type's): a view per node-data name of one node type."""

    kind = "node"

    def __init__(self, graph, space: NodeSpace | None = None):
        self._g, self._space = graph, space

    @property
    def space(self) -> NodeSpace:
        """The node type's rows (``g.ndata``: the graph's one type)."""
        return self._space or next(iter(self._g.spaces.values()))

    def _several(self) -> list[str]:
        return self._g.ntypes if self._space is None and len(self._g.spaces) > 1 else []

    def keys(self) -> list[str]:
        if self._several():
            return []
        space = self.space
        prefix = space.key("")
        names = [n[len(prefix):] for n in self._g.store.names() if n.startswith(prefix)]
        names = [n for n in names if not n.startswith((EDGE_PREFIX, INTERNAL_PREFIX))]
        if not space.typed and "feat" not in names:  # rows a strategy holds itself
            names = ["feat", *names]
        return [space.shown(n) for n in names]

    def __contains__(self, name: object) -> bool:  # a renamed stored name reaches it too
        keys = self.keys()
        return name in keys or (bool(keys) and self.space.shown(name) in keys)

    def _missing(self, name: str) -> str:
        owner = f"node type {self.space.ntype!r}" if self.space.typed else "this graph"
        return f"{self.space.what(name)}: {owner} has no such data; it has {self.keys()}"

    def view(self, name: str) -> "NodeDataView":
        return NodeDataView(self._g, name, self.space)


class NodeDataView:
    """One node-data name of a :class:`DistGraph`, of one node type on a graph with types
    (see the module docstring)."""

    def __init__(self, graph, name: str, space: NodeSpace | None = None):
        self._g, self.space = graph, space or graph.node_space
        self.key, self.name = name, self.space.key(name)  # the user's name, the store's
        self.what = self.space.what(name)

    @property
    def shape(self) -> torch.Size:
        if self.name in self._g.store.names():
            return torch.Size(self._g.store.shape(self.name))
        return torch.Size([self._g.num_nodes(), self._g.pdir.feat_dim])

    @property
    def dtype(self) -> torch.dtype:
        """The rows' dtype (masks read as bool)."""
        if self._cast is not None:
            return self._cast
        if self.key in MASKS:
            return torch.bool
        return self._g.store.dtype(self.name) if self.name in self._g.store.names() else \
            torch.float32  # features a strategy holds itself

    device = torch.device("cpu")  # where reads land
    _cast: torch.dtype | None = None  # what reads are cast to (None: the stored dtype)

    def to(self, *args, **kwargs) -> "NodeDataView":
        """This view with its reads landing on another device (and cast to another dtype), as
        ``tensor.to(...)`` takes a tensor there: a view again, nothing is read here (a
        script's ``g.ndata["feat"].to(device)`` would otherwise copy every node's row)."""
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)  # nn.Module.to's parse
        view = self.__copy__()
        if device is not None:
            view.device = device
        if dtype is not None:
            view._cast = dtype
        return view

    def cpu(self) -> "NodeDataView":
        return self.to("cpu")

    def cuda(self, device=None) -> "NodeDataView":
        return self.to("cuda" if device is None else device)

    def _placed(self, rows: Any) -> Any:
        """Rows read through this view, on its device and in its dtype."""
        if not isinstance(rows, torch.Tensor) or \
                rows.device == self.device and (self._cast in (None, rows.dtype)):
            return rows
        return rows.to(device=self.device, dtype=self._cast or rows.dtype)

    def __len__(self) -> int:
        return self.space.num_nodes

    def __getitem__(self, key) -> Any:
        if isinstance(key, NodeDataView) and not self.space.typed:  # a mask of the same
            return self.local()[key.local().bool().to(self.device)]  # graph: own rows
        taken = self._g.step_rows.take(self.name, key)  # a loader pulled them
        if taken is not None:
            return self._placed(self._typed(taken))
        if not self._held_by_strategy():
            self._g.step_rows.note(self.name, self.space, key)
        return self._placed(self.rows(self.space.rows(self._ids(key))))

    def __setitem__(self, key, values: torch.Tensor) -> None:
        """Writes rows (this rank alone; the owners apply them before it returns, and other
        ranks see them after a :meth:`DistGraph.barrier`, as in DGL)."""
        ids = self.space.rows(self._ids(key))
        values = fit_rows(values, (ids.numel(), *self.shape[1:]),
                          self._g.store.dtype(self.name), self.what)
        self._g.store.push(self.name, ids, values, "assign", collective=False)

    def rows(self, ids: torch.Tensor) -> Any:
        """Rows of partitioned ``ids``, in that order: this rank alone asks the owners
        (:meth:`start_together`: every rank at the same step, the faster path a loader takes)."""
        if self._held_by_strategy():
            held = self._g.strategy.local_rows(self.name, ids)
            if held is not None:
                return held
        return self._typed(self._stored().pull(self.name, ids, collective=False))

    @staticmethod
    def start_together(reads: list[tuple["NodeDataView", torch.Tensor]],
                       store=None) -> list[PullUnderWay]:
        """:meth:`rows` of several views (each ``(view, ids)``, the ids without duplicates:
        a block's nodes, not deduplicated again), collective (every rank calls it at the
        same step, whatever each asks): one exchange of the store's rows, returned while the
        rows of other servers travel; ``wait()`` on each result gives its rows (a step's
        labels and features travel together). A name the strategy may hold itself is read
        by this rank alone, at once: ranks may differ in which of its rows they hold, so no
        collective could be agreed on. ``store``: the graph's store on other communicators
        (:meth:`~dglx_dist.kvstore.KVStore.on`: a loader's worker thread pulls through it),
        by default the graph's."""
        out: list[PullUnderWay | None] = [None] * len(reads)
        pulled = []
        for i, (view, ids) in enumerate(reads):
            if view._held_by_strategy():
                out[i] = PullUnderWay(lambda rows=view.rows(ids): rows)
            else:
                pulled.append((i, view, ids))
        if pulled:
            if store is None:  # (each view refuses a name the store does not hold)
                store = [view._stored() for _, view, _ in pulled][0]
            many = store.start_pull_many([(view.name, ids) for _, view, ids in pulled],
                                         dedup=False)
            for j, (i, view, _) in enumerate(pulled):
                out[i] = PullUnderWay(lambda j=j, view=view: view._typed(many.wait()[j]))
        return out

    def _held_by_strategy(self) -> bool:
        strategy = self._g.strategy
        return self._g.is_set_up and isinstance(strategy, HoldsRows) and \
            self.name in strategy.held_rows

    def _stored(self):
        """The store that holds this name."""
        if self.name not in self._g.store.names():
            raise UnknownNameError(f"g.ndata[{self.name!r}] is held by the strategy, which is set "
                                   "up by the first DataLoader or parallelize call; read it after "
                                   "that")
        return self._g.store

    def _typed(self, rows: torch.Tensor) -> torch.Tensor:
        return rows.bool() if self.key in MASKS else rows

    def local(self) -> Any:
        """The rows of this rank's nodes (:meth:`DistGraph.local_nodes`; the full-graph form
        refuses a graph with types)."""
        return self._placed(self.rows(
            self._g.full_graph_form(f"{self.what}.local()").local_nodes()))

    def full(self) -> torch.Tensor:
        """Every node's row, in node id order (the whole tensor)."""
        return self._placed(self.rows(self.space.rows(torch.arange(self.space.num_nodes))))

    def __reduce_ex__(self, protocol):
        """Pickled (``torch.save(g.ndata[name], f)``, a layer-wise inference's ``DistTensor``)
        as the whole tensor it views, read by this rank: loading gives that tensor."""
        return self.full().__reduce_ex__(protocol)

    def __copy__(self) -> "NodeDataView":  # a copy is another view of the same rows
        view = object.__new__(type(self))
        view.__dict__.update(self.__dict__)
        return view

    def __deepcopy__(self, memo) -> "NodeDataView":
        return self.__copy__()

    def _ids(self, key) -> torch.Tensor:
        if isinstance(key, slice):
            return torch.arange(self.space.num_nodes)[key]
        if isinstance(key, NodeDataView) and key.space is not self.space:
            raise InvalidValueError(f"{self.what}[{key.what}]: a mask of node type "
                                    f"{key.space.ntype!r} used on type {self.space.ntype!r}")
        return self.space.check(key, f"{self.what}[...]")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.__getitem__:
            index = args[1][0] if isinstance(args[1], tuple) and len(args[1]) == 1 else args[1]
            if isinstance(index, NodeDataView):  # an output's rows of this rank's nodes
                return args[0][index.local().bool()]
        return func(*_whole(args), **_whole(kwargs or {}))

    def __repr__(self) -> str:
        typed = f"{self.space.ntype!r}, " if self.space.typed else ""
        return f"NodeDataView({typed}{self.key!r}, shape={tuple(self.shape)})"


def as_node_ids(key, num_nodes: int, what: str, kind: str = "node") -> torch.Tensor:
    """Node ids from a boolean mask over every node or from integer ids (1-D, in range);
    ``kind="edge"`` says edges in the messages (the same rules for edge ids).

    Raises:
        IndexError: anything else, naming ``what`` and what was expected.
    """
    # a view is the whole tensor (torch.as_tensor would read it row by row, a pull each)
    ids = key.full().cpu() if isinstance(key, NodeDataView) else torch.as_tensor(key)
    if ids.dtype == torch.bool:
        if ids.shape != (num_nodes,):
            raise IdOutOfRangeError(f"{what}: a boolean mask needs one entry per {kind} "
                                    f"({num_nodes}); got shape {tuple(ids.shape)}")
        return torch.nonzero(ids).squeeze(1)
    if ids.is_floating_point() or ids.dim() > 1:
        raise IdOutOfRangeError(f"{what}: expected a boolean mask or integer ids (a 1-D tensor or "
                                f"a list); got {ids.dtype} of shape {tuple(ids.shape)}")
    ids = ids.reshape(-1).long()
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
        bad = ids[(ids < 0) | (ids >= num_nodes)][:5].tolist()
        raise IdOutOfRangeError(f"{what}: ids {bad} out of range; the graph has {kind}s "
                                f"0..{num_nodes - 1}")
    return ids


def _whole(value):
    """``value`` with every view (also inside tuples, lists and dicts) made a whole tensor."""
    if isinstance(value, NodeDataView):
        return value.full()
    if isinstance(value, (tuple, list)):
        return type(value)(_whole(v) for v in value)
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    return value


def space_for(graph, rows: int, part_policy, what: str) -> NodeSpace:
    """The node rows a tensor of ``rows`` rows follows: ``part_policy`` when given (from
    ``g.get_node_partition_policy``), else, as DGL does, the one node type with that many
    nodes. One line saying what would fit otherwise."""
    if part_policy is not None and not isinstance(part_policy, NodeSpace):
        raise InvalidValueError(f"{what}: part_policy={part_policy!r}; expected "
                                "g.get_node_partition_policy(ntype)")
    spaces = [part_policy] if part_policy is not None else \
        [s for s in graph.spaces.values() if s.num_nodes == rows]
    if len(spaces) == 1 and spaces[0].num_nodes == rows:
        return spaces[0]
    sizes = {s.ntype: s.num_nodes for s in graph.spaces.values()}
    if len(spaces) > 1:
        raise InvalidValueError(f"{what}: {rows} rows fit node types "
                                f"{[s.ntype for s in spaces]}; pass "
                                "part_policy=g.get_node_partition_policy(ntype)")
    raise InvalidValueError(f"{what}: {rows} rows; tensors here have one row per node of a "
                            f"type ({sizes})")
