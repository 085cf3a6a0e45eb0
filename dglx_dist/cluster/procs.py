"""Process groups: a command started with ``start_new_session=True`` leads a process group
that holds everything it starts (torchrun's agent and its ranks, a rank's executor workers),
and :func:`kill_group` ends all of them at once. Used by the emulated cluster's nodes, the
benchmark's runs (:mod:`dglx_dist.bench.procs`) and ``benchmarks/chaos.py``'s jobs."""
from __future__ import annotations

import os
import signal
import subprocess

__all__ = ["kill_group"]


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILLs the process group ``proc`` leads (started with ``start_new_session=True``),
    then reaps ``proc``.

    Also when ``proc`` itself has exited but is not reaped yet: what it started may still run
    in its group. Once ``proc`` is reaped (``returncode`` set) nothing is sent: its pid, and
    with it the group's id, may be another process's by then.
    """
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # the group is empty: everything in it has exited
            pass
    proc.wait()
