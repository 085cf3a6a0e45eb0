"""Running a benchmark's processes: concurrently, each in its own process group, killed with
everything they started on timeout, and left-over processes found and reaped afterwards."""
from __future__ import annotations

import logging
import os
import subprocess
import time
from pathlib import Path

from dglx_dist.cluster.procs import kill_group

__all__ = ["reap_groups", "run_group"]

log = logging.getLogger("dglx_dist.bench")


def run_group(cmds: list[list[str]], env: dict[str, str], timeout: float,
              logs: list[Path | None]) -> tuple[list[subprocess.CompletedProcess], int]:
    """Runs commands concurrently, each in its own process group; kills the groups on timeout.

    Returns one CompletedProcess per command (stdout text where its log is None) and the
    number of processes found left over in those groups afterwards (and killed).
    """
    files = [open(lg, "w") if lg else None for lg in logs]
    procs = [subprocess.Popen(c, env=env, start_new_session=True, text=True,
                              stdout=f or subprocess.PIPE, stderr=f and subprocess.STDOUT)
             for c, f in zip(cmds, files)]
    deadline, outs = time.monotonic() + timeout, []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=max(deadline - time.monotonic(), 1))
            outs.append(subprocess.CompletedProcess(p.args, p.returncode, out or ""))
    except subprocess.TimeoutExpired:
        log.error("timed out after %.0fs; killing the process groups", timeout)
        for p in procs:
            kill_group(p)
        raise
    finally:
        left = reap_groups([p.pid for p in procs])
        for f in files:
            f and f.close()
    return outs, left


def reap_groups(pgids: list[int]) -> int:
    """Kills (and counts) the processes still left in the process groups we started."""
    import psutil

    left = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if os.getpgid(proc.pid) in pgids and proc.pid != os.getpid():
                left.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    for proc in left:
        log.warning("left-over process %d (%s); killing it", proc.pid,
                    " ".join(proc.info["cmdline"] or [])[:120])
        proc.kill()
    psutil.wait_procs(left, timeout=10)
    return len(left)
