"""`dglx emulate`: a real two-node torchrun job on servers emulated by network namespaces, with
the inter-server link rate-limited by tc; everything it created is gone afterwards. Where the
machine cannot emulate (not root, no namespaces), the command must refuse and say why."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dglx_dist.cluster.emulate import (OWNERS, EmulatedCluster, EmulationUnavailable, LinkSpec,
                                       check_available)
from dglx_dist.planner.units import load_measured
from dglx_dist.testing.procs import live_children

pytestmark = pytest.mark.e2e
RATE_MBIT, PAYLOAD_MB = 50, 2


def _emulate(*args, prefix=()):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DGLX_", "RANK", "WORLD"))}
    env.update({"OMP_NUM_THREADS": "1", "DGLX_TIMEOUT": "60"})
    return subprocess.run([*prefix, sys.executable, "-m", "dglx_dist", "emulate", *args],
                          env=env, capture_output=True, text=True, timeout=300)


def test_two_emulated_servers_with_a_shaped_link():
    job = ("--servers", "2", "--nproc-per-server", "1", "--rate", f"{RATE_MBIT}mbit", "--",
           "-m", "dglx_dist", "commcheck", "--backend", "gloo", "--payload-mb", str(PAYLOAD_MB))
    try:
        check_available(LinkSpec(f"{RATE_MBIT}mbit"))
    except EmulationUnavailable as exc:  # this machine cannot: the command says so, exit 3
        r = _emulate(*job)
        assert r.returncode == 3 and str(exc) in r.stderr, r.stderr[-2000:]
        return
    r = _emulate(*job)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1])
    assert rep["exchange_ok"] and (rep["servers"], rep["world_size"]) == (2, 2)
    # each rank sent PAYLOAD_MB to the other server through its 50 Mbit/s uplink (loopback
    # would take milliseconds)
    floor = PAYLOAD_MB * 2**20 * 8 / (RATE_MBIT * 1e6)
    assert rep["payload_seconds"] >= 0.9 * floor, rep
    assert rep["bytes"][0]["sent_inter"] >= PAYLOAD_MB * 2**20
    # the rate it saw is the plan's link rate from now on (in this session's cache, not the
    # user's: tests/conftest.py)
    assert 0 < rep["link_gbit"] <= 1.1 * RATE_MBIT / 1e3
    assert load_measured().link_gbit == rep["link_gbit"]
    # nothing of this cluster left behind: namespaces, bridge, veths, owner file, processes
    token = re.search(r"emulated cluster ([0-9a-f]{6}):", r.stderr).group(1)
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert token not in netns + links and not (OWNERS / token).exists()
    assert not live_children()


def test_refused_without_root():
    prefix = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups") \
        if os.geteuid() == 0 else ()
    r = _emulate("--", "-m", "dglx_dist", "commcheck", prefix=prefix)
    assert r.returncode == 3, r.stderr[-2000:]
    assert "cannot emulate a cluster here" in r.stderr and "needs root" in r.stderr


def test_bad_link_is_named():
    with pytest.raises(ValueError, match=r"link rate '1 gig'; expected a number with bit"):
        LinkSpec("1 gig")
    with pytest.raises(ValueError, match=r"link queue 'sfq'; expected one of flows, fifo"):
        LinkSpec(queue="sfq")
    r = _emulate("--rate", "fast", "--", "-m", "dglx_dist", "commcheck")
    assert r.returncode == 2 and "link rate 'fast'" in r.stderr and "Traceback" not in r.stderr


# server 1: a sink for a bulk connection and an echo for a second one; server 0 (the client)
# fills the first for a while and times round trips of small messages on the second,
# from chosen source ports (distinct low bits: a queue each where the link has them)
_SINK_AND_ECHO = """
import socket, threading
def sink(c):
    while c.recv(1 << 20): pass
def echo(c):
    while (m := c.recv(100)): c.sendall(m)
s = socket.create_server(("0.0.0.0", 7001)); s.listen(2)
for serve in (sink, echo):
    threading.Thread(target=serve, args=(s.accept()[0],)).start()
"""
_BULK_AND_PINGS = """
import json, socket, statistics, sys, threading, time
def connect(port):
    for _ in range(100):
        try:
            return socket.create_connection((sys.argv[1], 7001), source_address=("", port))
        except OSError:
            time.sleep(0.1)
bulk, ping = connect(40001), connect(40002)
def fill():
    end = time.monotonic() + 3.0
    while time.monotonic() < end:
        bulk.sendall(bytes(1 << 16))
    bulk.close()
threading.Thread(target=fill).start()
time.sleep(1.0)  # the bulk's queue built up
waits = []
for _ in range(20):
    t = time.monotonic(); ping.sendall(bytes(100)); got = 0
    while got < 100:
        got += len(ping.recv(100))
    waits.append(time.monotonic() - t)
print(json.dumps({"median_ms": 1e3 * statistics.median(waits)}))
"""


def _small_message_wait(queue: str) -> tuple[float, dict[str, int]]:
    """The median round trip of a small message on one connection while another fills the
    link (200 Mbit/s, queued as ``queue``), in ms, and the bytes each of server 0's link
    classes sent (none for one queue)."""
    with EmulatedCluster(2, LinkSpec("200mbit", queue=queue)) as cluster:
        server = subprocess.Popen(cluster.command(1, [sys.executable, "-c", _SINK_AND_ECHO]))
        try:
            r = subprocess.run(cluster.command(0, [sys.executable, "-c", _BULK_AND_PINGS,
                                                   cluster.addresses[1]]),
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr[-2000:]
            classes = subprocess.run(cluster.command(0, ["tc", "-s", "class", "show", "dev",
                                                         "dxnet"]),
                                     capture_output=True, text=True).stdout
        finally:
            server.kill()
            server.wait()
    sent = dict(re.findall(r"^class htb (1:1[0-9a-f]{2}) .*\n Sent (\d+)", classes, re.M))
    return json.loads(r.stdout)["median_ms"], {k: int(v) for k, v in sent.items() if v != "0"}


def test_a_small_message_does_not_wait_behind_another_connections_bulk():
    """With a queue per connection (the default, as a host's fair-queueing qdisc), a small
    message crosses a link that another connection fills without waiting behind that
    connection's queued bytes; with one queue (``fifo``) it waits behind them. Each
    connection's bytes are counted in a class of its own."""
    try:
        check_available(LinkSpec())
    except EmulationUnavailable:  # this machine cannot: the command refuses, exit 3
        assert _emulate("--", "-m", "dglx_dist", "commcheck").returncode == 3
        return
    flows, sent = _small_message_wait("flows")
    fifo, none = _small_message_wait("fifo")
    assert not none
    # the bulk's class took nearly all bytes; the pings' class (ports ...1 and ...2, low bits
    # 1 and 2 against the server's 7001: leaves 0x100 + 16 * 1 + 9, 0x100 + 16 * 2 + 9)
    assert sent.get("1:119", 0) > 10 * 2**20 and 0 < sent.get("1:129", 0) < 2**20, sent
    assert flows * 4 < fifo, (flows, fifo)


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_interrupted_emulation_removes_everything(tmp_path, sig):
    """Ctrl-C (SIGINT) or SIGTERM while the job runs: the nodes are killed and the namespaces
    and bridge removed before the command exits."""
    try:
        check_available(LinkSpec())
    except EmulationUnavailable:  # covered by the refusal tests: nothing is created here
        r = _emulate("--", "-m", "dglx_dist", "commcheck")
        assert r.returncode == 3
        return
    script = tmp_path / "sleeper.py"
    script.write_text("import time\ntime.sleep(120)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DGLX_", "RANK", "WORLD"))}
    # started with SIGINT ignored, as a background job of a shell is: Ctrl-C must still work
    proc = subprocess.Popen([sys.executable, "-m", "dglx_dist", "emulate", "--nproc-per-server",
                             "1", "--", str(script)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        mine = _wait_for_nodes(proc)
        proc.send_signal(getattr(signal, sig))
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err[-2000:]
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert not [ln for ln in (netns + links).splitlines() if mine in ln], err[-2000:]
    assert not live_children()


def _wait_for_nodes(proc, seconds: float = 60.0) -> str:
    """The token of the cluster ``proc`` (a ``dglx emulate``) made, once every one of its
    namespaces has a process in it."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        names = [p.name for p in Path("/run/netns").glob("dglx-*")
                 if (OWNERS / p.name.split("-")[1]).is_file()
                 and (OWNERS / p.name.split("-")[1]).read_text() == str(proc.pid)]
        if names and all(subprocess.run(["ip", "netns", "pids", n], capture_output=True,
                                        text=True).stdout.strip() for n in names):
            return names[0].split("-")[1]
        time.sleep(0.2)
    pytest.fail(f"the emulated nodes did not start within {seconds:g} s")


def test_leftovers_of_a_killed_run_are_removed():
    """What a SIGKILLed run would leave (a namespace and a bridge under a token whose creator
    is gone: here, none ever recorded) is found and deleted by --remove-leftovers; a live
    cluster's are kept."""
    try:
        check_available(LinkSpec())
    except EmulationUnavailable:
        r = _emulate("--", "-m", "dglx_dist", "commcheck")
        assert r.returncode == 3
        return
    subprocess.run(["ip", "netns", "add", "dglx-0badc0-s0"], check=True)
    subprocess.run(["ip", "link", "add", "dxbr0badc0", "type", "bridge"], check=True)
    with EmulatedCluster(2, LinkSpec()) as live:
        r = _emulate("--remove-leftovers")
        netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert all(ns in netns for ns in live.namespaces)
    assert r.returncode == 0, r.stderr[-2000:]
    removed = json.loads(r.stdout.splitlines()[-1])["removed"]
    assert {"dglx-0badc0-s0", "dxbr0badc0"} <= set(removed)
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "0badc0" not in netns and "0badc0" not in links
