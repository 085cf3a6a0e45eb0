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
    r = _emulate("--rate", "fast", "--", "-m", "dglx_dist", "commcheck")
    assert r.returncode == 2 and "link rate 'fast'" in r.stderr and "Traceback" not in r.stderr


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
