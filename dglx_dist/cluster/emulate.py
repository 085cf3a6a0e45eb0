"""An emulated cluster on one Linux machine: a network namespace per server, rate-limited links
(docs/launching.md, "An emulated cluster on one machine").

:class:`EmulatedCluster` (a context manager, root only) creates, under a random token, one
namespace per server (``dglx-<token>-s<i>``, loopback up, unshaped), a bridge (``dxbr<token>``)
and per server a veth pair from the namespace's ``dxnet`` (``10.<a>.<b>.<i+1>/24``) to it, whose
sending side ``tc`` shapes (:class:`LinkSpec`: the rate, a delay, how waiting packets queue).
Everything is removed in reverse order on exit, also after a half-way failure, Ctrl-C or SIGTERM;
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
    """An inter-server link: ``rate`` in tc's units (e.g. ``1gbit``), one-way ``delay_ms``,
    and how the packets waiting for it queue on the sending side: ``flows``, a queue per
    connection served in turn, as a host's fair-queueing qdisc shares its link (``fq_codel``,
    Linux's default), so that a small message does not wait behind another connection's bulk;
    or ``fifo``, one queue (tc's ``tbf``) that every connection waits in."""

    rate: str = "1gbit"
    delay_ms: float = 0.0
    queue: str = "flows"

    def __post_init__(self):
        if not _RATE_RE.match(self.rate):
            raise InvalidValueError(f"link rate {self.rate!r}; expected a number with bit, kbit, "
                                    "mbit or gbit (e.g. 1gbit)")
        if not 0 <= self.delay_ms <= 10_000:
            raise InvalidValueError(f"link delay {self.delay_ms} ms; expected 0 to 10000")
        if self.queue not in QUEUES:
            raise InvalidValueError(f"link queue {self.queue!r}; expected one of "
                                    f"{', '.join(QUEUES)}")

    @property
    def bits_per_s(self) -> float:
        num, unit = re.match(r"^([\d.]+)(\w+)$", self.rate).groups()
        return float(num) * {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[unit]


def _burst(link: LinkSpec) -> int:
    """Bytes the link may send at once: at least 4 ms of its traffic."""
    return max(32 * 1024, int(link.bits_per_s / 8 / 250))


def _fifo(link: LinkSpec, dev: str) -> list[str]:
    """One queue: ``tbf`` at the rate, or ``netem`` (rate and delay)."""
    if link.delay_ms > 0:
        return [f"qdisc add dev {dev} root netem delay {link.delay_ms}ms rate {link.rate} "
                "limit 100000"]
    return [f"qdisc add dev {dev} root tbf rate {link.rate} burst {_burst(link)} latency 100ms"]


_PORT_BITS = 4  # the low bits of each port that pick a connection's queue: 16 x 16 = 256


def _flows(link: LinkSpec, dev: str) -> list[str]:
    """A queue per TCP connection (as far as 256 queues tell them apart): an ``htb`` class at
    the rate whose 256 leaves borrow it in turn, a packet's leaf picked by the u32 classifier
    from the low bits of its source port, then of its destination port (a two-level hash:
    u32 hashes one field at a time, and one end of a connection is often a shared listening
    port). Other packets (ARP, UDP) go to the first leaf. With a delay, each leaf delays its
    packets (``netem``)."""
    n, burst = 1 << _PORT_BITS, _burst(link)
    share = max(1, int(link.bits_per_s / (n * n)))
    low = (1 << _PORT_BITS) - 1
    lines = [f"qdisc add dev {dev} root handle 1: htb default 100",
             f"class add dev {dev} parent 1: classid 1:1 htb rate {link.rate} "
             f"burst {burst} cburst {burst}"]
    for leaf in range(n * n):
        lines.append(f"class add dev {dev} parent 1:1 classid 1:{0x100 + leaf:x} htb rate "
                     f"{share}bit ceil {link.rate} burst {burst} cburst {burst} quantum 9000")
        if link.delay_ms > 0:
            lines.append(f"qdisc add dev {dev} parent 1:{0x100 + leaf:x} netem delay "
                         f"{link.delay_ms}ms limit 100000")
    filters = f"filter add dev {dev} parent 1: prio 1"
    u32 = f"{filters} protocol ip u32"
    lines += [f"{filters} handle {table:x}: protocol ip u32 divisor {n}"
              for table in (0x100, *range(0x200, 0x200 + n))]
    lines.append(f"{u32} ht 800:: match ip protocol 6 0xff "
                 f"hashkey mask 0x{low << 16:08x} at 20 link 100:")  # the source port's bits
    for s in range(n):
        lines.append(f"{u32} ht 100:{s:x}: match u32 0 0 hashkey mask 0x{low:08x} at 20 "
                     f"link {0x200 + s:x}:")  # then the destination port's
        lines += [f"{u32} ht {0x200 + s:x}:{d:x}: match u32 0 0 flowid 1:{0x100 + s * n + d:x}"
                  for d in range(n)]
    return lines


QUEUES: dict[str, Callable[[LinkSpec, str], list[str]]] = {"flows": _flows, "fifo": _fifo}
"""How a link's sending side queues (:class:`LinkSpec`), as the ``tc -batch`` lines that
shape device ``dev``."""


PRESETS = {"1g": LinkSpec("1gbit"), "10g": LinkSpec("10gbit")}
"""The links ``dglx emulate --preset`` names: ``1g`` and ``10g``."""


def _run(cmd: Sequence[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, input=stdin)


def _shaping(ns: str, dev: str, link: LinkSpec) -> tuple[list[str], str]:
    """The command that shapes ``dev`` of namespace ``ns`` as ``link`` (one ``tc -batch``),
    and its standard input."""
    return (["ip", "netns", "exec", ns, "tc", "-batch", "-"],
            "\n".join(QUEUES[link.queue](link, dev)) + "\n")


def _shapes(link: LinkSpec) -> bool:
    """Whether the kernel takes ``link``'s shaping (tried on a veth pair in a scratch
    namespace)."""
    ns = f"dglx-probe-{os.getpid()}"
    try:
        if _run(["ip", "netns", "add", ns]).returncode:
            return False
        _run(["ip", "-n", ns, "link", "add", "p0", "type", "veth", "peer", "name", "p1"])
        return _run(*_shaping(ns, "p0", link)).returncode == 0
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
    if _shapes(link):  # one probe where it works; the ones below say what is missing
        return
    if not _shapes(LinkSpec("1mbit", queue="fifo")):
        raise EmulationUnavailable("cannot create a network namespace with a shaped veth pair "
                                   "here (no CAP_NET_ADMIN, or the kernel lacks veth/tbf)")
    if link.delay_ms > 0 and not _shapes(LinkSpec("1mbit", 1.0, queue="fifo")):
        raise EmulationUnavailable(f"a link delay of {link.delay_ms} ms needs tc's netem qdisc, "
                                   f"which this kernel does not have (sch_netem); use a delay "
                                   f"of 0 (rate limiting alone works)")
    if link.queue == "flows":
        raise EmulationUnavailable("a queue per connection needs tc's htb qdisc and u32 "
                                   "classifier, which this kernel does not have; use the one "
                                   "queue (--queue fifo)")
    raise EmulationUnavailable(f"tc refused a link of {link.rate} here")


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

    def _do(self, cmd: list[str], undo: list[str] | None = None,
            stdin: str | None = None) -> None:
        res = _run(cmd, stdin)
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
            cmd, lines = _shaping(ns, IFNAME, self.link)
            self._do(cmd, stdin=lines)
        log.info("emulated cluster %s: %d servers on %s.0/24, links %s%s (%s)", self.token,
                 self.servers, self.subnet, self.link.rate,
                 f" + {self.link.delay_ms} ms" if self.link.delay_ms else "", self.link.queue)

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
