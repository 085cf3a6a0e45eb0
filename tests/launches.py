"""Jobs the end-to-end tests start several at a time.

A job of a few ranks leaves a 2-core machine's CPUs idle for much of its wall time (starting
interpreters, rendezvous, waiting in collectives): two such jobs side by side take about a
third less time than one after the other. Only jobs whose results do not depend on timing go
here (seeded training runs, refusals; not a job that must notice a stalled peer in time).
"""
from __future__ import annotations

import subprocess
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from dglx_dist.runtime.env import free_local_port

__all__ = ["run_together", "Together", "distinct_ports", "fresh_ports"]


def _run(job: dict) -> subprocess.CompletedProcess:
    return subprocess.run(capture_output=True, text=True, **job)


class Together:
    """``subprocess.run(**job)`` of each job submitted (its output captured as text),
    ``width`` at a time, in the order submitted. A job that needs what another writes is
    submitted once that one's result is in, and joins the queue behind the jobs already there
    (no slot waits for a whole batch to end). Leaving the ``with`` block waits for every job;
    on an error it drops the jobs not yet started."""

    def __init__(self, width: int = 2):
        self._pool = ThreadPoolExecutor(width)

    def submit(self, job: dict) -> Future:
        return self._pool.submit(_run, job)

    def __enter__(self) -> "Together":
        return self

    def __exit__(self, exc_type, *_) -> None:
        self._pool.shutdown(wait=True, cancel_futures=exc_type is not None)


def run_together(jobs: list[dict], width: int = 2) -> list[subprocess.CompletedProcess]:
    """``subprocess.run(**job)`` of each job (its output captured as text), ``width`` at a
    time; the results in the jobs' order."""
    with Together(width) as pool:
        return [future.result() for future in [pool.submit(job) for job in jobs]]


def distinct_ports(n: int) -> list[int]:
    """``n`` free local ports, no two the same (jobs started together each need their own)."""
    ports = fresh_ports()
    return [next(ports) for _ in range(n)]


def fresh_ports() -> Iterator[int]:
    """Free local ports, each new: for jobs made at several times that may run together
    (a port is free when drawn; another job queued with it has not bound it yet)."""
    seen: set[int] = set()
    while True:
        port = free_local_port()
        if port not in seen:
            seen.add(port)
            yield port
