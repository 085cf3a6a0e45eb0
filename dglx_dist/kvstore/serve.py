"""Serving a distributed store's rows to one rank at a time: point-to-point, no collective.

Every rank of a serving :class:`~dglx_dist.kvstore.dist.DistKVStore` holds a :class:`Server`:
a thread answering requests for its server's rows, and this rank's own requests, on a process
group of the store's own (docs/kvstore.md, "How it works", non-collective).

**Messages** (raw bytes with explicit sizes, never pickled):

* request: a header, int64 ``[kind, tensor index, op index, ids, body bytes, answer bytes,
  payload bytes, 0]``, under tag :data:`TAG_HEAD`; then, when the body is not empty, the body
  under :data:`TAG_BODY`: the ids (int64), followed for a push by the values' bytes;
* answer: ONE uint8 message of exactly ``answer bytes`` under :data:`TAG_ANSWER`: int64
  ``[status, length]``, then ``length`` bytes: the rows of a pull, nothing for a push (the
  acknowledgement that it is applied), the error text when ``status`` is not 0. Answers are at
  least :data:`MIN_ANSWER` bytes, so that an error always fits.

The serving thread waits for a header from any rank (gloo's ``irecv`` with ``src=None``); the
body and the answer then go to and from that rank only, so requests of several ranks and a
rank's own outgoing requests never mix (a message is matched by its sender and its tag).
The requester posts its answer receives before it sends (gloo moves a message only once both
sides are posted: a pre-posted receive saves a round of notifications).

**Deadlines.** A requester waits at most the session's timeout for all of its answers; a
failure becomes a :class:`~dglx_dist.runtime.comm.PeerError` naming the owner (or the rank the
heartbeats blame). The serving thread waits without a deadline for the next header (gloo closes
every connection of a group when a receive times out, so an idle wait must not time out), and
with the timeout for everything else. It stops when the previous rank sends it a stop header
(:meth:`Server.stop`, after a barrier: nobody is asking any more); gloo cannot send to itself.
"""
from __future__ import annotations

import dataclasses
import datetime
import logging
import threading
import time
from typing import Callable

import torch
import torch.distributed as dist

from dglx_dist.errors import InvalidValueError, ProtocolError
from dglx_dist.kvstore.shards import Message, PullPlan, Shards
from dglx_dist.kvstore.shm import EMPTY_U8, from_bytes, to_bytes

__all__ = ["Server", "Request", "PULL", "PUSH", "STOP", "MIN_ANSWER"]

log = logging.getLogger(__name__)

PULL, PUSH, STOP = 1, 2, 3
TAG_HEAD, TAG_BODY, TAG_ANSWER = 1, 2, 3
HEAD_LEN = 8  # int64 fields of a request header
STATUS_BYTES = 16  # int64 [status, length] in front of every answer
MIN_ANSWER = 256  # bytes: room for an error text
_FOREVER = datetime.timedelta(days=3650)


@dataclasses.dataclass
class Request:
    """One request to rank ``peer``: its header's ``[kind, tensor index, op index, ids]``, the
    ``body`` sent after the header (uint8: the ids, then a push's values) and the ``payload``
    bytes its answer carries."""

    peer: int
    fields: list[int]
    body: torch.Tensor
    payload: int

    def header(self) -> torch.Tensor:
        return torch.tensor([*self.fields, self.body.numel(), answer_bytes(self.payload),
                             self.payload, 0], dtype=torch.int64)


def answer_bytes(payload: int) -> int:
    """The size of the answer message for ``payload`` bytes of rows."""
    return STATUS_BYTES + max(payload, MIN_ANSWER - STATUS_BYTES)


class Server:
    """This rank's serving thread and its non-collective requests, on a group of their own.
    Building it is collective (the group), and so is :meth:`stop`.

    Args:
        session: the running session (its communicators, counter, health, timeout, ranks).
        shards: the store's tensors: requests are cut by them and answered from them.
    """

    def __init__(self, session, shards: Shards):
        name = "kvserve"  # the communicator's name in errors
        self.comm, self.shards = session.new_world_comm(name), shards
        self.rank, self.size, self.local_rank = session.rank, session.world_size, session.local_rank
        self.timeout = float(session.env.timeout)
        self._lock = threading.Lock()  # one outgoing exchange at a time (tags are per sender)
        self._thread: threading.Thread | None = threading.Thread(
            target=self._serve, name=f"dglx-kvserve-{name}-r{self.rank}", daemon=True)
        self._thread.start()

    # -- requester side ------------------------------------------------------------------------
    def pull(self, plan: PullPlan) -> torch.Tensor:
        """The rows of ``plan``: other servers' from their rank with this rank's local index,
        own-server rows read meanwhile."""
        asked, per = plan.requests(), self.shards.per_server
        requests = [Request(server * per + self.local_rank,
                            [PULL, plan.entry.index, -1, gids.numel()], to_bytes(gids), nbytes)
                    for server, (gids, nbytes) in asked.items()]
        for server, answer in zip(asked, self.exchange(requests, plan.fill_local)):
            plan.take(server, answer)
        return plan.rows()

    def push(self, messages: dict[int, Message], own: Message | None = None) -> None:
        """Sends push ``messages`` to their writer ranks (``own``, this rank's, is applied
        meanwhile); returns once every writer acknowledged."""
        requests = [Request(writer, [PUSH, int(head[0]), int(head[1]), head.numel() - 2],
                            torch.cat([to_bytes(head[2:]), data]), 0)
                    for writer, (head, data) in messages.items()]

        def apply_own() -> None:  # rows this rank writes itself: no message
            if own is not None:
                self.shards.apply_many({self.rank: [own]})

        self.exchange(requests, apply_own)

    def exchange(self, requests: list[Request],
                 meanwhile: Callable[[], None]) -> list[torch.Tensor]:
        """Sends ``requests`` (to distinct peers), runs ``meanwhile`` while the answers travel
        and returns each answer's payload (uint8).

        Raises:
            PeerError: an owner did not answer within the timeout (dead, stuck, unreachable).
            RuntimeError: an owner refused the request (its error text is quoted).
        """
        with self._lock:
            self.comm.check_usable("kvstore request")
            deadline = time.monotonic() + self.timeout
            answers = [torch.empty(answer_bytes(r.payload), dtype=torch.uint8) for r in requests]
            recvs = [self._post(dist.irecv, a, r.peer, TAG_ANSWER)
                     for r, a in zip(requests, answers)]
            sends = []
            for r in requests:
                sends.append((r.peer, self._post(dist.isend, r.header(), r.peer, TAG_HEAD)))
                if r.body.numel():
                    sends.append((r.peer, self._post(dist.isend, r.body, r.peer, TAG_BODY)))
            meanwhile()
            for peer, work in sends:
                self._finish(work, peer, "request to", deadline)
            out = []
            for r, work, answer in zip(requests, recvs, answers):
                self._finish(work, r.peer, "answer from", deadline)
                out.append(self._payload(r, answer))
            return out

    def _post(self, fn: Callable, tensor: torch.Tensor, peer: int, tag: int) -> dist.Work:
        return self.comm.guard(f"kvstore {fn.__name__} (rank {peer})",
                               lambda: fn(tensor, peer, group=self.comm.group, tag=tag), peer)

    def _finish(self, work: dist.Work, peer: int, what: str, deadline: float) -> None:
        left = datetime.timedelta(seconds=max(deadline - time.monotonic(), 0.001))
        self.comm.guard(f"kvstore {what} rank {peer}", lambda: work.wait(timeout=left), peer)

    def _payload(self, request: Request, answer: torch.Tensor) -> torch.Tensor:
        status, length = from_bytes(answer[:STATUS_BYTES], (2,), torch.int64).tolist()
        intra = self.comm.topology.same_server(self.rank, request.peer)
        self.comm.counter.add(intra, request.body.numel(), length if status == 0 else 0)
        self.comm.counter.add_control(8 * HEAD_LEN, calls=1)
        if status != 0:
            text = bytes(answer[STATUS_BYTES:STATUS_BYTES + length].tolist()).decode(
                "utf-8", "replace")
            raise ProtocolError(f"rank {request.peer} could not answer a kvstore request: {text}")
        if length != request.payload:
            raise ProtocolError(f"rank {request.peer} answered {length} bytes; expected "
                                f"{request.payload}")
        return answer[STATUS_BYTES:STATUS_BYTES + length] if length else EMPTY_U8

    # -- serving side ------------------------------------------------------------------------
    def _serve(self) -> None:
        head = torch.empty(HEAD_LEN, dtype=torch.int64)
        try:
            work = dist.irecv(head, None, group=self.comm.group, tag=TAG_HEAD)
            while True:
                work.wait(timeout=_FOREVER)
                source, fields = work._source_rank(), head.tolist()
                if fields[0] == STOP:
                    return
                work = dist.irecv(head, None, group=self.comm.group, tag=TAG_HEAD)
                try:
                    self._answer(source, fields)
                except RuntimeError as exc:  # the requester fails (or already failed) too
                    log.warning("rank %d: kvstore request from rank %d failed: %s", self.rank,
                                source, exc)
        except RuntimeError as exc:
            log.warning("rank %d: kvstore serving thread stops: %s", self.rank, exc)

    def _answer(self, source: int, fields: list[int]) -> None:
        timeout = datetime.timedelta(seconds=self.timeout)
        body = torch.empty(fields[4], dtype=torch.uint8)
        if body.numel():
            dist.irecv(body, source, group=self.comm.group, tag=TAG_BODY).wait(timeout=timeout)
        answer = torch.zeros(fields[5], dtype=torch.uint8)
        try:
            length = self._handle(source, fields, body, answer[STATUS_BYTES:])
            status = 0
        except Exception as exc:  # noqa: BLE001  (any refusal goes back to the requester)
            text = f"{type(exc).__name__}: {exc}".encode()[:answer.numel() - STATUS_BYTES]
            answer[STATUS_BYTES:STATUS_BYTES + len(text)] = torch.tensor(list(text))
            status, length = 1, len(text)
        answer[:STATUS_BYTES].view(torch.int64)[:] = torch.tensor([status, length])
        dist.isend(answer, source, group=self.comm.group, tag=TAG_ANSWER).wait(timeout=timeout)
        intra = self.comm.topology.same_server(self.rank, source)
        self.comm.counter.add(intra, length if status == 0 else 0, body.numel())
        self.comm.counter.add_control(STATUS_BYTES, calls=1)

    def _handle(self, source: int, fields: list[int], body: torch.Tensor,
                out: torch.Tensor) -> int:
        """Answers one request of rank ``source``: a pull's rows gathered into ``out``; a push
        applied. Returns the payload bytes written."""
        kind, index, op_index, num_ids, payload = (fields[i] for i in (0, 1, 2, 3, 6))
        entry = self.shards.entry_at(index, "a kvstore request", wait=self.timeout)
        ids = from_bytes(body[:8 * num_ids], (num_ids,), torch.int64)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= entry.policy.num_rows):
            raise InvalidValueError(f"{entry.name!r}: ids outside [0, {entry.policy.num_rows})")
        if kind == PUSH:
            head = torch.cat([torch.tensor([index, op_index]), ids])
            self.shards.apply_many({source: [(head, body[8 * num_ids:])]})
            return 0
        if kind != PULL or payload > out.numel():
            raise InvalidValueError(f"a request of kind {kind} for {payload} bytes in an answer "
                                    f"of {out.numel()}")
        return self.shards.read(entry, ids, out[:payload]).numel()

    def stop(self, job_failed: bool = False) -> None:
        """Stops the next rank's serving thread and waits for this rank's to stop (collective:
        call it on every rank once nobody sends requests any more; idempotent). With
        ``job_failed`` (a peer is dead or stuck), the thread, a daemon waiting on a dead job,
        is left behind instead of waited for."""
        thread, self._thread = self._thread, None
        if thread is None or job_failed or self.comm.failure is not None:
            return
        stop = torch.tensor([STOP] + [0] * (HEAD_LEN - 1), dtype=torch.int64)
        nxt = (self.rank + 1) % self.size
        try:
            dist.isend(stop, nxt, group=self.comm.group, tag=TAG_HEAD).wait(
                timeout=datetime.timedelta(seconds=self.timeout))
        except RuntimeError as exc:
            log.warning("rank %d: could not stop rank %d's kvstore serving thread: %s",
                        self.rank, nxt, exc)
        thread.join(self.timeout)
        if thread.is_alive():
            log.warning("rank %d: the kvstore serving thread did not stop within %gs",
                        self.rank, self.timeout)
