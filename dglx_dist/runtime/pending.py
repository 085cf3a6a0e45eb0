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

from dglx_dist.errors import StateError
from dglx_dist.runtime.peer import PeerError

__all__ = ["Pending", "Transfer", "Works"]


class Pending:
    """A collective under way (see :meth:`Comm.start_all_to_all_v`).

    ``wait()`` waits with the group's timeout (a dead peer becomes a :class:`PeerError`,
    naming ``suspect``, a global rank, when the diagnosis names none) and returns the result;
    later calls return the same result. ``work`` None: nothing to wait for (a result at hand,
    a pull without transfer; ``comm`` may then be None).
    """

    def __init__(self, comm, op: str, work: dist.Work | None,
                 finish: Callable[[], Any], keep: Any = None, suspect: int | None = None):
        self._comm, self.op, self._work, self._finish = comm, op, work, finish
        self._keep = keep  # the send buffer must outlive the transfer
        self._done, self._result, self._suspect = False, None, suspect

    def map(self, fn: Callable[[Any], Any]) -> "Pending":
        """This pending, its result passed through ``fn`` when it finishes (e.g. copied back
        to the device it came from); returns itself."""
        finish = self._finish
        self._finish = lambda: fn(finish())
        return self

    def done(self) -> bool:
        """True once finished (without blocking; finishing it when the transfer is over)."""
        if not self._done and (self._work is None or
                               self._comm.guard(self.op, self._work.is_completed)):
            self.wait()
        return self._done

    def wait(self) -> Any:
        if not self._done:
            if self._work is not None:
                self._comm.guard(self.op, lambda: self._work.wait(timeout=self._comm.timeout),
                                 self._suspect)
            self._result, self._done, self._keep = self._finish(), True, None
            self._finish = None  # what it held (a pull's plans) goes
        return self._result

    def fail(self, waited: float) -> PeerError:
        """The error for a collective still under way after ``waited`` seconds, which a caller
        polling :meth:`done` uses when its own deadline passes (see :meth:`Comm.stalled`)."""
        return self._comm.stalled(self.op, waited, self._suspect)


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


class Transfer(Pending):
    """A point-to-point message under way to or from global rank ``peer`` (see
    :meth:`Comm.start_send`): a :class:`Pending` whose result is ``tensor``, its bytes
    counted (``count()``) once it is seen complete; a failure names ``peer`` when the
    diagnosis names nobody.

    gloo completes a point-to-point transfer only inside ``wait()`` (``is_completed`` stays
    False until then, and a wait that times out closes the connection), so a daemon thread
    waits for it, with the group's timeout; ``done()`` polls that thread without blocking and
    ``wait()`` blocks on it.
    """

    def __init__(self, comm, op: str, work: dist.Work, count: Callable[[], None],
                 tensor: torch.Tensor, peer: int, keep: torch.Tensor | None = None):
        def finish() -> torch.Tensor:
            count()
            return tensor

        super().__init__(comm, op, _Background(work, comm.timeout, f"dglx-{op}"), finish, keep,
                         suspect=peer)
        self.tensor, self.peer = tensor, peer


class _Background:
    """A backend work waited for on a daemon thread (with ``timeout``), as a work: complete
    once that wait returned; ``wait()`` raises what it raised, or a timeout 5 s past it."""

    def __init__(self, work: dist.Work, timeout: datetime.timedelta, name: str):
        self._error: RuntimeError | None = None
        self._finished = threading.Event()
        threading.Thread(target=self._run, args=(work, timeout), daemon=True, name=name).start()

    def _run(self, work: dist.Work, timeout: datetime.timedelta) -> None:
        try:
            work.wait(timeout=timeout)
        except RuntimeError as exc:
            self._error = exc
        self._finished.set()

    def is_completed(self) -> bool:
        return self._finished.is_set()

    def wait(self, timeout: datetime.timedelta) -> bool:
        if not self._finished.wait(timeout.total_seconds() + 5):
            # a frozen peer: Comm.guard makes it the group's failure, as a timed-out wait
            raise StateError(f"timed out after {timeout.total_seconds():.0f}s")
        if self._error is not None:
            raise self._error
        return True
