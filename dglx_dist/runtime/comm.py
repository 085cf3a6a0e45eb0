"""Collectives over one process group, with byte counters, timeouts and named failures.

Every strategy sends through a :class:`Comm`, so byte counts cannot be forgotten: *logical*
bytes under a direct-exchange model, split by whether the peer is on the same server
(docs/metrics.md, the ``bytes_*`` fields). A group made under NCCL carries CUDA tensors itself
(``"cpu:gloo,cuda:nccl"``); on gloo alone a device tensor goes through host memory. Results are
on the input's device either way, and bytes are counted the same way.

Every call waits at most ``timeout`` seconds. When a collective fails (a peer died: gloo
notices at once; or the wait timed out), the error is a :class:`PeerError` that names the
failed ranks (see :mod:`dglx_dist.runtime.health`), raised on every survivor.
"""
from __future__ import annotations

import collections
import datetime
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from dglx_dist.errors import InvalidValueError
from dglx_dist.runtime.counters import ByteCounter
from dglx_dist.runtime.health import Health
from dglx_dist.runtime.peer import PeerError, is_peer_failure
from dglx_dist.runtime.pending import Pending, Transfer, Works
from dglx_dist.runtime.sized import HEAD_BYTES, SizedExchange
from dglx_dist.runtime.topology import Topology

__all__ = ["Comm", "ByteCounter", "Pending", "PeerError", "Transfer"]

_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
        "product": dist.ReduceOp.PRODUCT}


EXCHANGE_TAG = 2**31 - 2
"""The point-to-point tag of :meth:`Comm.all_to_all_v`'s messages on gloo (tags of
:meth:`Comm.start_send` must differ from it)."""

class Comm:
    """A communicator: one process group, its members, and the job's counters and health.

    Args:
        name: the group's name in errors and diagnostics ("world", "server", "cross").
        group: the torch.distributed group (None: the default group).
        members: global ranks of the group, in group-rank order.
        topology: servers x local ranks, to classify peers.
        counter: the byte counter shared by the session's communicators.
        health: heartbeats used to name failed ranks (None: no diagnosis).
        timeout: seconds any call may wait.
        native: the device types the group carries itself ("cpu" over gloo; "cuda" too under
            NCCL); tensors on other devices go through host memory.

    Attributes:
        global_rank: this process's rank in the whole job (torch.distributed's global rank).
        group_rank: this process's position in ``members`` (torch.distributed's rank within
            the group); peers, ``src`` and send/recv lists are indexed by group rank.
        unsettled: exchanges of unknown sizes whose counts were not read yet, oldest first
            (:class:`~dglx_dist.runtime.sized.SizedExchange`).
    """

    def __init__(self, name: str, group, members: Sequence[int], global_rank: int,
                 topology: Topology, counter: ByteCounter, health: Health | None, timeout: float,
                 native: Sequence[str] = ("cpu",)):
        self.name, self.group, self.members = name, group, list(members)
        self.native = frozenset(native)
        self.global_rank, self.topology, self.counter = global_rank, topology, counter
        self.health, self.timeout = health, datetime.timedelta(seconds=timeout)
        self.group_rank = self.members.index(global_rank)
        self._intra = [topology.same_server(global_rank, m) for m in self.members]
        self._seq = 0
        self._broken: PeerError | None = None
        self.unsettled: collections.deque = collections.deque()

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
                (e.g. the answers to its own requests). Every rank of the call must then
                pass it. Without it, host tensors lead with their row counts and go in one
                round where they are small (:mod:`~dglx_dist.runtime.sized`); device tensors
                under NCCL take a round of counts first.
        """
        return self.start_all_to_all_v(send, recv_rows).wait()

    def start_all_to_all_v(self, send: Sequence[torch.Tensor],
                           recv_rows: Sequence[int] | None = None) -> "Pending":
        """:meth:`all_to_all_v`, returned while the transfer is under way (to overlap it with
        local work); ``wait()`` on the result finishes it. The round of counts (NCCL, no
        ``recv_rows``) runs before this returns. Every rank must start its exchanges on this
        group in the same order (and each started one must be waited for)."""
        if len(send) != self.size:
            raise InvalidValueError(f"all_to_all_v on {self.name} needs {self.size} tensors, "
                                    f"got {len(send)}")
        trailing, dtype, device = send[0].shape[1:], send[0].dtype, send[0].device
        for i, t in enumerate(send):
            if t.shape[1:] != trailing or t.dtype != dtype or t.device != device:
                raise InvalidValueError(f"all_to_all_v: tensor {i} is {t.dtype}{tuple(t.shape)} "
                                        f"on {t.device}; expected {dtype} with trailing shape "
                                        f"{tuple(trailing)} on {device}")
        pending = self._start_exchange([self._carried(t) for t in send], recv_rows, trailing,
                                       dtype)
        return pending.map(lambda recv: [r.to(device) for r in recv])

    def _start_exchange(self, send: Sequence[torch.Tensor], recv_rows: Sequence[int] | None,
                        trailing: torch.Size, dtype: torch.dtype) -> "Pending":
        if recv_rows is None and send[0].device.type == "cpu":  # one round where they fit
            keep = [t.contiguous() for t in send]
            work = self._start("all_to_all_v", lambda: SizedExchange(
                self, keep, trailing, dtype, EXCHANGE_TAG))
            self.counter.add_control(HEAD_BYTES * (self.size - 1))

            def received() -> list[torch.Tensor]:
                self._count([t.nbytes for t in keep], [t.nbytes for t in work.recv])
                return work.recv

            return Pending(self, "all_to_all_v", work, received, keep=keep)
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
        out = send[0].new_empty((int(recv_counts.sum()), *trailing), dtype=dtype)
        recv = list(torch.split(out, recv_counts.tolist()))
        # host tensors (gloo): one send and one receive per peer instead of gloo's all-to-all,
        # which moves half the bytes per second of concurrent sends and receives when both
        # directions of a link carry data (emulated 1 Gbit/s: 11 MB each way, 166 vs 97 ms)
        if out.device.type == "cpu":
            keep = [t.contiguous() for t in send]
            work = self._start("all_to_all_v", lambda: self._post_exchange(keep, recv))
        else:  # NCCL's all-to-all
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

    def _carried(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` where this group carries its device, else a contiguous copy in host
        memory (see the module docstring; the caller writes results back where they belong)."""
        if tensor.device.type in self.native:
            return tensor
        return tensor.to("cpu", copy=True, memory_format=torch.contiguous_format)

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

    def all_gather(self, tensor: torch.Tensor, count: bool = True) -> list[torch.Tensor]:
        """Every member's ``tensor`` (same shape everywhere), in member order.

        Args:
            count: False for the session's own bookkeeping (not the job's traffic).
        """
        src = self._carried(tensor).contiguous()
        out = [torch.empty_like(src) for _ in range(self.size)]
        self._run("all_gather", lambda: dist.all_gather(out, src, group=self.group,
                                                        async_op=True))
        if count:
            self._count([src.nbytes] * self.size, [t.nbytes for t in out])
        return [t.to(tensor.device) for t in out]

    def all_gather_v(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every member's ``tensor``; the first dimension may differ between members."""
        rows = self.all_gather(torch.tensor([tensor.shape[0]], dtype=torch.int64))
        sizes = [int(r) for r in rows]
        padded = tensor.new_zeros((max(sizes), *tensor.shape[1:]))
        padded[: tensor.shape[0]] = tensor
        gathered = self.all_gather(padded)
        return [g[:n] for g, n in zip(gathered, sizes)]

    def failed_ranks(self, ok: bool) -> list[int]:
        """The members (group ranks) whose ``ok`` is False: every member passes its own."""
        flags = self.all_gather(torch.tensor([int(ok)]))
        return [r for r, f in enumerate(flags) if not int(f)]

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Reduces ``tensor`` in place across members (op: sum, max, min, product)."""
        return self.start_all_reduce(tensor, op).wait()

    def start_all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> "Pending":
        """:meth:`all_reduce`, returned while under way; ``wait()`` (or ``done()``) on the
        result finishes it. Every rank must start its collectives on this group in the same
        order."""
        if op not in _OPS:
            raise InvalidValueError(f"all_reduce op {op!r}; expected one of {sorted(_OPS)}")
        buf = self._carried(tensor)
        work = self._start("all_reduce", lambda: dist.all_reduce(buf, _OPS[op], group=self.group,
                                                                 async_op=True))

        def finish() -> torch.Tensor:
            self.account_all_reduce(tensor.nbytes)
            return tensor if buf is tensor else tensor.copy_(buf)

        return Pending(self, "all_reduce", work, finish, keep=buf)

    def account_all_reduce(self, nbytes: int) -> None:
        """Counts an all-reduce of ``nbytes`` that another library ran on this group (DDP's
        gradient all-reduce, which runs in C++ so that no Python callback sits on gloo's
        threads), with the same model as :meth:`all_reduce`."""
        share = 2 * nbytes // self.size
        self._count([share] * self.size, [share] * self.size)

    def peer_failure(self, op: str, exc: BaseException, seqs: str = "") -> PeerError | None:
        """The :class:`PeerError` behind a backend error raised outside this class (e.g. by
        DDP's all-reduce in backward), or None when ``exc`` is not a peer failure; ``seqs``
        names the health record's count of such collectives (default: this group's)."""
        if isinstance(exc, PeerError):
            return exc
        if not isinstance(exc, RuntimeError) or not is_peer_failure(exc):
            return None
        return self._break(op, exc, seqs=seqs)

    def reduce_scatter(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Sums ``tensor`` (``size`` equal chunks along dim 0) and returns this member's chunk."""
        if tensor.shape[0] % self.size:
            raise InvalidValueError(f"reduce_scatter: {tensor.shape[0]} rows do not split into "
                                    f"{self.size} equal chunks")
        src = self._carried(tensor).contiguous()
        out = src.new_empty((src.shape[0] // self.size, *src.shape[1:]))
        # gloo runs reduce_scatter_tensor only synchronously (bounded by the group's timeout)
        self._run("reduce_scatter", lambda: dist.reduce_scatter_tensor(
            out, src, _OPS[op], group=self.group))
        self._count([out.nbytes] * self.size, [out.nbytes] * self.size)
        return out.to(tensor.device)

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        """Copies member ``src``'s ``tensor`` into every member's ``tensor`` (in place)."""
        buf = self._carried(tensor)
        self._run("broadcast", lambda: dist.broadcast(buf, self.members[src],
                                                      group=self.group, async_op=True))
        if self.group_rank == src:
            self._count([tensor.nbytes] * self.size, [0] * self.size)
        else:
            self._count([0] * self.size, [tensor.nbytes if i == src else 0
                                          for i in range(self.size)])
        return tensor if buf is tensor else tensor.copy_(buf)

    def barrier(self) -> None:
        """Waits until every member arrives (with the timeout)."""
        self._run("barrier", lambda: dist.barrier(group=self.group, async_op=True))

    # -- point to point -----------------------------------------------------------------------
    def start_send(self, tensor: torch.Tensor, peer: int, tag: int) -> "Transfer":
        """Starts sending ``tensor`` to member ``peer`` under ``tag`` (a one-sided message for
        exchanges whose order is not the same on every rank, e.g. Dorylus's asynchronous
        scatters); the receiver posts :meth:`start_recv` with the same tag and a tensor of the
        same shape. Returns at once; poll ``done()`` or ``wait()``."""
        return self._p2p("send", dist.isend, self._carried(tensor).contiguous(), peer, tag)

    def start_recv(self, tensor: torch.Tensor, peer: int, tag: int) -> "Transfer":
        """Starts receiving member ``peer``'s message ``tag`` into ``tensor`` (see
        :meth:`start_send`)."""
        buf = self._carried(tensor)  # into host memory, then into ``tensor``
        return self._p2p("recv", dist.irecv, buf, peer, tag, into=None if buf is tensor else tensor)

    def _p2p(self, kind: str, fn: Callable, tensor: torch.Tensor, peer: int,
             tag: int, into: torch.Tensor | None = None) -> "Transfer":
        if not 0 <= peer < self.size or peer == self.group_rank:
            raise InvalidValueError(f"{kind} on {self.name}: peer {peer}; expected another member "
                                    f"in [0, {self.size})")
        op = f"{kind} (tag {tag}) {'to' if kind == 'send' else 'from'} rank {self.members[peer]}"
        self.check_usable(op)
        work = self.guard(op, lambda: fn(tensor, self.members[peer], group=self.group,
                                          tag=tag))
        sizes = [tensor.nbytes if i == peer else 0 for i in range(self.size)]
        nothing = [0] * self.size

        def done() -> None:
            self._count(*((sizes, nothing) if kind == "send" else (nothing, sizes)))
            if into is not None:
                into.copy_(tensor)

        return Transfer(self, op, work, done, tensor if into is None else into,
                        self.members[peer], keep=tensor)

    # -- plumbing ----------------------------------------------------------------------------
    def _count(self, sent: Sequence[int], recv: Sequence[int]) -> None:
        self.counter.add_control(0, calls=1)
        for i, (s, r) in enumerate(zip(sent, recv)):
            if i != self.group_rank and (s or r):
                self.counter.add(self._intra[i], s, r)

    def _run(self, op: str, start: Callable[[], dist.Work | None]) -> None:
        """Issues a collective and waits for it with the timeout: errors while issuing (bad
        arguments) propagate, errors while waiting (a peer failed) become a :class:`PeerError`;
        ``start`` gives None for ops gloo runs synchronously (the group's timeout bounds them)."""
        Pending(self, op, self._start(op, start), lambda: None).wait()

    def _start(self, op: str, start: Callable[[], dist.Work | None]) -> dist.Work | None:
        self.check_usable(op)
        self._next_seq()
        return self.guard(op, start)

    def guard(self, op: str, fn: Callable[[], Any], suspect: int | None = None) -> Any:
        """``fn()``; a peer's failure in it breaks this group with a :class:`PeerError`
        (naming ``suspect``, a global rank, when the diagnosis names none)."""
        try:
            return fn()
        except RuntimeError as exc:
            if not is_peer_failure(exc):
                raise
            raise self._break(op, exc, suspect) from exc

    def stalled(self, op: str, waited: float, suspect: int | None = None) -> PeerError:
        """The :class:`PeerError` for ``op``, still under way after ``waited`` seconds
        without an error (a frozen peer keeps its connections open, so nothing raises): the
        failure path of a collective that timed out (the diagnosis names the failed ranks and
        ends frozen ones beside this one), breaking this group; ``suspect``: the global rank
        named when the diagnosis names none. A group that failed already returns its error."""
        return self._break(op, TimeoutError(f"timed out after {waited:.0f}s"), suspect)

    def _break(self, op: str, exc: Exception, suspect: int | None = None,
               seqs: str = "") -> PeerError:
        """The group's failure: the first one diagnosed (see :meth:`stalled`)."""
        if self._broken is None:
            failure = self._failure(op, exc, seqs)
            if not failure.ranks and suspect is not None:
                failure = PeerError(f"{failure} (rank {suspect} dead or stuck?)", [suspect], op)
            self._broken = failure
        return self._broken

    def check_usable(self, op: str) -> None:
        """Raises the group's :class:`PeerError` for ``op`` once the group failed."""
        if self._broken is not None:
            raise PeerError(f"{op} on the {self.name} group: the group already failed "
                            f"({self._broken})", self._broken.ranks, op)

    def _next_seq(self) -> None:
        self._seq += 1
        if self.health is not None:
            self.health.op_seqs[self.name] = self._seq

    def _failure(self, op: str, exc: Exception, seqs: str = "") -> PeerError:
        ranks, why = [], ""
        if self.health is not None:
            self.health.mark("failed")
            ranks, why, frozen = self.health.diagnose(seqs or self.name, self.members)
            self.health.end_frozen(frozen)
        timed_out = any(s in str(exc).lower() for s in ("timed out", "timeout"))
        cause = (f"timed out after {self.timeout.total_seconds():g}s" if timed_out
                 else f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        who = why or "no failed rank could be identified"
        return PeerError(f"{op} on the {self.name} group failed on rank {self.global_rank}: {who} "
                         f"[{cause}]", ranks, op)

