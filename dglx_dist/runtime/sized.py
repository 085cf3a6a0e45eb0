"""An exchange of messages whose sizes their receivers do not know, in one round where they
are small (:meth:`~dglx_dist.runtime.comm.Comm.all_to_all_v` on host tensors without
``recv_rows``).

The plain way is two rounds: the row counts first, then the rows into buffers of those sizes.
On a busy link each round waits behind the bytes already queued there (on the emulated
1 Gbit/s links, megabytes of a pull's answers), so a round saved is that wait saved. Here each
message leads with its row count (:data:`HEAD_BYTES`) and the receiver posts a buffer of
:func:`short_bytes` for it before it knows the size: gloo receives a shorter message into it
(the rest of the buffer untouched; ``tests/dist/test_comm.py`` checks this on the installed
torch). A message that does not fit is sent as its count alone, its rows right behind it under
:data:`REST_TAG`; the receiver reads the count and then receives the rows, already on their
way, into a buffer of their size.

A communicator's exchanges receive their rows in the order they were started: an exchange
that is waited for first receives the counts of those started before it and posts their rows'
receives (:meth:`SizedExchange.settle`), so a later exchange's rows never land in an earlier
one's buffer.
"""
from __future__ import annotations

import datetime
import math
import time

import torch
import torch.distributed as dist

from dglx_dist.runtime.pending import Works

__all__ = ["HEAD_BYTES", "REST_TAG", "SizedExchange", "short_bytes"]

HEAD_BYTES = 16
"""A message's header: its row count as int64, padded to 16 bytes so that the rows after it
are aligned for every dtype."""

REST_TAG = 2**31 - 3
"""The point-to-point tag of the rows of a message that did not fit its receiver's buffer
(:data:`~dglx_dist.runtime.comm.EXCHANGE_TAG` is the first message's)."""

_SHORT_TOTAL = 4 << 20
"""Bytes an exchange's receive buffers take together, at most (but :data:`_SHORT_MIN` each)."""
_SHORT_MIN, _SHORT_MAX = 64 << 10, 1 << 20


def short_bytes(peers: int) -> int:
    """The size of the buffer a message from one of ``peers`` is first received into: the
    largest message (header included) that goes in one round."""
    return max(_SHORT_MIN, min(_SHORT_MAX, _SHORT_TOTAL // max(peers, 1)))


class SizedExchange:
    """The messages of one exchange on ``comm`` (a :class:`~dglx_dist.runtime.comm.Comm`),
    posted at once; a work for :class:`~dglx_dist.runtime.pending.Pending`: :meth:`wait`
    receives the rows of every peer, ``recv`` (one tensor per member) holds them after it.

    Args:
        comm: its ``group``, ``members``, ``group_rank``, and ``unsettled``: its exchanges
            whose counts were not read yet, oldest first (this one joins them).
        send: one contiguous host tensor per member (rows x ``trailing``, ``dtype``).
        tag: the first messages' tag.
    """

    def __init__(self, comm, send: list[torch.Tensor], trailing: torch.Size,
                 dtype: torch.dtype, tag: int):
        self._comm, self._trailing, self._dtype = comm, trailing, dtype
        self._row_bytes = math.prod(trailing) * dtype.itemsize
        self._short = short_bytes(comm.size - 1)
        self.recv: list[torch.Tensor | None] = [None] * comm.size
        self.recv[comm.group_rank] = send[comm.group_rank].clone()
        self._heads: dict[int, tuple[torch.Tensor, dist.Work]] = {}
        self._sends: list[dist.Work] = []
        self._rests: list[dist.Work] = []
        self._keep = []  # send buffers outlive their transfers
        for peer, rows in enumerate(send):
            if peer != comm.group_rank:
                self._post(peer, rows, tag)
        self._settled = self._waited = False
        comm.unsettled.append(self)

    def _post(self, peer: int, rows: torch.Tensor, tag: int) -> None:
        """The receive of ``peer``'s first message, and the sends of this member's to it."""
        rank, group = self._comm.members[peer], self._comm.group
        buf = torch.empty(self._short, dtype=torch.uint8)
        self._heads[peer] = (buf, dist.irecv(buf, rank, group=group, tag=tag))
        head = torch.zeros(HEAD_BYTES // 8, dtype=torch.int64)
        head[0] = rows.shape[0]
        payload = rows.reshape(-1).view(torch.uint8)
        fits = HEAD_BYTES + payload.numel() <= self._short
        first = torch.cat([head.view(torch.uint8), payload]) if fits else head.view(torch.uint8)
        self._keep.append(first)
        self._sends.append(dist.isend(first, rank, group=group, tag=tag))
        if not fits:
            self._keep.append(rows)
            self._sends.append(dist.isend(rows, rank, group=group, tag=REST_TAG))

    def settle(self, deadline: float) -> None:
        """Receives the first messages; each peer's rows where they came in it, else the
        receive of its rows under :data:`REST_TAG` posted (after those of the exchanges
        started before this one)."""
        if self._settled:
            return
        unsettled = self._comm.unsettled
        while unsettled and unsettled[0] is not self:
            unsettled[0].settle(deadline)
        for peer, (buf, work) in self._heads.items():
            work.wait(timeout=_left(deadline))
            rows = int(buf[:8].view(torch.int64)[0])
            nbytes = rows * self._row_bytes
            if HEAD_BYTES + nbytes <= self._short:  # (a copy: a kept result keeps no buffer)
                self.recv[peer] = buf[HEAD_BYTES:HEAD_BYTES + nbytes].view(self._dtype).view(
                    rows, *self._trailing).clone()
                continue
            rest = torch.empty((rows, *self._trailing), dtype=self._dtype)
            self.recv[peer] = rest
            self._rests.append(dist.irecv(rest, self._comm.members[peer],
                                          group=self._comm.group, tag=REST_TAG))
        self._heads.clear()
        self._settled = True
        unsettled.remove(self)

    def wait(self, timeout: datetime.timedelta) -> bool:
        """Every message sent and received, within ``timeout``."""
        deadline = time.monotonic() + timeout.total_seconds()
        self.settle(deadline)
        Works(self._rests + self._sends).wait(_left(deadline))
        self._waited, self._keep = True, []
        return True

    def is_completed(self) -> bool:
        """True once :meth:`wait` returned (gloo completes a message only inside a wait)."""
        return self._waited


def _left(deadline: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=max(deadline - time.monotonic(), 0.001))
