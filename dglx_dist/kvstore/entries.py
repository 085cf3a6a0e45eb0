"""What a KVStore holds: a registered named tensor (:class:`TensorEntry`), a validated
``init_data`` request (:class:`InitSpec`), and applying a push operation to a part's rows
(:func:`apply_op`); shared by the store implementations."""
from __future__ import annotations

import dataclasses
import math
from typing import Iterable

import torch

from dglx_dist.errors import ProtocolError
from dglx_dist.kvstore.ops import Init, PushOp, init_part
from dglx_dist.kvstore.policy import PartitionPolicy

__all__ = ["TensorEntry", "InitSpec", "apply_op"]


@dataclasses.dataclass(eq=False)
class TensorEntry:
    """A registered named tensor.

    Attributes:
        name: its name; index: its registration index (the same on every rank).
        policy: where its rows live.
        trailing: the shape of one row; dtype: its element type.
        parts: the local tensors of the parts this process can read and write, by part.
        part_trailing: the shape of one row of each part's local tensor.
    """

    name: str
    index: int
    policy: PartitionPolicy
    trailing: tuple[int, ...]
    dtype: torch.dtype
    parts: dict[int, torch.Tensor] = dataclasses.field(default_factory=dict)
    part_trailing: list[tuple[int, ...]] = dataclasses.field(default_factory=list)

    @classmethod
    def from_spec(cls, spec: "InitSpec", index: int) -> "TensorEntry":
        """An entry without parts; ``part_trailing[p]`` is the row shape of part ``p``."""
        shapes = [tuple(spec.policy.part_shape(p, spec.trailing)[1:])
                  for p in range(spec.policy.num_parts)]
        return cls(spec.name, index, spec.policy, spec.trailing, spec.dtype, {}, shapes)

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.policy.num_rows, *self.trailing)

    @property
    def row_bytes(self) -> int:
        """The bytes of one whole row."""
        return math.prod(self.trailing) * self.dtype.itemsize


@dataclasses.dataclass(frozen=True, eq=False)
class InitSpec:
    """A validated ``init_data`` request (before any collective step)."""

    name: str
    policy: PartitionPolicy
    trailing: tuple[int, ...]
    dtype: torch.dtype
    init: Init
    part_data: dict[int, torch.Tensor]

    def initial_rows(self, part: int, seed: int) -> torch.Tensor:
        """Part ``part``'s rows as passed, else built by ``init`` (seeded per seed, name, part)."""
        if part in self.part_data:
            return self.part_data[part]
        shape = self.policy.part_shape(part, self.trailing)
        return init_part(self.init, shape, self.dtype, seed, self.name, part)


def apply_op(entries: Iterable[TensorEntry], entry: TensorEntry, op: PushOp, part: int,
             local: torch.Tensor, values: torch.Tensor) -> None:
    """Applies ``op`` to local rows ``local`` (unique) of ``entry``'s part ``part``; ``entries``
    are every registered tensor of the process (the op's ``state["tensors"]``)."""
    tensor = entry.parts[part]
    tensors = {e.name: e.parts[part] for e in entries if part in e.parts}
    tensors[entry.name] = tensor
    state = {"name": entry.name, "part": part, "tensors": tensors}
    new = op.fn(tensor[local], values, local, state)
    if tuple(new.shape) != (local.numel(), *tensor.shape[1:]):
        raise ProtocolError(f"op {op.name!r} returned shape {tuple(new.shape)} for "
                            f"{entry.name!r} part {part}; expected "
                            f"{(local.numel(), *tensor.shape[1:])}")
    tensor[local] = new.to(tensor.dtype)
