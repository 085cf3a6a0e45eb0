"""An emulated cluster on one Linux machine: a network namespace per server, rate-limited links
(docs/launching.md, "An emulated cluster on one machine").

:class:`EmulatedCluster` (a context manager, root only) creates, under a random token, one
namespace per server (``dglx-<token>-s<i>``, loopback up, unshaped), a bridge (``dxbr<token>``)
and per server a veth pair from the namespace's ``dxnet`` (``10.<a>.<b>.<i+1>/24``) to it, whose
sending side a ``tc`` qdisc shapes (``tbf`` at the rate, or ``netem`` for a delay). Everything is
removed in reverse order on exit, also after a half-way failure, Ctrl-C or SIGTERM;
:func:`leftovers` / :func:`remove_leftovers` find and delete what runs killed outright left
(each cluster records its creator's pid in ``/run/dglx-emulate``).

:func:`run_job` starts ``torchrun --nnodes N --node-rank i`` in every namespace (c10d rendezvous
on server 0, ``GLOO_SOCKET_IFNAME=dxnet``) and returns the nodes' outputs; :func:`emulated`
gives a ``with`` block a cluster to start processes of its own in
(:mod:`dglx_dist.bench.dgl_distdgl`). :func:`tx_bytes`, read inside a namespace, is what that
server has sent so far (``dxnet``'s counter: payload plus TCP/IP headers).
:func:`check_available` refuses, with the reason, where namespaces or ``netem`` are missing.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator, Sequence

from dglx_dist.cluster.procs import kill_group
from dglx_dist.errors import DglxError, InvalidValueError
from dglx_dist.runtime.env import torchrun

__all__ = ["LinkSpec", "PRESETS", "EmulationUnavailable", "EmulatedCluster", "NodeResult",
           "check_available", "emulated", "run_job", "leftovers", "remove_leftovers",
           "tx_bytes"]

log = logging.getLogger(__name__)
IFNAME = "dxnet"
OWNERS = Path("/run/dglx-emulate")  # one file per cluster token: the creating process's pid
_NS_RE = re.compile(r"^dglx-([0-9a-f]{6})-s\d+$")
_RATE_RE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit)$")


class EmulationUnavailable(DglxError, RuntimeError):
    """Namespaces or the requested link shaping cannot be set up on this machine."""


@dataclasses.dataclass(frozen=True)
class LinkSpec:
    """An inter-server link: ``rate`` in tc's units (e.g. ``1gbit``), one-way ``delay_ms``."""

    rate: str = "1gbit"
    delay_ms: float = 0.0

    def __post_init__(self):
        if not _RATE_RE.match(self.rate):
            raise InvalidValueError(f"link rate {self.rate!r}; expected a number with bit, kbit, "
                                    "mbit or gbit (e.g. 1gbit)")
        if not 0 <= self.delay_ms <= 10_000:
            raise InvalidValueError(f"link delay {self.delay_ms} ms; expected 0 to 10000")

    @property
    def bits_per_s(self) -> float:
        num, unit = re.match(r"^([\d.]+)(\w+)$", self.rate).groups()
        return float(num) * {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[unit]


PRESETS = {"1g": LinkSpec("1gbit"), "10g": LinkSpec("10gbit")}
"""The links ``dglx emulate --preset`` names: ``1g`` and ``10g``."""


def _run(cmd: Sequence[str]) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True)


def _qdisc_ok(kind: str) -> bool:
    """Whether the kernel knows qdisc ``kind`` (tried on a veth pair in a scratch namespace)."""
    ns = f"dglx-probe-{os.getpid()}"
    try:
        if _run(["ip", "netns", "add", ns]).returncode:
            return False
        _run(["ip", "-n", ns, "link", "add", "p0", "type", "veth", "peer", "name", "p1"])
        args = ["rate", "1mbit", "burst", "32kb", "latency", "50ms"] if kind == "tbf" else \
            ["delay", "1ms"]
        return _run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "p0", "root",
                     kind, *args]).returncode == 0
    finally:
        _run(["ip", "netns", "del", ns])


def check_available(link: LinkSpec) -> None:
    """Raises :class:`EmulationUnavailable` naming why this machine cannot emulate ``link``."""
    if sys.platform != "linux":
        raise EmulationUnavailable(f"network namespaces need Linux; this is {sys.platform}")
    if os.geteuid() != 0:  # first: a user's PATH often lacks /usr/sbin, where tc lives
        raise EmulationUnavailable("creating network namespaces needs root (run as root, or "
                                   "use plain virtual servers: DGLX_VIRTUAL_SERVERS)")
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise EmulationUnavailable(f"{' and '.join(missing)} not found (install iproute2)")
    if not _qdisc_ok("tbf"):
        raise EmulationUnavailable("cannot create a network namespace with a shaped veth pair "
                                   "here (no CAP_NET_ADMIN, or the kernel lacks veth/tbf)")
    if link.delay_ms > 0 and not _qdisc_ok("netem"):
        raise EmulationUnavailable(f"a link delay of {link.delay_ms} ms needs tc's netem qdisc, "
                                   f"which this kernel does not have (sch_netem); use a delay "
                                   f"of 0 (rate limiting alone works)")


class EmulatedCluster:
    """``servers`` namespaces joined by shaped links (see the module docstring)."""

    def __init__(self, servers: int, link: LinkSpec):
        if servers < 1:
            raise InvalidValueError(f"servers = {servers}; expected at least 1")
        if servers > 250:
            raise InvalidValueError(f"servers = {servers}; at most 250 fit the emulated /24 "
                                    "network")
        self.servers, self.link = servers, link
        self.token = secrets.token_hex(3)
        net = int(self.token[:4], 16)
        self.subnet = f"10.{200 + net % 50}.{net // 50 % 256}"
        self.namespaces = [f"dglx-{self.token}-s{i}" for i in range(servers)]
        self.addresses = [f"{self.subnet}.{i + 1}" for i in range(servers)]
        self.bridge = f"dxbr{self.token}"
        self._undo: list[Callable[[], None]] = []

    def __enter__(self) -> "EmulatedCluster":
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _do(self, cmd: list[str], undo: list[str] | None = None) -> None:
        res = _run(cmd)
        if res.returncode:
            raise EmulationUnavailable(f"`{' '.join(cmd)}` failed: {res.stderr.strip()}")
        if undo:
            self._undo.append(lambda: self._undo_command(undo))

    def _create(self) -> None:
        OWNERS.mkdir(parents=True, exist_ok=True)  # first: everything below has an owner
        owner = OWNERS / self.token
        owner.write_text(str(os.getpid()))
        self._undo.append(lambda: owner.unlink(missing_ok=True))
        # namespaces first (removed last): a bridge never outlives its cluster's namespaces,
        # which is how leftovers() tells an orphaned bridge
        for ns in self.namespaces:
            self._do(["ip", "netns", "add", ns], ["ip", "netns", "del", ns])
            self._do(["ip", "-n", ns, "link", "set", "lo", "up"])
        self._do(["ip", "link", "add", self.bridge, "type", "bridge"],
                 ["ip", "link", "del", self.bridge])
        self._do(["ip", "link", "set", self.bridge, "up"])
        for i, (ns, addr) in enumerate(zip(self.namespaces, self.addresses)):
            host_end = f"dx{self.token}h{i}"
            self._do(["ip", "link", "add", host_end, "type", "veth", "peer", "name", IFNAME,
                      "netns", ns], ["ip", "link", "del", host_end])
            self._do(["ip", "link", "set", host_end, "master", self.bridge])
            self._do(["ip", "link", "set", host_end, "up"])
            self._do(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", IFNAME])
            self._do(["ip", "-n", ns, "link", "set", IFNAME, "up"])
            self._do(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", IFNAME, "root",
                      *self._qdisc()])
        log.info("emulated cluster %s: %d servers on %s.0/24, links %s%s", self.token,
                 self.servers, self.subnet, self.link.rate,
                 f" + {self.link.delay_ms} ms" if self.link.delay_ms else "")

    def _qdisc(self) -> list[str]:
        if self.link.delay_ms > 0:
            return ["netem", "delay", f"{self.link.delay_ms}ms", "rate", self.link.rate,
                    "limit", "100000"]
        burst = max(32 * 1024, int(self.link.bits_per_s / 8 / 250))  # >= 4 ms of traffic
        return ["tbf", "rate", self.link.rate, "burst", str(burst), "latency", "100ms"]

    def command(self, server: int, cmd: Sequence[str]) -> list[str]:
        """``cmd`` run inside server ``server``'s namespace."""
        return ["ip", "netns", "exec", self.namespaces[server], *cmd]

    def close(self) -> None:
        """Removes everything created so far, newest first (idempotent)."""
        while self._undo:
            self._undo.pop()()

    @staticmethod
    def _undo_command(cmd: list[str]) -> None:
        res = _run(cmd)
        if res.returncode and "Cannot find" not in res.stderr:
            log.warning("cleanup `%s` failed: %s", " ".join(cmd), res.stderr.strip())


@dataclasses.dataclass(frozen=True)
class NodeResult:
    """One torchrun node of a job: its exit code and its output."""

    node: int
    returncode: int
    stdout: str
    stderr: str


def _sigterm(signum, frame):
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def emulated(servers: int, link: LinkSpec) -> Iterator[EmulatedCluster]:
    """An :class:`EmulatedCluster` for the ``with`` block, removed afterwards also on SIGTERM
    (made SystemExit) and SIGINT, even where the launcher started us with them ignored (a
    background job of a non-interactive shell ignores SIGINT).

    Raises:
        EmulationUnavailable: this machine cannot make it (:func:`check_available`).
    """
    check_available(link)
    previous = {sig: signal.signal(sig, handler) for sig, handler in (
        (signal.SIGTERM, _sigterm), (signal.SIGINT, signal.default_int_handler))}
    try:
        with EmulatedCluster(servers, link) as cluster:
            yield cluster
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_job(servers: int, nproc_per_server: int, link: LinkSpec, target: Sequence[str],
            env: dict[str, str] | None = None, timeout: float = 600.0) -> list[NodeResult]:
    """Runs ``torchrun ... target`` as a ``servers``-node job on an emulated cluster.

    Args:
        servers: torchrun nodes (one per emulated server).
        nproc_per_server: torchrun processes per node.
        link: the inter-server link.
        target: what torchrun runs, e.g. ``["-m", "dglx_dist", "commcheck"]``.
        env: the environment of the nodes (default: this process's).
        timeout: seconds before every node still running is killed (the job then fails).
    """
    procs: list[subprocess.Popen] = []
    with emulated(servers, link) as cluster:
        try:
            base = {**(env if env is not None else os.environ), "GLOO_SOCKET_IFNAME": IFNAME,
                    "DGLX_HOST_RANKS": str(servers * nproc_per_server)}  # one machine's memory
            endpoint = f"{cluster.addresses[0]}:29400"
            for node in range(servers):
                cmd = torchrun("--nnodes", str(servers), "--node-rank", str(node),
                               "--nproc-per-node", str(nproc_per_server),
                               "--rdzv-backend", "c10d", "--rdzv-id", cluster.token,
                               # node 0 hosts it (not its hostname's IP)
                               "--rdzv-endpoint", endpoint,
                               "--rdzv-conf", f"is_host={int(node == 0)}",
                               "--local-addr", cluster.addresses[node], *target)
                procs.append(subprocess.Popen(
                    cluster.command(node, cmd), env=base, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, text=True, start_new_session=True))
            return _wait(procs, timeout)
        finally:
            for p in procs:
                kill_group(p)


def _wait(procs: list[subprocess.Popen], timeout: float) -> list[NodeResult]:
    deadline = time.monotonic() + timeout
    out = []
    for node, p in enumerate(procs):
        try:
            stdout, stderr = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill_group(p)
            stdout, stderr = p.communicate()
            stderr += f"\n[dglx emulate] node {node} killed after the {timeout:g}s timeout"
        out.append(NodeResult(node, p.returncode, stdout, stderr))
    return out


def leftovers() -> list[str]:
    """Namespaces and bridges of emulated clusters whose creating process is gone (a run that
    was killed outright): their token has no owner file in :data:`OWNERS`, or its pid is dead."""
    names = [p.name for p in Path("/run/netns").glob("dglx-*") if _NS_RE.match(p.name)]
    bridges = re.findall(r"^\d+: (dxbr[0-9a-f]{6})[:@]", _run(["ip", "-o", "link"]).stdout,
                         re.M)
    return ([n for n in names if not _owned(_NS_RE.match(n).group(1))] +
            [b for b in bridges if not _owned(b[4:])])


def _owned(token: str) -> bool:
    """Whether the process that created cluster ``token`` still runs."""
    try:
        pid = int((OWNERS / token).read_text())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def remove_leftovers() -> list[str]:
    """Deletes what :func:`leftovers` lists; returns the names."""
    names = leftovers()
    for name in names:
        _run(["ip", "netns", "del", name] if name.startswith("dglx-") else
             ["ip", "link", "del", name])
    return names


def tx_bytes(ifname: str = IFNAME) -> int | None:
    """Bytes sent so far through interface ``ifname`` of this process's network namespace
    (``/proc/net/dev``); None where it has no such interface."""
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, _, counters = line.partition(":")
        if name.strip() == ifname:
            return int(counters.split()[8])
    return None
