"""Collectives over one process group, with byte counters, timeouts and named failures.

Every strategy sends through a :class:`Comm`, so byte counts cannot be forgotten. Counts are
*logical* bytes under a direct-exchange model, split by whether the peer is on the same server:

* ``all_to_all_v``: exactly the rows sent to / received from each peer (plus, as ``control``,
  the 8-byte row counts exchanged first);
* ``all_gather``: the tensor to every peer; ``reduce_scatter``: one chunk to every peer;
  ``all_reduce``: ``2 * nbytes / size`` to and from every peer (reduce-scatter + all-gather);
  ``broadcast``: the tensor from the source to every peer.

Wire bytes of gloo's or NCCL's algorithms differ (rings, trees); the model makes counts
deterministic and comparable across strategies. Bytes to oneself are not counted.

Every call waits at most ``timeout`` seconds. When a collective fails (a peer died: gloo
notices at once; or the wait timed out), the error is a :class:`PeerError` that names the
failed ranks (see :mod:`dglx_dist.runtime.health`), raised on every survivor.
"""
from __future__ import annotations

import datetime
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from dglx_dist.errors import DglxError, InvalidValueError
from dglx_dist.runtime.counters import ByteCounter
from dglx_dist.runtime.health import Health
from dglx_dist.runtime.pending import Pending, Transfer, Works
from dglx_dist.runtime.topology import Topology

__all__ = ["Comm", "ByteCounter", "Pending", "PeerError", "Transfer"]

_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
        "product": dist.ReduceOp.PRODUCT}


EXCHANGE_TAG = 2**31 - 2
"""The point-to-point tag of :meth:`Comm.all_to_all_v`'s messages on gloo (tags of
:meth:`Comm.start_send` must differ from it)."""

_PEER_SIGNS = ("timed out", "connection", "read error", "write error", "closed", "reset by peer",
               "broken pipe", "socket", "unreachable", "nccl error", "aborted")


def _is_peer_failure(exc: Exception) -> bool:
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


class Comm:
    """A communicator: one process group, its members, and the job's counters and health.

    Args:
        name: the group's name in errors and diagnostics ("world", "server", "cross").
        group: the torch.distributed group (None: the default group).
        members: global ranks of the group, in group-rank order.
        global_rank: this process's global rank.
        topology: servers x local ranks, to classify peers.
        counter: the byte counter shared by the session's communicators.
        health: heartbeats used to name failed ranks (None: no diagnosis).
        timeout: seconds any call may wait.

    Attributes:
        global_rank: this process's rank in the whole job (torch.distributed's global rank).
        group_rank: this process's position in ``members`` (torch.distributed's rank within
            the group); peers, ``src`` and send/recv lists are indexed by group rank.
    """

    def __init__(self, name: str, group, members: Sequence[int], global_rank: int,
                 topology: Topology, counter: ByteCounter, health: Health | None, timeout: float):
        self.name, self.group, self.members = name, group, list(members)
        self.global_rank, self.topology, self.counter = global_rank, topology, counter
        self.health, self.timeout = health, datetime.timedelta(seconds=timeout)
        self.group_rank = self.members.index(global_rank)
        self._intra = [topology.same_server(global_rank, m) for m in self.members]
        self._seq, self._p2p_exchange = 0, None
        self._broken: PeerError | None = None

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def failure(self) -> PeerError | None:
        """Why this group failed, or None while it works (a failed group fails every later
        call at once)."""
        return self._broken

    # -- collectives -------------------------------------------------------------------------
    def all_to_all_v(self, send: Sequence[torch.Tensor],
                     recv_rows: Sequence[int] | None = None) -> list[torch.Tensor]:
        """Sends ``send[i]`` to member ``i``; returns what each member sent here.

        Tensors are split along dim 0 and may have any number of rows (0 included); dtype and
        trailing shape must be the same on every rank.

        Args:
            send: one tensor per member.
            recv_rows: rows each member will send here, when the caller already knows them
                (e.g. the answers to its own requests); skips the round that exchanges counts.
                Every rank of the call must then pass it.
        """
        return self.start_all_to_all_v(send, recv_rows).wait()

    def start_all_to_all_v(self, send: Sequence[torch.Tensor],
                           recv_rows: Sequence[int] | None = None) -> "Pending":
        """:meth:`all_to_all_v`, returned while the transfer is under way (to overlap it with
        local work); ``wait()`` on the result finishes it. The round of counts, if any, runs
        before this returns. Every rank must start its exchanges on this group in the same
        order (and each started one must be waited for)."""
        if len(send) != self.size:
            raise InvalidValueError(f"all_to_all_v on {self.name} needs {self.size} tensors, "
                                    f"got {len(send)}")
        trailing, dtype = send[0].shape[1:], send[0].dtype
        for i, t in enumerate(send):
            if t.shape[1:] != trailing or t.dtype != dtype:
                raise InvalidValueError(f"all_to_all_v: tensor {i} is {t.dtype}{tuple(t.shape)}; "
                                        f"expected {dtype} with trailing shape {tuple(trailing)}")
        counts = torch.tensor([t.shape[0] for t in send], dtype=torch.int64)
        if recv_rows is not None:
            if len(recv_rows) != self.size:
                raise InvalidValueError(f"all_to_all_v: recv_rows has {len(recv_rows)} entries for "
                                        f"{self.size} members")
            recv_counts = torch.tensor(list(recv_rows), dtype=torch.int64)
        else:
            recv_counts = torch.empty_like(counts)
            self._run("all_to_all_v(counts)",
                      lambda: dist.all_to_all_single(recv_counts, counts, group=self.group,
                                                     async_op=True))
            self.counter.add_control(8 * (self.size - 1))
        out = torch.empty((int(recv_counts.sum()), *trailing), dtype=dtype)
        recv = list(torch.split(out, recv_counts.tolist()))
        if self._exchange_p2p():
            keep = [t.contiguous() for t in send]
            work = self._start("all_to_all_v", lambda: self._post_exchange(keep, recv))
        else:
            full = [t for t in send if t.numel()]
            if len(full) == 1 and full[0].is_contiguous():  # one destination: send it as it is
                keep = full[0].reshape(-1, *trailing)
            else:
                keep = torch.cat([t.contiguous() for t in send]) if send else out
            work = self._start("all_to_all_v", lambda: dist.all_to_all_single(
                out, keep, output_split_sizes=recv_counts.tolist(),
                input_split_sizes=counts.tolist(), group=self.group, async_op=True))

        def finish() -> list[torch.Tensor]:
            self._count([t.nbytes for t in send], [t.nbytes for t in recv])
            return recv

        return Pending(self, "all_to_all_v", work, finish, keep=keep)

    def _exchange_p2p(self) -> bool:
        """Whether all_to_all_v posts one send and one receive per peer instead of calling
        the backend's all-to-all: on gloo, whose all-to-all moves half the bytes per second
        of concurrent sends and receives when both directions of a link carry data
        (measured on the emulated 1 Gbit/s link: 11 MB each way in 166 ms vs 97 ms)."""
        if self._p2p_exchange is None:
            self._p2p_exchange = dist.get_backend(self.group) == "gloo"
        return self._p2p_exchange

    def _post_exchange(self, send: list[torch.Tensor], recv: list[torch.Tensor]) -> Works:
        """Every non-empty message of an exchange posted at once (rows to oneself copied)."""
        works = []
        for peer, (s, r) in enumerate(zip(send, recv)):
            if peer == self.group_rank:
                r.copy_(s)
                continue
            if r.numel():
                works.append(dist.irecv(r, self.members[peer], group=self.group,
                                        tag=EXCHANGE_TAG))
            if s.numel():
                works.append(dist.isend(s, self.members[peer], group=self.group,
                                        tag=EXCHANGE_TAG))
        return Works(works)

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every member's ``tensor`` (same shape everywhere), in member order."""
        out = [torch.empty_like(tensor) for _ in range(self.size)]
        self._run("all_gather", lambda: dist.all_gather(out, tensor.contiguous(),
                                                        group=self.group, async_op=True))
        self._count([tensor.nbytes] * self.size, [t.nbytes for t in out])
        return out

    def all_gather_v(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every member's ``tensor``; the first dimension may differ between members."""
        rows = self.all_gather(torch.tensor([tensor.shape[0]], dtype=torch.int64))
        sizes = [int(r) for r in rows]
        padded = torch.zeros((max(sizes), *tensor.shape[1:]), dtype=tensor.dtype)
        padded[: tensor.shape[0]] = tensor
        gathered = self.all_gather(padded)
        return [g[:n] for g, n in zip(gathered, sizes)]

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Reduces ``tensor`` in place across members (op: sum, max, min, product)."""
        if op not in _OPS:
            raise InvalidValueError(f"all_reduce op {op!r}; expected one of {sorted(_OPS)}")
        self._run("all_reduce", lambda: dist.all_reduce(tensor, _OPS[op], group=self.group,
                                                        async_op=True))
        share = 2 * tensor.nbytes // self.size
        self._count([share] * self.size, [share] * self.size)
        return tensor

    def start_all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> "Pending":
        """:meth:`all_reduce`, returned while under way; ``wait()`` (or ``done()``) on the
        result finishes it. Every rank must start its collectives on this group in the same
        order."""
        if op not in _OPS:
            raise InvalidValueError(f"all_reduce op {op!r}; expected one of {sorted(_OPS)}")
        work = self._start("all_reduce", lambda: dist.all_reduce(tensor, _OPS[op],
                                                                 group=self.group,
                                                                 async_op=True))

        def finish() -> torch.Tensor:
            share = 2 * tensor.nbytes // self.size
            self._count([share] * self.size, [share] * self.size)
            return tensor

        return Pending(self, "all_reduce", work, finish, keep=tensor)

    def account_all_reduce(self, nbytes: int) -> None:
        """Counts an all-reduce of ``nbytes`` that another library ran on this group (DDP's
        gradient all-reduce, which runs in C++ so that no Python callback sits on gloo's
        threads), with the same model as :meth:`all_reduce`."""
        share = 2 * nbytes // self.size
        self._count([share] * self.size, [share] * self.size)

    def peer_failure(self, op: str, exc: BaseException) -> PeerError | None:
        """The :class:`PeerError` behind a backend error raised outside this class (e.g. by
        DDP's all-reduce in backward), or None when ``exc`` is not a peer failure."""
        if isinstance(exc, PeerError):
            return exc
        if not isinstance(exc, RuntimeError) or not _is_peer_failure(exc):
            return None
        if self._broken is None:
            self._broken = self._failure(op, exc)
        return self._broken

    def reduce_scatter(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Sums ``tensor`` (``size`` equal chunks along dim 0) and returns this member's chunk."""
        if tensor.shape[0] % self.size:
            raise InvalidValueError(f"reduce_scatter: {tensor.shape[0]} rows do not split into "
                                    f"{self.size} equal chunks")
        out = torch.empty((tensor.shape[0] // self.size, *tensor.shape[1:]), dtype=tensor.dtype)
        # gloo runs reduce_scatter_tensor only synchronously (bounded by the group's timeout)
        self._run("reduce_scatter", lambda: dist.reduce_scatter_tensor(
            out, tensor.contiguous(), _OPS[op], group=self.group))
        self._count([out.nbytes] * self.size, [out.nbytes] * self.size)
        return out

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        """Copies member ``src``'s ``tensor`` into every member's ``tensor`` (in place)."""
        self._run("broadcast", lambda: dist.broadcast(tensor, self.members[src],
                                                      group=self.group, async_op=True))
        if self.group_rank == src:
            self._count([tensor.nbytes] * self.size, [0] * self.size)
        else:
            self._count([0] * self.size, [tensor.nbytes if i == src else 0
                                          for i in range(self.size)])
        return tensor

    def barrier(self) -> None:
        """Waits until every member arrives (with the timeout)."""
        self._run("barrier", lambda: dist.barrier(group=self.group, async_op=True))

    # -- point to point -----------------------------------------------------------------------
    def start_send(self, tensor: torch.Tensor, peer: int, tag: int) -> "Transfer":
        """Starts sending ``tensor`` to member ``peer`` under ``tag`` (a one-sided message for
        exchanges whose order is not the same on every rank, e.g. Dorylus's asynchronous
        scatters); the receiver posts :meth:`start_recv` with the same tag and a tensor of the
        same shape. Returns at once; poll ``done()`` or ``wait()``."""
        return self._p2p("send", dist.isend, tensor.contiguous(), peer, tag)

    def start_recv(self, tensor: torch.Tensor, peer: int, tag: int) -> "Transfer":
        """Starts receiving member ``peer``'s message ``tag`` into ``tensor`` (see
        :meth:`start_send`)."""
        return self._p2p("recv", dist.irecv, tensor, peer, tag)

    def _p2p(self, kind: str, fn: Callable, tensor: torch.Tensor, peer: int,
             tag: int) -> "Transfer":
        if not 0 <= peer < self.size or peer == self.group_rank:
            raise InvalidValueError(f"{kind} on {self.name}: peer {peer}; expected another member "
                                    f"in [0, {self.size})")
        op = f"{kind} (tag {tag}) {'to' if kind == 'send' else 'from'} rank {self.members[peer]}"
        self._check_usable(op)
        work = self._guard(op, lambda: fn(tensor, self.members[peer], group=self.group,
                                          tag=tag))
        sizes = [tensor.nbytes if i == peer else 0 for i in range(self.size)]
        count = ((lambda: self._count(sizes, [0] * self.size)) if kind == "send" else
                 (lambda: self._count([0] * self.size, sizes)))
        return Transfer(self, op, work, count, tensor, self.members[peer])

    # -- plumbing ----------------------------------------------------------------------------
    def _count(self, sent: Sequence[int], recv: Sequence[int]) -> None:
        self.counter.add_control(0, calls=1)
        for i, (s, r) in enumerate(zip(sent, recv)):
            if i != self.group_rank and (s or r):
                self.counter.add(self._intra[i], s, r)

    def _run(self, op: str, start: Callable[[], dist.Work | None]) -> None:
        """Issues a collective and waits for it with the timeout.

        Errors raised while issuing (bad arguments, unsupported op) propagate unchanged; errors
        while waiting mean a peer failed and become a :class:`PeerError`. ``start`` returns
        None for ops gloo only runs synchronously; the process group's timeout bounds those.
        """
        self._wait(op, self._start(op, start))

    def _start(self, op: str, start: Callable[[], dist.Work | None]) -> dist.Work | None:
        self._check_usable(op)
        self._next_seq()
        return self._guard(op, start)

    def _wait(self, op: str, work: dist.Work | None) -> None:
        if work is not None:
            self._guard(op, lambda: work.wait(timeout=self.timeout))

    def _guard(self, op: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except RuntimeError as exc:
            if not _is_peer_failure(exc):
                raise
            self._broken = self._failure(op, exc)
            raise self._broken from exc

    def _check_usable(self, op: str) -> None:
        if self._broken is not None:
            raise PeerError(f"{op} on the {self.name} group: the group already failed "
                            f"({self._broken})", self._broken.ranks, op)

    def _next_seq(self) -> None:
        self._seq += 1
        if self.health is not None:
            self.health.op_seqs[self.name] = self._seq

    def _failure(self, op: str, exc: Exception) -> PeerError:
        ranks, why = [], ""
        if self.health is not None:
            self.health.mark("failed")
            ranks, why = self.health.diagnose(self.name, self.members)
        timed_out = "timed out" in str(exc).lower()
        cause = (f"timed out after {self.timeout.total_seconds():g}s" if timed_out
                 else f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        who = why or "no failed rank could be identified"
        return PeerError(f"{op} on the {self.name} group failed on rank {self.global_rank}: {who} "
                         f"[{cause}]", ranks, op)

    def _silent_peer(self, op: str, peer: int, waited: float) -> PeerError:
        """The error for point-to-point ``op`` with global rank ``peer``, still pending after
        ``waited`` seconds (:meth:`Transfer.fail`)."""
        return PeerError(f"{op} on the {self.name} group: nothing for {waited:.0f}s "
                         f"(rank {peer} dead or stuck?)", [peer], op)
