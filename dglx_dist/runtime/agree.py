"""Bad arguments raise on every rank, before any collective the others would wait in."""
from __future__ import annotations

from typing import Callable, TypeVar

import torch

from dglx_dist.errors import DglxError, InvalidValueError, OutputExistsError
from dglx_dist.runtime.failure import same_on_every_rank
from dglx_dist.runtime.session import Session

__all__ = ["on_every_rank", "same_call", "differing_ranks", "ids_digest"]

T = TypeVar("T")
_BAD_INPUT = (ValueError, TypeError, IndexError, KeyError, OutputExistsError)


def on_every_rank(session: Session, what: str, check: Callable[[], T]) -> T:
    """Runs the local ``check``; when it fails on any rank, every rank raises (the failing
    rank its own error, the others one naming it), so nobody waits in a later collective.

    Args:
        what: the call being checked, for the message (e.g. "DataLoader").
    """
    try:
        result, error = check(), None
    except _BAD_INPUT as exc:
        result, error = None, exc
    failed = session.world.failed_ranks(error is None)
    if failed and error is None:
        error = InvalidValueError(f"{what}: the arguments of rank(s) {failed} were refused (see "
                                  "their error); every rank stops here")
    if error is not None:
        # uncaught, it is one line from the first refused rank, not a traceback per rank
        # (see Session's excepthook); a builtin error is the caller's own bug: its traceback
        if isinstance(error, DglxError):
            error.refused_on = tuple(failed)
        raise error
    return result


_CALL_BYTES = 240


def same_call(session: Session, call: str) -> None:
    """Checks that every rank is making the same collective call ``call`` (its signature, e.g.
    a loader's arguments) before the collectives inside it start: ranks that build loaders
    in different orders get an error naming both calls instead of waiting in mismatched
    collectives (collective: one all-gather of a fixed-size buffer)."""
    raw = call.encode()[:_CALL_BYTES]
    mine = torch.zeros(_CALL_BYTES + 1, dtype=torch.uint8)
    mine[0] = len(raw)
    mine[1:1 + len(raw)] = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    every = session.world.all_gather(mine)
    calls = [bytes(v[1:1 + int(v[0])].tolist()).decode(errors="replace") for v in every]
    other = next((r for r, c in enumerate(calls) if c != calls[0]), None)
    if other is None:
        return
    error = InvalidValueError(f"ranks make different calls at the same point: rank 0 {calls[0]}, "
                              f"rank {other} {calls[other]}; every rank must build its loaders "
                              "(and other collective objects) in the same order")
    raise same_on_every_rank(error)  # the same message everywhere: rank 0 says it


def differing_ranks(session: Session, value: torch.Tensor) -> list[int]:
    """The ranks whose ``value`` (a small int64 tensor, the same shape everywhere) differs
    from rank 0's (collective)."""
    every = session.world.all_gather(value)
    return [r for r, v in enumerate(every) if not torch.equal(v, every[0])]


def ids_digest(ids: torch.Tensor) -> torch.Tensor:
    """A cheap summary of a set of ids for :func:`differing_ranks` (count and sum)."""
    return torch.tensor([ids.numel(), int(ids.sum()) if ids.numel() else 0])
