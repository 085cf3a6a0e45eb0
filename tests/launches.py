"""Jobs the end-to-end tests start several at a time.

A job of a few ranks leaves a 2-core machine's CPUs idle for much of its wall time (starting
interpreters, rendezvous, waiting in collectives): two such jobs side by side take about a
third less time than one after the other. Only jobs whose results do not depend on timing go
here (seeded training runs, refusals; not a job that must notice a stalled peer in time).
"""
from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor

from dglx_dist.runtime.env import free_local_port

__all__ = ["run_together", "distinct_ports"]


def run_together(jobs: list[dict], width: int = 2) -> list[subprocess.CompletedProcess]:
    """``subprocess.run(**job)`` of each job (its output captured as text), ``width`` at a
    time; the results in the jobs' order."""
    with ThreadPoolExecutor(width) as pool:
        return list(pool.map(lambda job: subprocess.run(capture_output=True, text=True, **job),
                             jobs))


def distinct_ports(n: int) -> list[int]:
    """``n`` free local ports, no two the same (jobs started together each need their own)."""
    ports: list[int] = []
    while len(ports) < n:
        port = free_local_port()
        if port not in ports:
            ports.append(port)
    return ports
