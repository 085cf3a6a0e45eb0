"""Communication under way: the handles that :class:`~dglx_dist.runtime.comm.Comm`'s
``start_*`` methods return, a collective (:class:`Pending`) or a point-to-point message
(:class:`Transfer`). Both wait with their communicator's timeout and turn a failed peer into
its :class:`~dglx_dist.runtime.comm.PeerError`. ``comm`` is that Comm (not imported: comm
imports this module).
"""
from __future__ import annotations

import datetime
import threading
import time
from typing import Any, Callable

import torch
import torch.distributed as dist

from dglx_dist.runtime.peer import PeerError

__all__ = ["Pending", "Transfer", "Works"]


class Pending:
    """A collective under way (see :meth:`Comm.start_all_to_all_v`).

    ``wait()`` waits with the group's timeout (a dead peer becomes a :class:`PeerError`)
    and returns the result; later calls return the same result.
    """

    def __init__(self, comm, op: str, work: dist.Work | None,
                 finish: Callable[[], Any], keep: Any = None):
        self._comm, self._op, self._work, self._finish = comm, op, work, finish
        self._keep = keep  # the send buffer must outlive the transfer
        self._done, self._result = False, None

    def map(self, fn: Callable[[Any], Any]) -> "Pending":
        """This pending, its result passed through ``fn`` when it finishes (e.g. copied back
        to the device it came from); returns itself."""
        finish = self._finish
        self._finish = lambda: fn(finish())
        return self

    def done(self) -> bool:
        """True once finished (without blocking; finishing it when the transfer is over)."""
        if not self._done and (self._work is None or
                               self._comm.guard(self._op, self._work.is_completed)):
            self.wait()
        return self._done

    def wait(self) -> Any:
        if not self._done:
            self._comm.wait_work(self._op, self._work)
            self._result, self._done, self._keep = self._finish(), True, None
        return self._result

    def fail(self, waited: float) -> PeerError:
        """The error for a collective still under way after ``waited`` seconds, which a caller
        polling :meth:`done` uses when its own deadline passes (see :meth:`Comm.stalled`)."""
        return self._comm.stalled(self._op, waited)


class Works:
    """The backend works of one exchange made of point-to-point messages, waited for as one
    work (the whole exchange within ``timeout``). gloo reports a message complete only once
    it is waited for, so ``is_completed`` stays False until :meth:`wait` returned."""

    def __init__(self, works: list[dist.Work]):
        self._works, self._waited = works, False

    def wait(self, timeout: datetime.timedelta) -> bool:
        deadline = time.monotonic() + timeout.total_seconds()
        for work in self._works:
            left = max(deadline - time.monotonic(), 0.001)
            work.wait(timeout=datetime.timedelta(seconds=left))
        self._waited = True
        return True

    def is_completed(self) -> bool:
        return self._waited or not self._works


class Transfer:
    """A point-to-point message under way (see :meth:`Comm.start_send`).

    gloo completes a point-to-point transfer only inside ``wait()`` (``is_completed`` stays
    False until then, and a wait that times out closes the connection), so a daemon thread
    waits for it, with the group's timeout; ``done()`` polls that thread without blocking and
    ``wait()`` blocks on it. Bytes are counted once, when the transfer is seen complete. A
    transfer that never completes (its peer died or never sends) becomes a
    :class:`PeerError` naming the peer in ``done()``/``wait()``, or in :meth:`fail`, which a
    caller polling several transfers uses when its own deadline passes.
    """

    def __init__(self, comm, op: str, work: dist.Work, count: Callable[[], None],
                 tensor: torch.Tensor, peer: int, keep: torch.Tensor | None = None):
        self._comm, self.op, self._work, self._count = comm, op, work, count
        self.tensor, self.peer = tensor, peer  # what wait() returns
        self._keep = keep  # the buffer on the wire, which must outlive the transfer
        self._done, self._error = False, None
        self._finished = threading.Event()
        threading.Thread(target=self._wait_in_background, daemon=True,
                         name=f"dglx-{op}").start()

    def _wait_in_background(self) -> None:
        try:
            self._work.wait(timeout=self._comm.timeout)
        except RuntimeError as exc:
            self._error = exc
        self._finished.set()

    def done(self) -> bool:
        if not self._done and self._finished.is_set():
            self._finish()
        return self._done

    def wait(self) -> torch.Tensor:
        if not self._done:
            self._finished.wait(self._comm.timeout.total_seconds() + 5)
            if not self._finished.is_set():
                raise self.fail(self._comm.timeout.total_seconds())
            self._finish()
        return self.tensor

    def _finish(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None

            def reraise():
                raise error

            self._comm.guard(self.op, reraise)  # a PeerError naming the failed rank
        self._done = True
        self._count()

    def fail(self, waited: float) -> PeerError:
        """The error for a transfer still pending after ``waited`` seconds: the group's
        failure, diagnosed as a collective's (see :meth:`Comm.stalled`), naming the peer when
        the diagnosis names nobody."""
        return self._comm.stalled(self.op, waited, self.peer)
