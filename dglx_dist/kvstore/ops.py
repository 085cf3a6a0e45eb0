"""Push operations, duplicate combining and initialisers, shared by every store.

A push op is a handler ``fn(current_rows, values, local_ids, state) -> new_rows`` applied on
the part that holds the rows, plus a rule for combining the values of duplicate ids before the
handler sees them: ``"last"`` (the last occurrence wins: "assign") or ``"sum"`` (duplicates
summed: "add" and, by default, user ops such as sparse optimizers, whose values are gradients).

``state`` is a dict with ``name`` (the tensor pushed to), ``part`` (the part index) and
``tensors`` (every named tensor's local rows of that part index held by this process, by name,
so an op can update optimizer state kept in named tensors with the same policy). A handler may
update ``state["tensors"][...]`` in place; it must not keep references to them.
"""
from __future__ import annotations

import dataclasses
import zlib
from typing import Callable, Union

import torch

from dglx_dist.errors import InvalidValueError

__all__ = ["PushOp", "OpHandler", "Init", "BUILTIN_OPS", "COMBINE_RULES", "INITS",
           "combine_duplicates", "init_part"]

OpHandler = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, dict], torch.Tensor]
Init = Union[str, Callable[[tuple, torch.dtype], torch.Tensor]]


@dataclasses.dataclass(frozen=True)
class PushOp:
    """A registered push operation.

    Attributes:
        name: the name pushes refer to.
        fn: the handler applied on the owner.
        combine: how values of duplicate ids are combined first ("last" or "sum").
    """

    name: str
    fn: OpHandler
    combine: str = "sum"


def _assign(current: torch.Tensor, values: torch.Tensor, local: torch.Tensor,
            state: dict) -> torch.Tensor:
    return values


def _add(current: torch.Tensor, values: torch.Tensor, local: torch.Tensor,
         state: dict) -> torch.Tensor:
    return current + values


BUILTIN_OPS = {"assign": PushOp("assign", _assign, "last"), "add": PushOp("add", _add, "sum")}


def _combine_last(inverse: torch.Tensor, values: torch.Tensor, n: int) -> torch.Tensor:
    positions = torch.arange(inverse.numel(), dtype=torch.int64)
    last = torch.full((n,), -1, dtype=torch.int64).scatter_reduce_(0, inverse, positions, "amax")
    return values[last]


def _combine_sum(inverse: torch.Tensor, values: torch.Tensor, n: int) -> torch.Tensor:
    out = torch.zeros((n, *values.shape[1:]), dtype=values.dtype)
    return out.index_add_(0, inverse, values)


COMBINE_RULES = {"last": _combine_last, "sum": _combine_sum}


def combine_duplicates(ids: torch.Tensor, values: torch.Tensor,
                       rule: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Unique ids (increasing) and their combined values.

    Args:
        ids: int64 ids, duplicates allowed.
        values: one row per id.
        rule: a key of :data:`COMBINE_RULES`.
    """
    uniq, inverse = torch.unique(ids, return_inverse=True)
    if uniq.numel() == ids.numel():  # no duplicates: a permutation suffices
        out = torch.empty_like(values)
        out[inverse] = values
        return uniq, out
    return uniq, COMBINE_RULES[rule](inverse, values, uniq.numel())


INITS = {"zeros": torch.zeros}  # by name: called as ``INITS[name](shape, dtype=dtype)``


def init_part(init: Init, shape: tuple, dtype: torch.dtype, seed: int, name: str,
              part: int) -> torch.Tensor:
    """The initial rows of one part: the same on every process for the same (seed, name, part).

    Callables run under a forked CPU random state seeded from (seed, name, part), so the caller's
    random state is untouched and any process building the part gets the same rows.

    Raises:
        ValueError: a callable returned a tensor of the wrong shape (a name is one of
            :data:`INITS`: ``KVStore.init_data`` checked it).
    """
    if isinstance(init, str):
        return INITS[init](shape, dtype=dtype)
    part_seed = zlib.crc32(f"{seed}/{name}/{part}".encode())
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(part_seed)
        rows = torch.as_tensor(init(shape, dtype))
    if tuple(rows.shape) != tuple(shape):
        raise InvalidValueError(f"init for {name!r} part {part} returned shape "
                                f"{tuple(rows.shape)}; expected {tuple(shape)}")
    return rows.to(dtype)
