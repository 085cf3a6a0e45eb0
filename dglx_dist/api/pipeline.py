"""A loader's worker thread: the next steps drawn and their rows pulled while the model
computes (DGL's ``use_prefetch_thread``, ``prefetch_factor`` steps deep).

The worker draws each step with the strategy's sampler on communicators of its own
(:class:`Lane`: twins of the session's groups, :meth:`~dglx_dist.runtime.session.Session.twin`)
and starts the pull of its rows through the store on its own communicators
(:meth:`~dglx_dist.kvstore.KVStore.on`), so its exchanges never interleave with those of the
calling thread (DDP's all-reduce, the loop's own reads and writes, the step's hand-over). The
caller takes the steps in order; their hand-over (``UnderWay.finish``: the rows waited for and
put on the blocks, the pull of the rows the loop reads itself) stays on the calling thread.
What a step needs travels with it (its blocks carry its state; the pulls are the step's own).

How far the worker runs is counted in steps the caller took, never in time: it may start
step ``i`` once the caller took step ``i - depth``, so at a break every rank's worker has
drawn the same steps and finishes them (no rank waits on a peer that stopped sooner). A
failure while drawing reaches the caller at the step it belongs to, as the same exception.

An edge loader's pairs (DGL's ``find_edges``, the exclusions and the negatives, which a
negative sampler draws from torch's global generator, the one the model's dropout draws
from) are made on the calling thread, through its communicators, each as the step it is for
is allowed (:class:`FedPairs`); the worker draws the step's blocks around them.
"""
from __future__ import annotations

import contextvars
import logging
import queue
import threading
from typing import Callable, Iterator

import torch

from dglx_dist.api.workers import SamplerProcs
from dglx_dist.errors import StateError
from dglx_dist.runtime.comm import Comm
from dglx_dist.runtime.peer import PeerError
from dglx_dist.strategies.steps import (EdgeBatch, LoaderPlan, LoaderSpec, UnderWay,
                                        seeded_batches)

__all__ = ["FedPairs", "Lane", "Worker"]

log = logging.getLogger(__name__)

_END = object()


class Lane:
    """A graph's communicators for its loaders' worker threads: one twin of each of the
    session's communicators a worker exchanges on, made collectively on first use (every rank
    builds its loaders in the same order) and kept. One worker uses them at a time
    (:meth:`take`; a loader that finds them taken draws in turn).

    Args:
        session: the graph's session.
    """

    def __init__(self, session):
        self.session = session
        self._twins: dict[str, Comm] = {}
        self._procs: dict[tuple, SamplerProcs] = {}
        self.busy = False

    def twin(self, comm: Comm) -> Comm:
        """``comm``'s twin (collective the first time)."""
        if comm.name not in self._twins:
            self._twins[comm.name] = self.session.twin(comm, f"loader-{comm.name}")
        return self._twins[comm.name]

    def procs(self, count: int, ahead: int, own: bool, sampler: Callable[[], object]
              ) -> SamplerProcs:
        """The lane's ``count`` sampler processes drawing ``ahead`` steps each with the
        strategy's sampler (``own``) or the graph's (``sampler()``), started on first use
        (collective) and kept until the graph is closed or the session shuts down (DGL's
        ``persistent_workers``)."""
        key = (count, ahead, own)
        if key not in self._procs:
            made = SamplerProcs(self.session, sampler(), count, ahead)
            self.session.add_closer(made.close)
            self._procs[key] = made
        return self._procs[key]

    def close(self) -> None:
        """Ends the lane's sampler processes (its graph is closed)."""
        for made in self._procs.values():
            self.session.remove_closer(made.close)
            made.close()
        self._procs.clear()

    def take(self) -> bool:
        """Takes the lane for a worker; False when another worker has it (the calling
        thread decides, at the same point on every rank)."""
        if self.busy:
            return False
        self.busy = True
        return True

    def give_back(self) -> None:
        self.busy = False


class FedPairs:
    """An edge loader's pair maker as a worker thread calls it: each call is the next
    step's batch, which the calling thread made (:meth:`allow`) before it allowed the worker
    that step, with the loader's own pair maker, in step order (the same batches as the loop
    in turn: :func:`~dglx_dist.strategies.steps.seeded_batches`).

    Args:
        spec: the loader's (its ``pairs`` makes the batches).
        plan: its plan.
        epoch: the epoch.
        rank: this rank.
        timeout: seconds a call waits for a batch (never in practice: the worker draws only
            steps it was allowed).
    """

    def __init__(self, spec: LoaderSpec, plan: LoaderPlan, epoch: int, rank: int,
                 timeout: float):
        self.excludes = spec.pairs.excludes
        self._made = ((eids, batch) for eids, _, batch in seeded_batches(rank, plan, spec, epoch))
        self._fed: queue.SimpleQueue = queue.SimpleQueue()
        self._timeout = timeout

    def allow(self) -> None:
        """Makes the next step's batch (collective, on the calling thread); none after the
        last."""
        made = next(self._made, None)
        if made is not None:
            self._fed.put(made)

    def __call__(self, eids: torch.Tensor, seed: int | None = None) -> EdgeBatch:
        try:
            made, batch = self._fed.get(timeout=self._timeout)
        except queue.Empty:
            raise StateError(f"a loader's worker waited {self._timeout:.0f}s for a step's "
                             f"pairs") from None
        if not torch.equal(made, eids):  # the two threads walk the same steps
            raise StateError("a loader's worker drew a step other than the one its pairs "
                             "were made for")
        return batch


class Worker:
    """A thread that runs ``produce`` (each item a step under way) ``depth`` steps ahead of
    the caller (see the module docstring).

    Args:
        produce: the epoch's steps, drawn and their pulls started (runs on the thread).
        depth: steps the worker may be ahead of the caller (>= 1).
        rank: this rank (the thread's name).
        timeout: seconds the caller waits for a step beyond the worker's own timeouts.
        allow: called on the calling thread for each step the worker is allowed, before it
            may draw it (``depth`` times at the start; :meth:`FedPairs.allow`).
    """

    def __init__(self, produce: Iterator[UnderWay], depth: int, rank: int, timeout: float,
                 allow: Callable[[], None] | None = None):
        self._produce, self._rank, self._timeout = produce, rank, timeout
        self._allow = allow or (lambda: None)
        for _ in range(depth):
            self._allow()
        self._permits = threading.Semaphore(depth)
        self._stop = threading.Event()
        self._out: queue.SimpleQueue = queue.SimpleQueue()
        context = contextvars.copy_context()  # the session and graph are current there too
        self._thread = threading.Thread(target=context.run, args=(self._run,), daemon=True,
                                        name=f"dglx-loader-rank{rank}")
        self._thread.start()

    def _run(self) -> None:
        try:
            while self._permit():
                under = next(self._produce, _END)
                self._out.put(under)
                if under is _END:
                    return
        except BaseException as exc:  # noqa: BLE001  (the caller re-raises it at its step)
            self._out.put(exc)
            return
        self._out.put(_END)  # stopped

    def _permit(self) -> bool:
        """Waits until the caller has taken enough steps; False once it stopped and no step
        it allowed is left to draw."""
        while not self._permits.acquire(timeout=0.05):
            if self._stop.is_set():
                return False
        return True

    def __iter__(self) -> Iterator[UnderWay]:
        """The steps in order (each taken allows the worker one more)."""
        while True:
            item = self._get()
            if item is _END:
                self._thread.join(timeout=1.0)
                return
            if isinstance(item, BaseException):
                raise item
            self._allow()
            self._permits.release()
            yield item

    def _get(self) -> object:
        """The worker's next item (a step, an error, or the end); the end once the thread is
        gone without one (it put its error already, or was never allowed more)."""
        waited = 0.0
        while True:
            try:
                return self._out.get(timeout=0.5)
            except queue.Empty:
                waited += 0.5
            if not self._thread.is_alive() and self._out.empty():
                return _END
            if waited > self._timeout:
                raise StateError(f"rank {self._rank}: the loader's worker thread gave no "
                                 f"step in {waited:.0f}s")

    def stop(self) -> None:
        """Stops the worker after the step it is drawing, waiting for nothing (a peer
        failed: the daemon thread's collectives end with the session's groups)."""
        self._stop.set()

    def close(self, finish: Callable[[UnderWay], None]) -> None:
        """Stops the worker after the steps it was allowed (every rank's worker draws the
        same ones) and passes each step drawn but not taken to ``finish`` (which waits for
        its pulls); a failure met here is logged (the loop's own error, or the session's
        report of a peer's, is what the job ends with)."""
        self.stop()
        while True:
            try:
                item = self._get()
                if item is _END:
                    break
                if isinstance(item, BaseException):
                    raise item
                finish(item)
            except PeerError as exc:
                log.debug("rank %d: a loader's worker at its loop's end: %s", self._rank, exc)
                break
            except Exception as exc:  # noqa: BLE001  (the loop is ending already)
                log.warning("rank %d: a loader's worker at its loop's end: %s", self._rank, exc)
                break
        self._thread.join(timeout=1.0)
