"""The protocol of a checkpoint's parts: torch's ``Stateful``
(``torch.distributed.checkpoint.stateful``: ``state_dict()`` / ``load_state_dict(state)``),
stated here because importing torch's module imports all of ``torch.distributed.checkpoint``
first (about 0.9 s on a 2-core machine, most of it ``torch._dynamo``, which a process that
builds an optimizer imports anyway, but the CLI's partitioning and data generation never
need), and checkpoints use none of it. Any object with both methods is one (as with
torch's: a runtime-checkable protocol), torch's ``Stateful`` objects included."""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["Stateful"]


@runtime_checkable
class Stateful(Protocol):
    """What can be saved into a checkpoint and restored from it."""

    def state_dict(self) -> dict[str, Any]:
        """The object's state, to be saved."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores the state :meth:`state_dict` gave."""
