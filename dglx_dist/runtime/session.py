"""The session: environment, topology, process groups and communicators of one process.

``dglx_dist.init()`` builds it from the launch environment and makes it the current session
(a contextvar, not a global); ``session.shutdown()`` (or leaving the ``with`` block) stops the
heartbeat and destroys the process groups, so nothing stays bound after a run. A rank whose
launcher dies exits within a second, with its workers (:mod:`dglx_dist.runtime.orphan`). A session
nobody shut down is shut down at interpreter exit (an ``atexit`` handler; SIGTERM exits
through it too), with the uncaught exception the script died of, if any, so that peers name
it; the order is the one that avoids gloo's teardown crash (see :meth:`Session.shutdown`).
One concept at some 440 lines: a session's life, from meeting the peers to its last close.
"""
from __future__ import annotations

import atexit
import contextlib
import contextvars
import datetime
import logging
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist

from dglx_dist.errors import DglxError, InvalidValueError, StateError
from dglx_dist.runtime.allocator import configure_malloc
from dglx_dist.runtime.comm import ByteCounter, Comm, PeerError
from dglx_dist.runtime.device import (Placement, choose_placement, group_backend, mixed_devices,
                                      nccl_environment)
from dglx_dist.runtime.env import DistEnv, EnvError, read_env
from dglx_dist.runtime.failure import (LATER_S, has_left, mark_in_session, one_line, report,
                                      reporting_rank, same_on_every_rank, step_aside,
                                      tell_launcher)
from dglx_dist.runtime.health import DDP_GROUP, Health, exit_later, exit_now
from dglx_dist.runtime.orphan import LauncherWatch
from dglx_dist.runtime.topology import Topology

__all__ = ["Session", "init", "current_session", "exit_on_sigterm", "placement"]

log = logging.getLogger(__name__)
_CURRENT: contextvars.ContextVar["Session | None"] = contextvars.ContextVar(
    "dglx_dist_session", default=None)



def _by_sigterm(error: BaseException) -> bool:
    """Whether ``error`` is how a SIGTERM ends a rank (:func:`exit_on_sigterm`):
    ``SystemExit(128 + SIGTERM)``."""
    return isinstance(error, SystemExit) and error.code == 128 + signal.SIGTERM


def exit_on_sigterm(signum: int, frame=None) -> None:
    """SIGTERM, the job ending (a launcher sends it to every rank): the current session, if
    any, is marked as ending early (:attr:`Session.ended_early`: its closers skip the barriers
    peers that are ending too would not join), then ``sys.exit(128 + signum)`` unwinds the
    main thread and the atexit handler runs. The handler a session installs, and the CLI's.

    After a peer recorded a crash (not a SIGTERM of its own), the launcher sent it because
    that peer ended, and this rank is on its way to the line naming it (its collective with
    that peer fails at once): it goes on, for at most ``health.REPORT_S`` seconds. A launcher
    that looks often (torchrun's ``--monitor-interval`` is 0.1 s in newer torch) would stop
    it before that line."""
    session = _CURRENT.get()
    if session is not None and session.is_open and session.health.peer_crashed():
        log.debug("rank %d: SIGTERM after a peer's crash; reporting it first", session.rank)
        exit_later(signum)
        return
    if session is not None:
        session.ended_early = f"signal {signum}"
    sys.exit(128 + signum)


class Session:
    """One process's view of the job. Build it with :func:`init`.

    Attributes:
        env: the launch environment.
        topology: servers x local ranks.
        backend: "gloo" or "nccl": the backend of the device collectives (host traffic is
            always gloo's; :mod:`dglx_dist.runtime.device`).
        device: this rank's torch device: the model, blocks, features and labels live on it
            (the graph structure, the KVStore and sampling stay in host memory).
        counter: bytes sent/received through any of the communicators.
        world / server / cross: communicators over all ranks, this rank's server, and the
            ranks with this rank's local index on every server.
    """

    def __init__(self, env: DistEnv, placement: Placement, store, heartbeat: float = 0.5,
                 adopt: bool = False):
        self.env, self.backend, self.device = env, placement.backend, placement.device
        self.rank, self.world_size = env.rank, env.world_size
        self.topology = Topology(env.num_servers, env.ranks_per_server)
        if placement.on_gpu:
            torch.cuda.set_device(self.device)
        configure_malloc(env.malloc)
        timeout = datetime.timedelta(seconds=env.timeout)
        self._pg_backend = group_backend(self.backend)
        self._native = ("cpu", "cuda") if self.backend == "nccl" else ("cpu",)
        if not adopt:
            if self.backend == "nccl":
                os.environ.update(nccl_environment(os.environ, env.timeout))
            dist.init_process_group(self._pg_backend, store=dist.PrefixStore("pg", store),
                                    rank=env.rank, world_size=env.world_size, timeout=timeout)
        self.health = Health(store, env.rank, env.world_size, interval=heartbeat,
                             store_timeout=min(10.0, env.timeout / 2))
        self.counter = ByteCounter()
        self._store = store
        self._reported = False  # this rank printed the failure it leaves with (shutdown says so)
        self.ended_early: str | None = None
        """Why the job is ending before its work is done (a signal: :func:`exit_on_sigterm`):
        then the closers skip the barriers that would wait for peers that are ending too."""
        self._named: list[int] = []  # the failed peers it named (it leaves after them)
        self._closers: list[Callable[[], None]] = []
        topo = self.topology
        # a script's own default group without gloo (plain NCCL) cannot carry host tensors
        world_group = (None if dist.get_backend() == self._pg_backend else
                       dist.new_group(list(range(env.world_size)), timeout=timeout,
                                      backend=self._pg_backend))
        self.world = Comm("world", world_group, list(range(env.world_size)), self.rank, topo,
                          self.counter, self.health, env.timeout, native=self._native)
        self._comms = [self.world]
        self.server = self.new_server_comm("server")
        self.cross = self.new_cross_comm("cross")
        self.health.start()
        self._launcher = LauncherWatch(self.rank)  # the agent SIGKILLed: exit, not linger
        self._token: contextvars.Token | None = _CURRENT.set(self)
        self._install_exit_handlers()
        log.debug("rank %d/%d up: server %d of %d, local %d, backend %s, device %s", self.rank,
                  self.world_size, self.server_id, topo.num_servers, self.local_rank,
                  self.backend, self.device)

    def check_devices(self) -> None:
        """Refuses a job whose ranks compute on different kinds of device (collective; every
        rank raises the same one line, rank 0 reports it)."""
        mine = torch.tensor([1 if self.device.type == "cuda" else 0,
                             -1 if self.device.index is None else self.device.index])
        names = [("cuda:%d" % int(t[1])) if int(t[0]) else "cpu"
                 for t in self.world.all_gather(mine, count=False)]
        problem = mixed_devices(names)
        if problem is not None:
            raise same_on_every_rank(InvalidValueError(problem))

    @property
    def server_id(self) -> int:
        return self.topology.server_of(self.rank)

    @property
    def local_rank(self) -> int:
        """Index of this rank within its (possibly virtual) server."""
        return self.topology.local_rank_of(self.rank)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def new_world_comm(self, name: str) -> Comm:
        """A communicator over every rank on a process group of its own (collective: every
        rank creates its groups in the same order), for collectives that run while other
        exchanges are under way on ``world`` (their order on each group stays the same on
        every rank)."""
        return self._new_comm(name, lambda _: list(range(self.world_size)), 1, 0)

    def new_server_comm(self, name: str) -> Comm:
        """A communicator over the ranks of this rank's server on process groups of its own
        (collective, as :meth:`new_world_comm`)."""
        topo = self.topology
        return self._new_comm(name, topo.server_ranks, topo.num_servers,
                              topo.server_of(self.rank))

    def new_cross_comm(self, name: str) -> Comm:
        """A communicator over this rank's ``cross`` ranks (the ranks with its local index on
        every server) on process groups of its own (collective, as :meth:`new_world_comm`):
        its exchanges do not queue behind another communicator's bytes on the same links
        (e.g. the sampler's requests behind the KVStore's rows under way)."""
        topo = self.topology
        return self._new_comm(name, topo.cross_ranks, topo.ranks_per_server,
                              topo.local_rank_of(self.rank))

    def twin(self, comm: Comm, name: str) -> Comm:
        """A communicator with ``comm``'s members on process groups of its own (collective,
        as :meth:`new_world_comm`): a loader's worker thread runs its exchanges there, so
        they never interleave with those the calling thread runs on ``comm``."""
        try:
            family = self.topology.family(comm.members)
        except InvalidValueError:
            raise InvalidValueError(f"no twin of communicator {comm.name!r} (ranks "
                                    f"{list(comm.members)}): only the world, server and cross "
                                    "groups have one") from None
        return self._new_comm(name, family.__getitem__, len(family),
                              family.index(list(comm.members)))

    def _new_comm(self, name: str, ranks_of: Callable[[int], list[int]], count: int,
                  mine: int) -> Comm:
        """A communicator over ``ranks_of(mine)``: one new process group per ``ranks_of(i)``,
        ``i < count``, created by every rank in the same order (collective); one of the
        communicators whose first failure is the session's :attr:`failure`."""
        timeout = datetime.timedelta(seconds=self.env.timeout)
        with self.peer_errors(f"creating the {name} process groups"):  # a peer gone: named
            groups = [dist.new_group(ranks_of(i), timeout=timeout, backend=self._pg_backend)
                      for i in range(count)]
        comm = Comm(name, groups[mine], ranks_of(mine), self.rank, self.topology, self.counter,
                    self.health, self.env.timeout, native=self._native)
        self._comms.append(comm)
        return comm

    @property
    def store(self):
        """The torch.distributed store the ranks met in (None once the session is shut
        down): a loader's sampler processes meet there too."""
        return self._store

    @property
    def is_open(self) -> bool:
        """Whether the session is up: not shut down yet (at exit, or by :meth:`shutdown`)."""
        return self._store is not None

    @property
    def failure(self) -> PeerError | None:
        """The first failure of any of this session's communicators, None while the job is
        healthy: a job that failed on one group does not wait out a timeout on another."""
        return next((c.failure for c in self._comms if c.failure is not None), None)

    @contextlib.contextmanager
    def peer_errors(self, op: str) -> Iterator[None]:
        """Turns a collective's raw failure inside torch (DDP's own calls, autograd's
        all-reduces) into the comm layer's error naming the failed rank."""
        try:
            yield
        except RuntimeError as exc:
            failure = self.world.peer_failure(op, exc)
            if failure is None:
                raise
            raise failure from exc

    def add_closer(self, fn: Callable[[], None]) -> None:
        """Runs ``fn`` at a clean :meth:`shutdown`, after the last barrier and before the
        process groups go (e.g. a KVStore's serving thread, when nobody closed the store)."""
        self._closers.append(fn)

    def remove_closer(self, fn: Callable[[], None]) -> None:
        """Forgets a closer added with :meth:`add_closer` (it ran already or is not needed)."""
        if fn in self._closers:
            self._closers.remove(fn)

    def all_reduce_by_server(self, flat: torch.Tensor) -> torch.Tensor:
        """The sum of the 1-D ``flat`` over every rank, crossing servers once: reduce-scatter
        within the server, all-reduce of each rank's chunk with the same chunk on the other
        servers, all-gather within the server (collective; returns a new tensor)."""
        n, size = flat.numel(), self.server.size
        chunk = torch.nn.functional.pad(flat, (0, (-n) % size))
        if size > 1:
            chunk = self.server.reduce_scatter(chunk)
        if self.cross.size > 1:
            self.cross.all_reduce(chunk)
        total = torch.cat(self.server.all_gather(chunk)) if size > 1 else chunk
        return total[:n]

    def _install_exit_handlers(self) -> None:
        """Shut down at exit if nobody did; remember an uncaught exception for the peers."""
        self._exit_error: BaseException | None = None
        self._previous_hook = sys.excepthook

        def excepthook(tp, value, tb):
            self._exit_error = value
            if isinstance(value, KeyboardInterrupt):  # Ctrl-C reaches every rank: one line
                tell_launcher(self.env.error_file, "interrupted (SIGINT)")
                if self.rank == 0:
                    sys.stderr.write("dglx_dist: interrupted (SIGINT)\n")
                return
            # a collective torch ran itself (DDP's all-reduce in the user's backward) that a
            # dead or frozen peer broke: the comm layer's error naming that peer instead
            from_backend = any(b in str(value).lower() for b in ("gloo", "nccl"))
            failure = self.world.peer_failure("DDP's gradient all-reduce", value, DDP_GROUP) \
                if self._store is not None and from_backend else None
            if failure is not None:
                value, tp, tb = failure, type(failure), None
            elif not isinstance(value, DglxError):  # the script's own bug: its traceback,
                tell_launcher(self.env.error_file, one_line(value))  # torchrun's root cause
                self._previous_hook(tp, value, tb)
                return
            # one line from one rank, not a traceback per rank (runtime.failure)
            mark_in_session(value)
            log.debug("rank %d: uncaught", self.rank, exc_info=(tp, value, tb))
            line = report(value, self.rank, self.world_size, self.env.error_file,
                          prefix=f"dglx_dist error on rank {self.rank}: ")
            self._reported = line is not None
            if line is not None:
                sys.stderr.write(line + "\n")
                self._named = value.ranks if isinstance(value, PeerError) else []
            else:
                step_aside(self._store, reporting_rank(value, self.rank, self.world_size))

        sys.excepthook = self._excepthook = excepthook
        atexit.register(self._at_exit)
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, exit_on_sigterm)  # unwinds: the atexit handler runs

    def _at_exit(self) -> None:
        if self._store is not None:
            if signal.getsignal(signal.SIGTERM) is exit_on_sigterm:  # a launcher's SIGTERM
                # now must not raise here ("Exception ignored in atexit callback" + traceback)
                signal.signal(signal.SIGTERM, lambda signum, _: exit_now(128 + signum))
            self.shutdown(self._exit_error)

    def shutdown(self, error: BaseException | None = None) -> None:
        """Stops the heartbeat and destroys the process groups (idempotent).

        Args:
            error: the exception this rank is leaving with, if any; peers whose collectives
                fail because of it will name this rank and quote it.
        """
        if self._store is not None:
            if error is None:
                if self._quiesce():
                    self._run_closers()
                self.health.mark("exit")
            else:
                mark_in_session(error)
                self.health.record_crash(f"{type(error).__name__}: {error}",
                                         terminated=_by_sigterm(error))
        self.health.stop()
        self._launcher.stop()
        if dist.is_initialized():
            # torch 2.2 + gloo: destroy_process_group holds the GIL while joining gloo's worker
            # threads, and a worker dropping a finished collective's Python-owned tensors needs
            # the GIL (gdb: ~AsyncWork -> ~TensorImpl -> maybe_destroy_pyobj -> take_gil). The
            # barrier above drains the collectives; a short GIL-free pause lets the workers
            # finish freeing them first.
            time.sleep(0.1)
            dist.destroy_process_group()
        if self._named:  # torchrun's root cause is a failed process it has seen end
            self.health.outlast(self._named, LATER_S)
        if self._reported and self._store is not None:
            has_left(self._store, self.rank)  # the ranks stepping aside may leave now
        self._store = None
        atexit.unregister(self._at_exit)
        if sys.excepthook is self._excepthook:
            sys.excepthook = self._previous_hook
        if self._token is not None:
            try:
                _CURRENT.reset(self._token)
            except ValueError:  # reset from another context: clear instead
                _CURRENT.set(None)
            self._token = None

    def _run_closers(self) -> None:
        closers, self._closers = self._closers, []
        for fn in reversed(closers):
            try:
                fn()
            except Exception as exc:  # noqa: BLE001  (shutdown goes on; the cause is logged)
                log.warning("rank %d: a closer failed at shutdown: %s", self.rank, exc)

    def _quiesce(self) -> bool:
        """A last barrier of the healthy job, so that no rank tears its groups down while a
        peer is still finishing its last collective (see the teardown note in shutdown);
        False when the job is not healthy."""
        if self.failure is not None:
            return False
        try:
            self.world.barrier()
        except PeerError as exc:
            if exc.ranks:  # they are still at work: this rank is the one that left early
                log.warning("rank %d: this rank ended while rank(s) %s had not (they never "
                            "reached its final barrier: did this rank's loop end early?); "
                            "tearing down anyway", self.rank, exc.ranks)
            else:
                log.warning("rank %d: final barrier failed (%s); tearing down anyway",
                            self.rank, exc)
            return False
        return True

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.shutdown(exc)


def init(backend: str | None = None, env: DistEnv | None = None, store=None,
         heartbeat: float = 0.5, device: str | None = None) -> Session:
    """Starts this process's part of the job and makes the session current.

    Args:
        backend: "gloo" or "nccl", the backend of the device collectives; default NCCL when
            the device is a GPU (``DGLX_BACKEND`` overrides the default).
        env: the launch environment; default :func:`~dglx_dist.runtime.env.read_env`.
        store: a torch.distributed Store to meet in; default a TCPStore at the environment's
            master address (hosted by rank 0, or by torchrun's agent when it provides one).
        heartbeat: seconds between health heartbeats.
        device: "auto" (default: the rank's GPU when CUDA is available), "cpu", "cuda" or
            "cuda:N" (``DGLX_DEVICE`` overrides the default; :mod:`dglx_dist.runtime.device`).

    Raises:
        InvalidValueError: a device or backend this machine cannot give (before any process
            group), or ranks on different kinds of device (once the groups are up).
    """
    if _CURRENT.get() is not None:
        raise StateError("a dglx_dist session is already running in this process; call "
                         "shutdown() on it first")
    env = env or read_env()
    if dist.is_initialized():  # the script's own init_process_group (a DistDGL script)
        return _adopt(env, heartbeat, device)
    chosen = placement(env, backend or env.backend, device)
    if store is None:
        store = _meet(env)
    return _checked(Session(env, chosen, store, heartbeat))


def _meet(env: DistEnv):
    """The job's TCPStore at the launch's master address, once every rank has met there.

    Raises:
        EnvError: the ranks did not meet within ``DGLX_TIMEOUT`` (a WORLD_SIZE larger than
            the ranks started, ranks given other addresses), or the address cannot be used.
    """
    url = f"tcp://{env.master_addr}:{env.master_port}"
    try:
        store, _, _ = next(dist.rendezvous(url, env.rank, env.world_size,
                                           timeout=datetime.timedelta(seconds=env.timeout)))
    except RuntimeError as exc:  # torch's DistStoreError, DistNetworkError: a raw traceback
        why = " ".join(str(exc).split())
        error = EnvError(f"rank {env.rank} of {env.world_size}: the ranks did not meet at "
                         f"{env.master_addr}:{env.master_port} ({why}); start all "
                         f"{env.world_size} ranks (WORLD_SIZE) with the same MASTER_ADDR and "
                         f"MASTER_PORT (torchrun does)")
        mark_in_session(error)  # this rank's own view: each rank says what it saw
        raise error from None
    return store


def placement(env: DistEnv, backend: str | None, device: str | None) -> Placement:
    """The device and backend :func:`init` gives this rank of ``env`` for ``backend`` and
    ``device`` (each None: ``DGLX_BACKEND``/``DGLX_DEVICE``, else the default), before any
    process group (``dglx train`` refuses with it what cannot run on that device)."""
    cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return choose_placement(env.rank, env.local_rank, env.local_world_size, backend,
                            device or env.device, cuda_count)


def _checked(session: Session) -> Session:
    try:
        session.check_devices()
    except DglxError as exc:
        session.shutdown(exc)
        raise
    return session


def _adopt(env: DistEnv, heartbeat: float, device: str | None) -> Session:
    """A session on the default process group the script initialised itself (its backend is
    the device collectives'; the device as :func:`init` chooses it)."""
    if dist.get_world_size() != env.world_size or dist.get_rank() != env.rank:
        raise StateError(f"the process group the script initialised has rank "
                         f"{dist.get_rank()} of {dist.get_world_size()}; the launcher says "
                         f"{env.rank} of {env.world_size}")
    store = dist.distributed_c10d._get_default_store()
    backend = "nccl" if "nccl" in dist.get_backend() else "gloo"
    log.debug("adopting the default process group (%s)", dist.get_backend())
    return _checked(Session(env, placement(env, backend, device), store, heartbeat, adopt=True))


def current_session() -> Session:
    """The session :func:`init` made current in this context."""
    session = _CURRENT.get()
    if session is None:
        raise StateError("no dglx_dist session: call dglx_dist.init() first")
    return session
