"""A loader's sampler processes (DGL's ``num_workers``): the steps' blocks drawn in processes
of their own, beside the rank, while its loader's worker thread starts their rows' pulls and
the model computes.

Each rank starts ``num_workers`` processes (``spawn``). Process ``w`` of every rank joins a
torch.distributed job of its own (gloo, one process per rank, in the job's store under a
prefix of its own) and makes there the process groups of the communicators the sampler
exchanges on (:meth:`~dglx_dist.runtime.topology.Topology.family`), so its exchanges meet
those of the same process on the other ranks, never the rank's own. It gets the sampler by
value (its tensors in shared memory, its communicators as :class:`Seat`\\ s it fills with its
own), and draws the steps it is sent: step ``i`` of a loader's epoch goes to process
``i % num_workers`` on every rank, so the processes that draw one step together are the
same ones everywhere, ``num_workers * prefetch_factor`` steps ahead of the worker thread
that asks for them (:meth:`SamplerProcs.draw_each`).

Which steps are drawn is decided by the thread that asks, in steps taken, never in time: at
a break every rank has sent its processes the same steps, and answers left over are read
and dropped before the next epoch's (each request carries a ticket). A step's blocks cross
as one buffer (:func:`_packed`). A process whose draw fails sends its error, which the rank
raises at the step (a peer's failure as a :class:`~dglx_dist.runtime.peer.PeerError` naming
the rank), and lives on, answering with it, until it is asked to end; one that dies is named
by the rank that waits for it. The processes end when their graph is closed, at the
session's shutdown or the rank's exit, or on their own once their rank is gone.
"""
from __future__ import annotations

import collections
import copy
import dataclasses
import datetime
import math
import queue
from typing import Any, Callable, Iterable, Iterator

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from multiprocessing import util as mp_util

from dglx_dist.errors import NotSupportedError, StateError
from dglx_dist.runtime.comm import Comm
from dglx_dist.runtime.counters import ByteCounter
from dglx_dist.runtime.failure import one_line
from dglx_dist.runtime.health import Health
from dglx_dist.runtime.peer import PeerError
from dglx_dist.runtime.topology import Topology

__all__ = ["SamplerProcs", "Seat"]

_POLL_S = 0.5  # how often a wait looks at the process it waits for


@dataclasses.dataclass(frozen=True)
class Seat:
    """A communicator's place in a sampler sent to a process: its name and members (the
    process fills it with a communicator of its own over the same ranks)."""

    name: str
    members: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class ProcJob:
    """What a sampler process needs to join the other ranks' processes of its index.

    Attributes:
        store: where the job's store is (:func:`_store_address`).
        prefix: the store keys of this index's processes (unique in the job).
        rank: the rank's global rank (the process's rank in its own job).
        topology: the job's servers and ranks.
        seats: the communicators the sampler exchanges on.
        timeout: seconds any of its collectives may wait.
    """

    store: tuple
    prefix: str
    rank: int
    topology: Topology
    seats: tuple[Seat, ...]
    timeout: float


class SamplerProcs:
    """``count`` sampler processes of this rank (collective: every rank makes them for the
    same loader, in the same order), drawing with ``sampler``.

    Args:
        session: the rank's session.
        sampler: the sampler (a :class:`~dglx_dist.sampling.sampler.BlockSampler` whose
            ``on`` replaces its communicators).
        count: processes (DGL's ``num_workers``, >= 1).
        ahead: steps each process may be asked for ahead of the one read (DGL's
            ``prefetch_factor``).
    """

    def __init__(self, session, sampler, count: int, ahead: int):
        self.rank, self.count, self.window = session.rank, count, count * max(1, ahead)
        self.timeout = session.env.timeout
        self._counter, self._ticket = session.counter, 0
        seats: list[Seat] = []
        bare = sampler.on(lambda comm: seats.append(Seat(comm.name, tuple(comm.members)))
                          or seats[-1])
        address = _store_address(session)
        # the sets this rank made in the job so far: the same count on every rank
        index = session.store.add(f"dglx-samplers/made/{session.rank}", 1)
        ctx = mp.get_context("spawn")
        self._inboxes = [ctx.Queue() for _ in range(count)]
        self._outboxes = [ctx.Queue() for _ in range(count)]
        self._procs = []
        for w in range(count):
            job = ProcJob(address, f"dglx-samplers/{index}/{w}", session.rank,
                          session.topology, tuple(seats), self.timeout)
            proc = ctx.Process(target=_serve, args=(job, bare, self._inboxes[w],
                                                     self._outboxes[w]),
                               name=f"dglx-sampler-rank{session.rank}-{w}")
            proc.start()  # (not a daemon: a rank may be one, as torch's DataLoader's are not)
            self._procs.append(proc)
        # at the rank's exit, before multiprocessing joins its processes (which wait for
        # their stop) and before its queues' threads stop (their finalizers' priority is 10);
        # a process may be a rank too (the tests' launcher starts them)
        self._at_exit = mp_util.Finalize(self, SamplerProcs.close, args=(self,),
                                         exitpriority=100)
        for w in range(count):  # each joined its peers (or says why not)
            self._read(w, "ready")

    def draw_each(self, requests: Iterable[tuple[Any, tuple]]
                  ) -> Iterator[tuple[Any, list]]:
        """Each request ``(key, args)`` as ``(key, blocks)``, in order, ``blocks`` drawn by
        process ``i % count`` for the ``i``-th request as ``draw_blocks(*args)``, the next
        :attr:`window` requests sent before a result is waited for (the sampler protocol's
        ``window``)."""
        sent: collections.deque = collections.deque()
        numbered = enumerate(requests)
        while True:
            while len(sent) < self.window and (item := next(numbered, None)) is not None:
                step, (key, args) = item
                sent.append((key, step % self.count, self._send(step % self.count, args)))
            if not sent:
                return
            key, w, ticket = sent.popleft()
            yield key, self._read(w, ticket)

    def _send(self, w: int, args: tuple) -> int:
        """Sends process ``w`` a draw; its tensors as copies of their own (the queue's thread
        moves what it sends into shared memory, in place, while this rank reads on)."""
        self._ticket += 1
        self._inboxes[w].put((self._ticket, tuple(
            a.clone() if isinstance(a, torch.Tensor) else a for a in args)))
        return self._ticket

    def _read(self, w: int, ticket) -> Any:
        """Process ``w``'s answer to ``ticket`` (answers to older tickets dropped: the
        steps a loop left early did not take), its bytes counted as the rank's."""
        waited = 0.0
        while True:
            try:
                got, value, counts = self._outboxes[w].get(timeout=_POLL_S)
            except queue.Empty:
                waited += _POLL_S
                self._check(w, waited)
                continue
            except (OSError, EOFError):  # its tensors' memory is handed over by the process
                self._procs[w].join(timeout=_POLL_S)
                self._check(w, 0.0)  # (gone: named)
                raise
            self._counter.merge(counts)
            if isinstance(value, _Failed):
                raise value.error(self.rank, w)
            if got == ticket:
                return value if got == "ready" else _unpacked(*value)

    def _check(self, w: int, waited: float) -> None:
        """Raises where process ``w`` is gone or has not answered in the timeout."""
        proc = self._procs[w]
        if not proc.is_alive():
            raise StateError(f"rank {self.rank}: the loader's sampler process {w} exited "
                             f"(code {proc.exitcode}) before it answered")
        if waited > self.timeout + 30:
            raise StateError(f"rank {self.rank}: the loader's sampler process {w} gave no "
                             f"step in {waited:.0f}s")

    def close(self) -> None:
        """Ends the processes (each after the draw it is in; those that do not end within
        a few seconds are terminated)."""
        self._at_exit.cancel()
        for proc, inbox in zip(self._procs, self._inboxes):
            if proc.is_alive():
                inbox.put(None)
        for proc in self._procs:
            proc.join(timeout=5.0)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=1.0)


def _store_address(session) -> tuple:
    """Where the sampler processes meet: the job's TCPStore (``("tcp", host, port)``) or
    FileStore (``("file", path)``)."""
    store = session.store
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    if isinstance(store, dist.TCPStore):
        return "tcp", store.host, store.port
    if isinstance(store, dist.FileStore):
        return "file", store.path
    raise NotSupportedError(f"DataLoader: num_workers > 0 starts sampler processes that meet "
                            f"in the job's store, a TCPStore or a FileStore, and this job's is "
                            f"a {type(store).__name__}; expected num_workers=0")


def _open_store(address: tuple, timeout: datetime.timedelta):
    """A client of the store at ``address`` (:func:`_store_address`)."""
    if address[0] == "tcp":
        return dist.TCPStore(address[1], address[2], None, False, timeout=timeout)
    store = dist.FileStore(address[1], -1)
    store.set_timeout(timeout)
    return store


@dataclasses.dataclass(frozen=True)
class _Failed:
    """A process's error, as it travels to its rank: its one line
    (:func:`~dglx_dist.runtime.failure.one_line`), and where it is a peer's failure, the
    ranks it names and the collective."""

    line: str
    ranks: tuple[int, ...] | None = None
    op: str = ""

    @classmethod
    def of(cls, exc: BaseException) -> "_Failed":
        if isinstance(exc, PeerError):
            return cls(str(exc), tuple(exc.ranks), exc.op)
        return cls(one_line(exc))

    def error(self, rank: int, w: int) -> Exception:
        if self.ranks is not None:
            return PeerError(self.line, self.ranks, self.op)
        return StateError(f"rank {rank}: the loader's sampler process {w}: {self.line}")


def _serve(job: ProcJob, bare, inbox, outbox) -> None:
    """A sampler process: joins its peers, then draws what it is sent until told to stop
    (None), a draw fails, or its parent is gone."""
    torch.set_num_threads(1)
    counter = ByteCounter()
    try:
        twin, health = _communicators(job, counter)
        sampler = bare.on(twin)
    except BaseException as exc:  # noqa: BLE001  (its rank raises it)
        outbox.put(("ready", _Failed.of(exc), counter.snapshot()))
        return
    outbox.put(("ready", None, _taken(counter)))
    failed = _draw_sent(sampler, inbox, outbox, counter, health)
    if failed is None:
        health.mark("exit")
    health.stop()
    if failed is None:
        dist.destroy_process_group()
    outbox.cancel_join_thread()  # its rank reads no more: nothing left unsent holds it


def _draw_sent(sampler, inbox, outbox, counter: ByteCounter, health: Health
               ) -> "_Failed | None":
    """Draws each ``(ticket, args)`` from ``inbox`` into ``outbox`` (:func:`_packed`) until
    a None or its parent's end; after a failed draw (its crash recorded for the peers'
    processes to name), answers each later one with the failure, and returns it at the end:
    the process lives on until then, as its rank reads the steps it sent (their memory is
    handed over by this process)."""
    parent, failed = mp.parent_process(), None
    while True:
        try:
            message = inbox.get(timeout=1.0)
        except queue.Empty:
            if parent is not None and not parent.is_alive():
                return failed
            continue
        if message is None:
            return failed
        ticket, args = message
        if failed is None:
            try:
                value = _packed(sampler.draw_blocks(*args))
            except BaseException as exc:  # noqa: BLE001  (its rank raises it at the step)
                failed = _Failed.of(exc)
                health.record_crash(failed.line)
        outbox.put((ticket, value if failed is None else failed, _taken(counter)))


def _communicators(job: ProcJob, counter: ByteCounter):
    """Joins the processes of this index on every rank and makes the groups of ``job``'s
    seats (every process in the same order); the seat -> communicator map ``on`` takes, and
    the processes' heartbeats."""
    timeout = datetime.timedelta(seconds=job.timeout)
    store = _open_store(job.store, timeout)
    dist.init_process_group("gloo", store=dist.PrefixStore(job.prefix, store), rank=job.rank,
                            world_size=job.topology.world_size, timeout=timeout)
    # heartbeats of this index's processes: a failed exchange names the rank whose process
    # is gone
    health = Health(store, job.rank, job.topology.world_size,
                    store_timeout=min(10.0, job.timeout / 2), prefix=f"{job.prefix}/health/")
    health.start()
    made: dict[tuple[int, ...], Comm] = {}
    for seat in job.seats:
        if seat.members in made:
            continue
        for members in job.topology.family(seat.members):
            group = dist.new_group(members, timeout=timeout, backend="gloo")
            if tuple(members) == seat.members:
                made[seat.members] = Comm(seat.name, group, members, job.rank, job.topology,
                                          counter, health, job.timeout)
    return (lambda seat: made[seat.members]), health


def _swapped(value, swap: Callable[[torch.Tensor], torch.Tensor]):
    """``value`` with each tensor ``t`` in it replaced by ``swap(t)``, in one fixed order:
    through lists, tuples, dicts and dataclasses (copied, their fields set past a frozen
    one's guard: a placeholder need not pass its checks); other objects as they are."""
    if isinstance(value, torch.Tensor):
        return swap(value)
    if type(value) in (list, tuple):
        return type(value)(_swapped(v, swap) for v in value)
    if type(value) is dict:
        return {k: _swapped(v, swap) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = copy.copy(value)
        for f in dataclasses.fields(value):
            object.__setattr__(out, f.name, _swapped(getattr(value, f.name), swap))
        return out
    return value


def _packed(value) -> tuple[Any, list, torch.Tensor]:
    """``value`` with its host tensors empty, their contents in one buffer (16-byte aligned,
    where each one starts, its dtype and shape in the list), and the buffer: the queue hands
    one tensor's memory over where it would hand each one's (a step's blocks hold about 16;
    measured here, reading a ready step of 16 tensors from the queue took 3.6 ms one by one,
    0.8 ms packed)."""
    tensors: list[torch.Tensor] = []

    def out(t: torch.Tensor) -> torch.Tensor:
        if not _packable(t):
            return t
        tensors.append(t)
        return t.new_empty(0)  # (an empty tensor crosses without memory of its own)

    skeleton, specs, size = _swapped(value, out), [], 0
    for t in tensors:
        specs.append((size, t.dtype, tuple(t.shape)))
        size += -(-t.numel() * t.element_size() // 16) * 16
    buffer = torch.empty(size, dtype=torch.uint8)
    for (start, _, _), t in zip(specs, tensors):
        flat = t.contiguous().view(-1).view(torch.uint8)
        buffer[start:start + flat.numel()] = flat
    return skeleton, specs, buffer


def _unpacked(skeleton, specs: list, buffer: torch.Tensor):
    """What :func:`_packed` packed, its tensors views of the buffer."""
    left = iter(specs)

    def back(t: torch.Tensor) -> torch.Tensor:
        if not _packable(t):
            return t
        at, dtype, shape = next(left)
        return buffer[at:at + math.prod(shape) * dtype.itemsize].view(dtype).view(shape)

    return _swapped(skeleton, back)


def _packable(t: torch.Tensor) -> bool:
    """Whether :func:`_packed` packs ``t`` (a dense host tensor; others cross as they are)."""
    return t.device.type == "cpu" and t.layout == torch.strided


def _taken(counter: ByteCounter) -> dict[str, int]:
    """The bytes ``counter`` counted since the last call (then zero)."""
    counts = counter.snapshot()
    counter.reset()
    return counts
