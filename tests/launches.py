"""Jobs the end-to-end tests start several at a time.

A job of a few ranks leaves a 2-core machine's CPUs idle for much of its wall time (starting
interpreters, rendezvous, waiting in collectives): two such jobs side by side take about a
third less time than one after the other. Only jobs whose results do not depend on timing go
here (seeded training runs, refusals; not a job that must notice a stalled peer in time).
"""
from __future__ import annotations

import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Hashable, Mapping

from dglx_dist.runtime.env import free_local_port

__all__ = ["run_together", "run_after", "distinct_ports"]


def run_together(jobs: list[dict], width: int = 2) -> list[subprocess.CompletedProcess]:
    """``subprocess.run(**job)`` of each job (its output captured as text), ``width`` at a
    time; the results in the jobs' order."""
    with ThreadPoolExecutor(width) as pool:
        return list(pool.map(lambda job: subprocess.run(capture_output=True, text=True, **job),
                             jobs))


def run_after(jobs: Mapping[Hashable, dict], needs: Mapping[Hashable, set] | None = None,
              width: int = 2) -> dict[Hashable, subprocess.CompletedProcess]:
    """``subprocess.run(**job)`` of each job by name (its output captured as text), ``width``
    at a time, each started once the jobs it needs (``needs[name]``, names in ``jobs``) have
    ended: whenever a slot frees, the first job in ``jobs``' order whose needs are met starts
    (list the longest first). No barrier between a group of jobs and those that need some of
    them: the slots stay busy while the last of the first group finish."""
    needs = {name: set((needs or {}).get(name, ())) for name in jobs}
    unknown = {n for need in needs.values() for n in need} - set(jobs)
    assert not unknown, f"needs names no job: {unknown}"
    waiting, ended, results, errors = list(jobs), set(), {}, []
    cond = threading.Condition()

    def slot() -> None:
        while True:
            with cond:
                while waiting and not (ready := [n for n in waiting if needs[n] <= ended]):
                    cond.wait()
                if not waiting:
                    return
                name = ready[0]
                waiting.remove(name)
            try:
                results[name] = subprocess.run(capture_output=True, text=True, **jobs[name])
            except BaseException as exc:  # noqa: BLE001  (raised below, once every job ended)
                errors.append(exc)
            finally:
                with cond:
                    ended.add(name)
                    cond.notify_all()

    threads = [threading.Thread(target=slot, daemon=True) for _ in range(min(width, len(jobs)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:  # a job's timeout, say
        raise errors[0]
    return {name: results[name] for name in jobs}


def distinct_ports(n: int) -> list[int]:
    """``n`` free local ports, no two the same (jobs started together each need their own)."""
    ports: list[int] = []
    while len(ports) < n:
        port = free_local_port()
        if port not in ports:
            ports.append(port)
    return ports
