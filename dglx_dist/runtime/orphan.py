"""A rank whose launcher is gone exits, with what it started (docs/reliability.md, "When the
launcher dies").

:class:`LauncherWatch`'s daemon thread compares the parent pid with the one at start-up; when
it changed, it logs one line, stops this process's own children (executor workers) and ends
the process at once, leaving the job's store (which may have lived in the dead agent) and
process groups alone.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading

import psutil

__all__ = ["LauncherWatch", "EXIT_ORPHANED"]

EXIT_ORPHANED = 129  # 128 + SIGHUP: what a terminal's death would have given


class LauncherWatch:
    """Watches this process's parent (started at construction; :meth:`stop` ends it).

    Args:
        rank: this rank, for the message.
        interval: seconds between checks.
    """

    def __init__(self, rank: int, interval: float = 0.5):
        self.rank, self.interval = rank, interval
        self._parent = os.getppid()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dglx-launcher-watch",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if os.getppid() != self._parent:
                self._orphaned()
                return

    def _orphaned(self) -> None:
        sys.stderr.write(f"dglx_dist: rank {self.rank}: its launcher (pid {self._parent}) is "
                         f"gone; exiting and stopping its workers\n")
        sys.stderr.flush()
        children = psutil.Process().children(recursive=True)
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.terminate()
        _, alive = psutil.wait_procs(children, timeout=2.0)
        for child in alive:
            with contextlib.suppress(psutil.Error):
                child.kill()
        os._exit(EXIT_ORPHANED)

    def stop(self) -> None:
        self._stop.set()
