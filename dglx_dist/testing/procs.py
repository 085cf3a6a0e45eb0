"""Child-process checks for tests: nothing may be left running after a run."""
from __future__ import annotations

import psutil

__all__ = ["live_children"]


def live_children() -> list[psutil.Process]:
    """This process's running descendants, leaving out multiprocessing's resource tracker and
    forkserver (each started once per interpreter and kept until exit by design; the
    forkserver's own children are counted)."""
    from dglx_dist.testing.launch import forkserver_pid

    server = forkserver_pid()
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.pid == server:
                continue
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            if any("resource_tracker" in part for part in child.cmdline()):
                continue
        except psutil.NoSuchProcess:
            continue
        out.append(child)
    return out
