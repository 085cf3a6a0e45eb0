"""Naming the rank that failed.

Every rank runs a heartbeat thread that writes, every ``interval`` seconds, its wall time and
the sequence number of the collective it is in to the job's store; at start it also records its
host and pid. When a collective fails or times out, :meth:`Health.diagnose` names the culprits:
ranks on this host whose process is gone, ranks whose heartbeat went stale (dead or frozen
machine), and ranks still behind in the collective sequence (alive but stuck elsewhere). If the
store itself is gone, the rank hosting it (rank 0) is named.

Every store call on the failure path has its own deadline, ``store_timeout``: a store that
misses it counts as gone (a frozen host never answers; docs/reliability.md).
"""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
import time

import psutil

from dglx_dist.errors import DeadlineError

__all__ = ["Health", "call_within", "DDP_GROUP"]

# the pseudo-group of DDP's gradient all-reduces, which torch runs itself: each rank counts
# the one its next backward joins (strategies.base.ddp), so a rank that never reaches it is "behind"
DDP_GROUP = "ddp"
_SILENT = "sent no heartbeat"
REPORT_S = 5.0  # how long a rank that ended a frozen sibling runs on after a SIGTERM

log = logging.getLogger(__name__)
_PREFIX = "dglx/health/"
_ABSENT = "\x00absent"  # what _read's compare-and-set expects: no value is ever this


class Health:
    """Heartbeats of all ranks in a shared store, and the diagnosis of a failed collective.

    Args:
        store: the job's torch.distributed Store (keys go under ``dglx/health/``; PrefixStore
            lacks ``check`` in torch 2.2, so the prefix is applied here).
        rank: this process's rank.
        world_size: the job size.
        interval: seconds between heartbeats.
        store_timeout: seconds a store call on the failure path may take.
        prefix: where its keys go in ``store`` (a loader's sampler processes keep their
            heartbeats apart from their ranks').
    """

    def __init__(self, store, rank: int, world_size: int, interval: float = 0.5,
                 store_timeout: float = 5.0, prefix: str = _PREFIX):
        self._store, self.rank, self.world_size, self.interval = store, rank, world_size, interval
        self._prefix = prefix
        self.store_timeout = store_timeout
        self._unanswered = False  # a call missed its deadline: later ones do not wait again
        self.op_seqs: dict[str, int] = {}  # per communicator: the collective this rank is in
        self._host = socket.gethostname()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _set(self, key: str, value: str) -> None:
        self._store.set(self._prefix + key, value)

    def _read(self, key: str) -> str | None:
        """The value of ``key``, None when there is none, without waiting for it (Store.check
        is not exposed in torch 2.2, and get() waits for an absent key: a compare-and-set that
        never matches reads it instead). Any client of the store may have written it."""
        value = self._store.compare_set(self._prefix + key, _ABSENT, _ABSENT)
        return None if value == _ABSENT.encode() else value.decode(errors="replace")

    def _flag(self, key: str) -> None:
        self._set(key, "1")  # set, not add: add() on a value another client wrote breaks

    def _has(self, key: str) -> bool:
        return self._read(key) is not None

    def start(self) -> None:
        self._set(f"who/{self.rank}", json.dumps({"host": self._host, "pid": os.getpid()}))
        self._beat()
        self._flag(f"joined/{self.rank}")
        self._thread = threading.Thread(target=self._run, name="dglx-heartbeat", daemon=True)
        self._thread.start()

    def mark(self, state: str) -> None:
        """Records that this rank saw a failure ("failed") or is leaving cleanly ("exit"), so
        that peers diagnosing later do not take its exit for the cause."""
        self._tell(self._flag, f"{state}/{self.rank}")

    def record_crash(self, message: str, terminated: bool = False) -> None:
        """Records that this rank is leaving because of an exception (peers name it, quoting
        ``message``); ``terminated``: the exception is a SIGTERM's (the launcher ending the
        job, or one rank of it: no crash a peer outlives its own SIGTERM to name)."""
        def record():
            if terminated:  # before the crash flag: no reader sees one without the other
                self._flag(f"terminated/{self.rank}")
            self._set(f"crash_msg/{self.rank}", message[:500])
            self._flag(f"crashed/{self.rank}")

        self._tell(record)

    def peer_crashed(self, seconds: float = 1.0) -> bool:
        """Whether another rank recorded a crash (:meth:`record_crash`) other than a SIGTERM's;
        False when the store does not answer within ``seconds``."""
        def crashed(r: int) -> bool:
            return self._has(f"crashed/{r}") and not self._has(f"terminated/{r}")

        def any_crashed():
            return any(crashed(r) for r in range(self.world_size) if r != self.rank)

        try:
            return bool(call_within(seconds, any_crashed))
        except (RuntimeError, TimeoutError):  # store gone or frozen
            return False

    def _tell(self, fn, *args) -> None:
        try:
            self._within(fn, *args)
        except (RuntimeError, TimeoutError):  # store gone or frozen: nothing to tell
            pass

    def _within(self, fn, *args):
        """``fn(*args)``, or TimeoutError when the store has not answered in
        ``store_timeout`` seconds (the call is left behind in a daemon thread)."""
        if self._unanswered:
            raise DeadlineError("the store did not answer an earlier call")
        try:
            return call_within(self.store_timeout, fn, *args)
        except TimeoutError:
            self._unanswered = True
            raise DeadlineError(f"the store did not answer within {self.store_timeout:.0f}s") \
                from None

    def end_frozen(self, frozen: set[int]) -> list[int]:
        """Ends (SIGKILL, with their children) the processes of the ``frozen`` ranks that
        run beside this one under the same launcher: a stopped process cannot take the
        launcher's SIGTERM, whose grace would add 30 s to the job's end. A SIGTERM of this
        rank then waits a little (:func:`_report_before_sigterm`). Returns those ranks."""
        ended = []
        for rank, proc in _siblings(frozen):
            try:
                for p in [*proc.children(recursive=True), proc]:
                    p.kill()
                ended.append(rank)
            except psutil.Error:
                continue
        if ended:
            log.warning("ended frozen rank(s) %s on this host (SIGKILL)", sorted(ended))
            _report_before_sigterm()
        return ended

    def outlast(self, ranks: list[int], limit: float) -> None:
        """Waits (at most ``limit`` seconds) until the processes of those of ``ranks`` that
        crashed and run beside this one under the same launcher have ended: the launcher names
        as the root cause only processes it has seen fail, so the rank reporting a peer's crash
        leaves after it (one stuck but alive is stopped by the launcher, not waited for)."""
        try:
            crashed = {r for r in ranks if self._within(self._has, f"crashed/{r}")}
        except (RuntimeError, TimeoutError):  # store gone or frozen
            return
        procs = [proc for _, proc in _siblings(crashed)]
        deadline = time.monotonic() + limit
        while any(_alive(p.pid) for p in procs) and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.interval + 1)
            self._thread = None

    def _beat(self) -> None:
        self._set(f"beat/{self.rank}", json.dumps([time.time(), dict(self.op_seqs)]))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._beat()
            except RuntimeError:  # the store's host is gone; diagnose() reports it
                return

    def diagnose(self, group: str, members: list[int],
                 settle: float | None = None) -> tuple[list[int], str, set[int]]:
        """Members of ``group`` that look failed, why, and which of them look frozen (for
        :meth:`end_frozen`).

        Waits up to ``settle`` seconds (default four heartbeats) for evidence to appear.
        """
        settle = 4 * self.interval if settle is None else settle
        start = time.monotonic()
        while True:
            try:
                hard, behind = self._within(self._suspects, group, members)
            except (RuntimeError, TimeoutError) as exc:  # the store's host is gone or frozen
                return [0], f"the job's store (hosted by rank 0) is unreachable ({exc})", {0}
            waited = time.monotonic() - start
            # "behind" needs fresh heartbeats (> 2 intervals) before it counts as evidence
            found = hard or (behind if waited > 2 * self.interval else {})
            if found or waited >= settle:
                frozen = {r for r, why in found.items() if why.startswith(_SILENT)}
                return sorted(found), "; ".join(f"rank {r} {why}"
                                                for r, why in sorted(found.items())), frozen
            time.sleep(self.interval / 2)

    def _suspects(self, group: str, members: list[int]) -> tuple[dict[int, str], dict[int, str]]:
        """(hard evidence: exited / never joined / silent, soft evidence: behind in ``group``)."""
        found: dict[int, str] = {}
        behind: dict[int, str] = {}
        for r in members:
            if r == self.rank:
                continue
            why, late = self._evidence(r, group)
            if why is not None:
                (behind if late else found)[r] = why
        return found, behind

    def _evidence(self, r: int, group: str) -> tuple[str | None, bool]:
        """What rank ``r``'s entries say (None: nothing against it), and whether that is only
        soft evidence (behind in ``group``). Entries that are not what a rank writes (another
        client of the store wrote them) are named as such, never parsed into a traceback."""
        if not self._has(f"joined/{r}"):
            return "never joined the job", False
        if self._has(f"crashed/{r}"):
            return f"raised {self._read(f'crash_msg/{r}') or '(no message recorded)'}", False
        beat, who, mine = _beat(self._read(f"beat/{r}")), _who(self._read(f"who/{r}")), \
            self.op_seqs.get(group, 0)
        if beat is None or who is None:
            return (f"has entries in the job's store that no rank wrote (dglx/health/beat/{r} "
                    f"or who/{r} malformed: another client of the store wrote them?)"), False
        stamp, seqs = beat
        seq = seqs.get(group, 0)
        failed, left = self._has(f"failed/{r}"), self._has(f"exit/{r}")
        if failed or left:  # a survivor that saw the failure too, or a clean exit: the cause
            if seq >= mine:  # only if it never reached this collective (its loop ended early)
                return None, False
            return (f"{'failed in' if failed else 'left the job from'} another collective at "
                    f"{group} collective #{seq}, while this rank is at #{mine} (did its loop "
                    f"end early?)"), failed
        if who["host"] == self._host and not _alive(who["pid"]):
            if self._has(f"failed/{r}") or self._has(f"exit/{r}"):
                return None, False  # it marked itself between the two checks
            return f"exited (pid {who['pid']} is gone)", False
        age = time.time() - stamp
        if age > 3 * self.interval:
            return f"{_SILENT} for {age:.1f}s", False
        if seq < mine:
            return f"has not reached {group} collective #{mine} (it is at #{seq})", True
        return None, False


def _beat(raw: str | None) -> tuple[float, dict[str, int]] | None:
    """A heartbeat entry ``[wall time, {group: seq}]``, None when it is not one."""
    try:
        stamp, seqs = json.loads(raw)
        return float(stamp), {str(k): int(v) for k, v in seqs.items()}
    except (TypeError, ValueError, AttributeError):
        return None


def _who(raw: str | None) -> dict | None:
    """A ``{"host": str, "pid": int}`` entry, None when it is not one."""
    try:
        who = json.loads(raw)
        return {"host": str(who["host"]), "pid": int(who["pid"])}
    except (TypeError, ValueError, KeyError):
        return None


def call_within(seconds: float, fn, *args):
    """``fn(*args)`` run on a daemon thread; TimeoutError when it has not returned within
    ``seconds`` (the call is left behind: for peers that never answer, such as a frozen
    store host)."""
    outcome: dict = {}

    def call():
        try:
            outcome["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001  (re-raised in the caller)
            outcome["error"] = exc

    thread = threading.Thread(target=call, name="dglx-call-within", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise DeadlineError(f"no answer within {seconds:g}s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def _report_before_sigterm() -> None:
    """A SIGTERM from now on ends this process :data:`REPORT_S` seconds later, not at once.
    A rank that ended a frozen sibling is on its way out with the error naming it, and its
    launcher, seeing the sibling die, may stop it before it printed that line (torch 2.2's
    torchrun looks every 5 s by default, newer torch's and the package's launches every 0.1 s,
    and the line comes 0.1-0.2 s after the kill: it went missing in 1 of 8 jobs at 5 s, and
    in every job at 0.1 s). Only the main thread sets signal handlers; elsewhere nothing
    changes."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: exit_later(signum))


def exit_later(signum: int) -> None:
    """Ends the process :data:`REPORT_S` seconds from now with the status of ``signum``,
    whatever its main thread is doing then (a SIGTERM this rank outlives to report)."""
    timer = threading.Timer(REPORT_S, exit_now, (128 + signum,))
    timer.daemon = True
    timer.start()


def exit_now(code: int) -> None:
    """Ends the process at once with ``code``, its output flushed (a SIGTERM while it is
    already exiting, or one :func:`_report_before_sigterm` delays)."""
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(code)


def _siblings(ranks: set[int]) -> list[tuple[int, psutil.Process]]:
    """(rank, process) of the other ranks in ``ranks`` started by this process's launcher."""
    try:
        siblings = psutil.Process(os.getppid()).children()
    except psutil.Error:
        return []
    found = []
    for proc in siblings:
        try:
            rank = int(proc.environ().get("RANK", "-1"))
        except (psutil.Error, ValueError):
            continue
        if proc.pid != os.getpid() and rank in ranks:
            found.append((rank, proc))
    return found


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
