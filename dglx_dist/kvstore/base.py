"""The KVStore interface: named tensors split into parts, read with pull, updated with push.

Public methods validate their arguments, then call what subclasses implement (``_init_data``,
``_start_pull_many``, ``_push_many``); on bad arguments they call ``_pull_nothing`` /
``_push_nothing`` (so the other ranks do not hang) and then raise on the caller.
"""
from __future__ import annotations

import abc
import operator
from typing import Callable, Mapping, Sequence

import numpy as np
import torch

from dglx_dist.errors import InvalidTypeError, InvalidValueError, UnknownNameError
from dglx_dist.kvstore.entries import InitSpec, TensorEntry
from dglx_dist.kvstore.ops import BUILTIN_OPS, COMBINE_RULES, INITS, Init, OpHandler, PushOp
from dglx_dist.kvstore.policy import PartitionPolicy
from dglx_dist.runtime.pending import Pending

__all__ = ["KVStore", "PullUnderWay", "INTERNAL_PREFIX", "EDGE_PREFIX", "typed_key", "edge_key"]

INTERNAL_PREFIX = "_dglx/"  # a graph's store: the names of the package's own data
EDGE_PREFIX = "edata/"  # a graph's store: the names of edge data (g.edata), not node data


def edge_key(name: str) -> str:
    """A graph's store's name of edge data ``name`` (what ``g.edata[name]`` reads)."""
    return EDGE_PREFIX + name


def typed_key(ntype: str, name: str) -> str:
    """A graph's store's name of node data ``name`` of node type ``ntype`` (a typed graph):
    what ``g.nodes[ntype].data[name]`` reads, and what a strategy holding those rows itself
    lists in its ``held_rows``."""
    return f"{INTERNAL_PREFIX}ntype/{ntype}/{name}"


class PullUnderWay(Pending):
    """A collective pull under way (:meth:`KVStore.start_pull`): ``wait()`` gives the rows
    (later calls the same rows), read by ``finish()`` outside autograd."""

    def __init__(self, finish: Callable[[], torch.Tensor]):
        super().__init__(None, "pull", None, torch.no_grad()(finish))


def _part_index(key) -> int | None:
    try:
        return operator.index(key)
    except TypeError:
        return None


class KVStore(abc.ABC):
    """Named tensors sharded into parts by a partition policy.

    Args:
        seed: mixed into the seeds of callable initialisers (the same on every rank).
    """

    def __init__(self, seed: int = 0):
        self.seed = int(seed)
        self._entries: dict[str, TensorEntry] = {}
        self._ops: dict[str, PushOp] = dict(BUILTIN_OPS)
        self.pushes: dict[str, int] = {}  # pushes by name (rows pulled before are stale)

    # -- registration ------------------------------------------------------------------------
    def init_data(self, name: str, policy: PartitionPolicy,
                  part_data: Mapping[int, torch.Tensor | np.ndarray] | None = None, *,
                  trailing_shape: tuple[int, ...] | None = None,
                  dtype: torch.dtype | None = None, init: Init = "zeros") -> None:
        """Registers the named tensor ``name``.

        Call it in the same order with the same arguments (except ``part_data``) on every rank:
        it is collective in a distributed store.

        Args:
            name: a new name.
            policy: where the rows live.
            part_data: local tensors of parts this process loaded (e.g. a partition's features);
                parts nobody passes are initialised with ``init``.
            trailing_shape: shape of one row; default: inferred from ``part_data``.
            dtype: element type; default: ``part_data``'s, else float32.
            init: "zeros" or ``init(shape, dtype) -> Tensor``, seeded per (store seed, name,
                part), so every process builds the same rows for a part.

        Raises:
            ValueError / KeyError / TypeError: bad arguments (on every rank of a distributed
                store when any rank's are bad).
        """
        try:
            spec, error = self._check_init(name, policy, part_data, trailing_shape, dtype,
                                           init), None
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            spec, error = None, exc
        entry = self._init_data(name, spec, error)
        self._entries[name] = entry

    def register_op(self, name: str, fn: OpHandler, *, combine: str = "sum") -> None:
        """Registers a push op ``fn(current_rows, values, local_ids, state) -> new_rows``.

        Register the same ops in the same order on every rank (distributed pushes refer to ops
        by registration index). See :mod:`dglx_dist.kvstore.ops` for ``state``.

        Args:
            name: a new op name.
            fn: the handler, applied where the rows live.
            combine: how duplicate ids' values are combined first: "sum" or "last".
        """
        if not isinstance(name, str) or not name or name in self._ops:
            raise InvalidValueError(f"op name {name!r} is empty or already registered; registered: "
                                    f"{sorted(self._ops)}")
        if not callable(fn):
            raise InvalidTypeError(f"op {name!r}: handler {fn!r} is not callable")
        if combine not in COMBINE_RULES:
            raise InvalidValueError(f"op {name!r}: combine {combine!r}; expected one of "
                                    f"{sorted(COMBINE_RULES)}")
        self._ops[name] = PushOp(name, fn, combine)

    # -- access ------------------------------------------------------------------------------
    def pull(self, name: str, ids: torch.Tensor, dedup: bool = True, *,
             collective: bool = True) -> torch.Tensor:
        """Rows ``ids`` of ``name`` in the order asked (duplicates allowed), on the CPU.

        ``dedup=False`` skips deduplicating ``ids``: faster when they are known to be unique
        (a block's input nodes); duplicates are then still answered, each fetched separately.

        ``collective=True``: every rank of a distributed store calls it the same number of
        times (the fast path of training steps); ``collective=False``: this rank alone, the
        owners answer without taking part (see :mod:`dglx_dist.kvstore.dist`).

        Raises:
            KeyError: unknown name. ValueError: ids not 1-D int64 within ``[0, num_rows)``.
        """
        if collective:
            return self.start_pull(name, ids, dedup).wait()
        entry = self._checked_pull(name, ids)
        with torch.no_grad():
            return self._pull_p2p(entry, ids.cpu(), dedup)

    def start_pull(self, name: str, ids: torch.Tensor, dedup: bool = True) -> "PullUnderWay":
        """A collective :meth:`pull`, returned while the rows of other servers travel (to
        overlap them with other work, e.g. the previous batch's compute); ``wait()`` on the
        result gives the rows. Own-server rows are read before it returns. Until it is waited
        for, the store's other collective calls queue behind its bytes on the same links.
        Raises what :meth:`pull` raises."""
        many = self.start_pull_many([(name, ids)], dedup)
        return PullUnderWay(lambda: many.wait()[0])

    def start_pull_many(self, pulls: Sequence[tuple[str, torch.Tensor]],
                        dedup: bool = True) -> "PullUnderWay":
        """Several collective pulls (``(name, ids)`` each) started as one exchange; ``wait()``
        gives their rows, a tensor per pull in order. Every rank calls it where it would have
        started one pull (ranks may ask for different names and numbers of pulls). Raises what
        :meth:`pull` raises."""
        try:
            entries = [self._checked_pull(name, ids) for name, ids in pulls]
        except (KeyError, ValueError):
            self._pull_nothing()
            raise
        with torch.no_grad():
            return PullUnderWay(self._start_pull_many(
                [(entry, ids.cpu(), dedup) for entry, (_, ids) in zip(entries, pulls)]))

    def push_many(self, pushes: Sequence[tuple[str, torch.Tensor, torch.Tensor, str]]) -> None:
        """Several collective pushes (``(name, ids, values, op)`` each, every name once) as
        one step: the same as pushing them one after another, in one exchange. Every rank
        calls it where it would have pushed (ranks may push different names and numbers).

        Raises:
            KeyError / ValueError: as :meth:`push`; a name given twice.
        """
        try:
            args = [self._checked_push(*push) for push in pushes]
            names = [name for name, *_ in pushes]
            if len(set(names)) != len(names):
                raise InvalidValueError(f"push_many: names {names}; each name at most once")
        except (KeyError, ValueError):
            self._push_nothing()
            raise
        for name in names:
            self.pushes[name] = self.pushes.get(name, 0) + 1
        with torch.no_grad():  # stored rows never join an autograd graph
            self._push_many(args)

    def push(self, name: str, ids: torch.Tensor, values: torch.Tensor,
             op: str = "assign", *, collective: bool = True) -> None:
        """Applies ``op`` to rows ``ids`` of ``name`` with ``values`` (one row per id).

        "assign": duplicates resolve to their last occurrence; "add": duplicates are summed;
        registered ops see pre-combined values. ``collective`` as in :meth:`pull`; a
        non-collective push returns once every owner has applied it, so a later pull from any
        rank sees it.

        Raises:
            KeyError: unknown name or op. ValueError: bad ids, or values of the wrong dtype
                or shape.
        """
        if collective:
            return self.push_many([(name, ids, values, op)])
        args = self._checked_push(name, ids, values, op)
        self.pushes[name] = self.pushes.get(name, 0) + 1
        with torch.no_grad():
            self._push_p2p(*args)

    def checkpoint_parts(self, name: str) -> dict[int, torch.Tensor]:
        """The local tensors of the parts of ``name`` this process writes into a checkpoint and
        restores from it (in place): every part is some one process's."""
        return {p: t for p, t in self.local_parts(name).items() if self._checkpoints_part(p)}

    def _checkpoints_part(self, part: int) -> bool:
        return True

    def local_parts(self, name: str) -> dict[int, torch.Tensor]:
        """The local tensors of the parts of ``name`` this process can read, by part (writes
        into the store land in them)."""
        return dict(self._entry(name).parts)

    def on(self, twin) -> "KVStore":
        """This store with its collective pulls on ``twin(comm)`` for each communicator
        ``comm`` they exchange on (a group of its own with the same members; collective):
        what a loader's worker thread pulls through while the calling thread pulls and pushes
        through this one. It shares the names, rows and push counts; use it for pulls only.
        A store whose pulls exchange nothing is itself."""
        return self

    def forget_written(self) -> None:
        """Drops the copies of other servers' rows of the names some rank wrote alone since
        the last call (collective, at a barrier: other ranks see such writes after one); a
        store that copies none has none to drop."""

    @property
    def finish_exchanges(self) -> bool:
        """Whether finishing a collective pull (its ``wait()``) runs exchanges of its own,
        so the thread that started it on a copy from :meth:`on` must finish it too."""
        return False

    def names(self) -> list[str]:
        """Registered names, in registration order."""
        return list(self._entries)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._entry(name).shape

    def dtype(self, name: str) -> torch.dtype:
        return self._entry(name).dtype

    def policy(self, name: str) -> PartitionPolicy:
        return self._entry(name).policy

    def ops(self) -> list[str]:
        """Registered op names, in registration order."""
        return list(self._ops)

    # -- for subclasses ----------------------------------------------------------------------
    @abc.abstractmethod
    def _init_data(self, name: str, spec: InitSpec | None,
                   error: Exception | None) -> TensorEntry:
        """Builds the entry (``spec`` None when local validation failed with ``error``)."""

    @abc.abstractmethod
    def _start_pull_many(self, pulls: list) -> Callable[[], list[torch.Tensor]]:
        """Collective pulls ``(entry, ids, dedup)`` started together; returns what finishes
        them (their rows, a tensor per pull)."""

    @abc.abstractmethod
    def _push_many(self, pushes: list) -> None:
        """Collective pushes ``(entry, op, ids, values)``, applied as one after another."""

    def _pull_p2p(self, entry: TensorEntry, ids: torch.Tensor, dedup: bool) -> torch.Tensor:
        """A pull by this process alone (a single-process store: the collective one)."""
        return self._start_pull_many([(entry, ids, dedup)])()[0]

    def _push_p2p(self, entry: TensorEntry, op: PushOp, ids: torch.Tensor,
                  values: torch.Tensor) -> None:
        """A push by this process alone (a single-process store: the collective one)."""
        self._push_many([(entry, op, ids, values)])

    def _pull_nothing(self) -> None:
        """Takes part in a pull's collective steps without a request (bad arguments)."""

    def _push_nothing(self) -> None:
        """Takes part in a push's collective steps without a request (bad arguments)."""

    def _check_parts_held(self, policy: PartitionPolicy, parts: list[int]) -> None:
        """Raises ValueError when this process cannot hold the given parts of ``policy``."""

    def _entry(self, name: str) -> TensorEntry:
        if name not in self._entries:
            raise UnknownNameError(f"unknown tensor name {name!r}; registered names: "
                                   f"{self.names()}")
        return self._entries[name]

    def _op(self, op: str) -> PushOp:
        if op not in self._ops:
            raise UnknownNameError(f"unknown push op {op!r}; registered ops: {self.ops()}")
        return self._ops[op]

    # -- validation --------------------------------------------------------------------------
    def _checked_pull(self, name: str, ids: torch.Tensor) -> TensorEntry:
        entry = self._entry(name)
        self._check_ids(entry, ids, "pull")
        return entry

    def _checked_push(self, name: str, ids: torch.Tensor, values: torch.Tensor,
                      op: str) -> tuple:
        """``(entry, op, ids, values)`` of a valid push, on the CPU."""
        entry, push_op = self._entry(name), self._op(op)
        self._check_ids(entry, ids, "push")
        self._check_values(entry, ids, values)
        return entry, push_op, ids.cpu(), values.detach().cpu()

    @staticmethod
    def _check_ids(entry: TensorEntry, ids: torch.Tensor, what: str) -> None:
        if not isinstance(ids, torch.Tensor) or ids.dtype != torch.int64 or ids.dim() != 1:
            got = (f"{ids.dtype} tensor of shape {tuple(ids.shape)}"
                   if isinstance(ids, torch.Tensor) else type(ids).__name__)
            raise InvalidValueError(f"{what} {entry.name!r}: ids must be a 1-D torch.int64 tensor; "
                                    f"got {got}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= entry.policy.num_rows):
            bad_pos = int(torch.nonzero((ids < 0) | (ids >= entry.policy.num_rows))[0])
            raise InvalidValueError(f"{what} {entry.name!r}: id {int(ids[bad_pos])} at position "
                                    f"{bad_pos} is outside [0, {entry.policy.num_rows})")

    @staticmethod
    def _check_values(entry: TensorEntry, ids: torch.Tensor, values: torch.Tensor) -> None:
        want = (ids.numel(), *entry.trailing)
        if not isinstance(values, torch.Tensor):
            raise InvalidValueError(f"push {entry.name!r}: values must be a torch.Tensor of shape "
                                    f"{want}; got {type(values).__name__}")
        if values.dtype != entry.dtype or tuple(values.shape) != want:
            raise InvalidValueError(f"push {entry.name!r}: values are {values.dtype} of shape "
                                    f"{tuple(values.shape)}; expected {entry.dtype} of shape "
                                    f"{want} (one row of shape {entry.trailing} per id)")

    def _check_init(self, name, policy, part_data, trailing_shape, dtype, init) -> InitSpec:
        if not isinstance(name, str) or not name or name in self._entries:
            raise InvalidValueError(f"init_data: name {name!r} is empty or already registered; "
                                    f"registered names: {self.names()}")
        if not isinstance(policy, PartitionPolicy):
            raise InvalidTypeError(f"init_data {name!r}: policy must be a PartitionPolicy; got "
                                   f"{type(policy).__name__}")
        if not (callable(init) or (isinstance(init, str) and init in INITS)):
            raise UnknownNameError(f"init_data {name!r}: unknown init {init!r}; expected one of "
                                   f"{sorted(INITS)} or a callable init(shape, dtype)")
        data = {}
        for key, rows in dict(part_data or {}).items():
            part = _part_index(key)
            if part is None or not 0 <= part < policy.num_parts:
                raise InvalidValueError(f"init_data {name!r}: part_data key {key!r} is not a part "
                                        f"in [0, {policy.num_parts})")
            data[part] = torch.as_tensor(rows)
        self._check_parts_held(policy, sorted(data))
        first = min(data) if data else None
        if dtype is None:
            dtype = data[first].dtype if data else torch.float32
        if trailing_shape is None:
            if not data:
                raise InvalidValueError(f"init_data {name!r}: give trailing_shape (the shape of "
                                        "one row) or part_data to infer it from")
            trailing_shape = policy.infer_trailing(first, tuple(data[first].shape))
        trailing = tuple(int(t) for t in trailing_shape)
        for part in range(policy.num_parts):
            want = policy.part_shape(part, trailing)  # also checks the policy accepts trailing
            rows = data.get(part)
            if rows is not None and (tuple(rows.shape) != want or rows.dtype != dtype):
                raise InvalidValueError(f"init_data {name!r}: part_data[{part}] is {rows.dtype} of "
                                        f"shape {tuple(rows.shape)}; expected {dtype} of shape "
                                        f"{want}")
        return InitSpec(name, policy, trailing, dtype, init, data)
