"""What a failed peer looks like: the error naming it, and the backend errors that mean one.

gloo reports a dead peer at once (a closed connection), and a frozen one once a wait times out:
that wait's error names the timeout, and every other wait on the same connection then fails
with "Application timeout caused pair closure". NCCL, with the asynchronous error
handling the session sets (:func:`dglx_dist.runtime.device.nccl_environment`), raises in the
waiting call when its watchdog aborts a collective that timed out or whose peer is gone.
"""
from __future__ import annotations

from typing import Sequence

from dglx_dist.errors import DglxError

__all__ = ["PeerError", "is_peer_failure"]

_PEER_SIGNS = ("timed out", "timing out", "connection", "read error", "write error", "closed",
               "reset by peer", "broken pipe", "socket", "unreachable", "nccl error", "aborted",
               "watchdog", "wait timeout",  # the store, waiting for a new group's peers
               "pair closure")  # gloo: another wait on this connection timed out and closed it


def is_peer_failure(exc: Exception) -> bool:
    """Whether a backend error means a peer or the network failed (not a local misuse)."""
    text = str(exc).lower()
    return any(sign in text for sign in _PEER_SIGNS)


class PeerError(DglxError, RuntimeError):
    """A collective failed because a peer died, hung or is unreachable.

    Attributes:
        ranks: global ranks identified as failed (may be empty when none could be named).
        op: the collective that failed.
    """

    def __init__(self, message: str, ranks: Sequence[int], op: str):
        super().__init__(message)
        self.ranks, self.op = list(ranks), op
