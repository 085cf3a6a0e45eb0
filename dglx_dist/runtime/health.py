"""Naming the rank that failed.

Every rank runs a heartbeat thread that writes, every ``interval`` seconds, its wall time and
the sequence number of the collective it is in to the job's store; at start it also records its
host and pid. When a collective fails or times out, :meth:`Health.diagnose` names the culprits:
ranks on this host whose process is gone, ranks whose heartbeat went stale (dead or frozen
machine), and ranks still behind in the collective sequence (alive but stuck elsewhere). If the
store itself is gone, the rank hosting it (rank 0) is named.

A store whose host is frozen (SIGSTOP, a hung machine) does not refuse calls: it never answers
them. So every store call on the failure path (marking this rank failed or crashed, the
diagnosis) runs with its own deadline, ``store_timeout``, and a store that misses it counts as
gone: the survivor names rank 0 instead of waiting for ever.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time

import psutil

from dglx_dist.errors import DeadlineError

__all__ = ["Health", "call_within", "DDP_GROUP"]

# the pseudo-group of DDP's gradient all-reduces, which torch runs itself: each rank counts
# the one its next backward joins (strategies.base.ddp), so a rank that never reaches it is "behind"
DDP_GROUP = "ddp"
_SILENT = "sent no heartbeat"

log = logging.getLogger(__name__)
_PREFIX = "dglx/health/"


class Health:
    """Heartbeats of all ranks in a shared store, and the diagnosis of a failed collective.

    Args:
        store: the job's torch.distributed Store (keys go under ``dglx/health/``; PrefixStore
            lacks ``check`` in torch 2.2, so the prefix is applied here).
        rank: this process's rank.
        world_size: the job size.
        interval: seconds between heartbeats.
        store_timeout: seconds a store call on the failure path may take.
    """

    def __init__(self, store, rank: int, world_size: int, interval: float = 0.5,
                 store_timeout: float = 5.0):
        self._store, self.rank, self.world_size, self.interval = store, rank, world_size, interval
        self.store_timeout = store_timeout
        self._unanswered = False  # a call missed its deadline: later ones do not wait again
        self.op_seqs: dict[str, int] = {}  # per communicator: the collective this rank is in
        self._host = socket.gethostname()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _set(self, key: str, value: str) -> None:
        self._store.set(_PREFIX + key, value)

    def _get(self, key: str) -> str:
        return self._store.get(_PREFIX + key).decode()

    def _flag(self, key: str) -> None:
        self._store.add(_PREFIX + key, 1)

    def _has(self, key: str) -> bool:
        # Store.check is not exposed in torch 2.2; add(key, 0) reads a counter without blocking
        return self._store.add(_PREFIX + key, 0) > 0

    def start(self) -> None:
        self._set(f"who/{self.rank}", json.dumps({"host": self._host, "pid": _pid()}))
        self._beat()
        self._flag(f"joined/{self.rank}")
        self._thread = threading.Thread(target=self._run, name="dglx-heartbeat", daemon=True)
        self._thread.start()

    def mark(self, state: str) -> None:
        """Records that this rank saw a failure ("failed") or is leaving cleanly ("exit"), so
        that peers diagnosing later do not take its exit for the cause."""
        try:
            self._within(self._flag, f"{state}/{self.rank}")
        except (RuntimeError, TimeoutError):  # store gone or frozen: nothing to tell
            pass

    def record_crash(self, message: str) -> None:
        """Records that this rank is leaving because of an exception (peers name it, quoting
        ``message``)."""
        def record():
            self._set(f"crash_msg/{self.rank}", message[:500])
            self._flag(f"crashed/{self.rank}")

        try:
            self._within(record)
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
        launcher's SIGTERM, whose grace would add 30 s to the job's end. Returns those ranks."""
        ended = []
        try:
            siblings = psutil.Process(os.getppid()).children()
        except psutil.Error:
            return ended
        for proc in siblings:
            try:
                rank = int(proc.environ().get("RANK", "-1"))
                if proc.pid == os.getpid() or rank not in frozen:
                    continue
                for p in [*proc.children(recursive=True), proc]:
                    p.kill()
                ended.append(rank)
            except (psutil.Error, ValueError):
                continue
        if ended:
            log.warning("ended frozen rank(s) %s on this host (SIGKILL)", sorted(ended))
        return ended

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
        now = time.time()
        mine = self.op_seqs.get(group, 0)
        for r in members:
            if r == self.rank:
                continue
            if not self._has(f"joined/{r}"):
                found[r] = "never joined the job"
                continue
            if self._has(f"crashed/{r}"):
                found[r] = f"raised {self._get(f'crash_msg/{r}')}"
                continue
            failed, left = self._has(f"failed/{r}"), self._has(f"exit/{r}")
            if failed or left:  # a survivor that saw the failure too, or a clean exit: the
                seq = json.loads(self._get(f"beat/{r}"))[1].get(group, 0)  # cause only if
                if seq < mine:  # it never reached this collective (its loop ended early)
                    (behind if failed else found)[r] = (
                        f"{'failed in' if failed else 'left the job from'} another collective "
                        f"at {group} collective #{seq}, while this rank is at #{mine} (did "
                        f"its loop end early?)")
                continue
            who = json.loads(self._get(f"who/{r}"))
            if who["host"] == self._host and not _alive(who["pid"]):
                if self._has(f"failed/{r}") or self._has(f"exit/{r}"):
                    continue  # it marked itself between the two checks
                found[r] = f"exited (pid {who['pid']} is gone)"
                continue
            stamp, seqs = json.loads(self._get(f"beat/{r}"))
            seq = seqs.get(group, 0)
            if now - stamp > 3 * self.interval:
                found[r] = f"{_SILENT} for {now - stamp:.1f}s"
            elif seq < mine:
                behind[r] = f"has not reached {group} collective #{mine} (it is at #{seq})"
        return found, behind


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


def _pid() -> int:
    return psutil.Process().pid


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
