"""Checks before a launch, for what would otherwise hang before dglx_dist's own code runs.

``dglx rdzvcheck HOST:PORT`` (docs/launching.md) tells apart a free rendezvous endpoint, a
torch.distributed store, and something else holding the port (torchrun would wait at its
rendezvous with no message), naming the process when it is on this machine.
"""
from __future__ import annotations

import datetime
import socket

import psutil

from dglx_dist.runtime.env import EnvError
from dglx_dist.runtime.health import call_within

__all__ = ["check_rendezvous_endpoint"]


def _split(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise EnvError(f"endpoint {endpoint!r}: expected HOST:PORT with a port in 1..65535")
    return host.strip("[]"), int(port)


def _answers_as_store(host: str, port: int, timeout: float) -> bool:
    """Whether a TCPStore client gets an answer from ``host:port`` within ``timeout``."""
    import torch.distributed as dist

    def ask():
        store = dist.TCPStore(host, port, None, False, timeout=datetime.timedelta(seconds=timeout))
        store.add("dglx/rdzvcheck", 0)

    try:
        call_within(timeout, ask)
    except Exception:  # noqa: BLE001  (no answer as a store, or a refusal, is the finding)
        return False
    return True


def _local_holder(port: int) -> str:
    """The process listening on ``port`` on this machine, when it can be seen."""
    try:
        for conn in psutil.net_connections("tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN \
                    and conn.pid:
                proc = psutil.Process(conn.pid)
                return f" (on this machine: pid {conn.pid}, {' '.join(proc.cmdline())[:80]})"
    except (psutil.Error, OSError):
        pass
    return ""


def check_rendezvous_endpoint(endpoint: str, timeout: float = 5.0) -> str:
    """What listens on ``endpoint`` (a sentence), or :class:`EnvError` when it is something
    a rendezvous would hang on."""
    host, port = _split(endpoint)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except ConnectionRefusedError:
        return (f"{endpoint}: free (nothing listens; torchrun's agent on {host} will start "
                f"the rendezvous store there)")
    except OSError as exc:
        raise EnvError(f"{endpoint}: cannot be reached ({exc}); check the host name and that "
                       f"the port is open between the machines") from None
    if _answers_as_store(host, port, timeout):
        return (f"{endpoint}: a torch.distributed store answers (another job, or this job's "
                f"agent, is using it)")
    raise EnvError(f"{endpoint}: something that is not a torch.distributed store listens "
                   f"there{_local_holder(port)}: it did not answer as a store within "
                   f"{timeout:g}s, and torchrun would wait at its rendezvous with no message; "
                   f"choose another port or stop that process")
