"""Naming the failed rank when the store's host is frozen: a real TCPStore served by another
process, stopped with SIGSTOP (as a frozen rank 0 hosting the job's store would be). Every
store call on the failure path returns within its deadline instead of waiting for ever."""
import datetime
import signal
import subprocess
import sys
import time

import pytest
import torch.distributed as dist

from dglx_dist.runtime.env import free_local_port
from dglx_dist.runtime.health import Health

_SERVE = ("import sys, time, datetime, torch.distributed as d; "
          "s = d.TCPStore('127.0.0.1', int(sys.argv[1]), None, True, "
          "timeout=datetime.timedelta(seconds=60), wait_for_workers=False); "
          "print('up', flush=True); time.sleep(600)")


@pytest.fixture
def frozen_store():
    port = free_local_port()
    host = subprocess.Popen([sys.executable, "-c", _SERVE, str(port)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert host.stdout.readline().strip() == "up"
        client = dist.TCPStore("127.0.0.1", port, None, False,
                               timeout=datetime.timedelta(seconds=60))
        peer = Health(client, 0, 2, interval=0.1)
        peer.start()  # rank 0 joined and beats, then its host freezes
        me = Health(client, 1, 2, interval=0.1, store_timeout=1.0)
        me.start()
        peer.stop()
        host.send_signal(signal.SIGSTOP)
        yield me
    finally:
        host.kill()
        host.wait()


def test_a_frozen_store_host_is_named_within_the_deadline(frozen_store):
    t0 = time.monotonic()
    frozen_store.mark("failed")
    ranks, why, frozen = frozen_store.diagnose("world", [0, 1])
    frozen_store.record_crash("PeerError: ...")
    assert time.monotonic() - t0 < 3.0  # one missed deadline; later calls do not wait again
    assert ranks == [0] and "store (hosted by rank 0) is unreachable" in why
    assert frozen == {0}  # what a survivor beside it under the same launcher ends
    frozen_store.stop()


_FORGED = {  # what another client of the job's store writes -> what the diagnosis says
    "garbage heartbeat": ({"joined/1": "1", "who/1": "{", "beat/1": "not json"},
                          "rank 1 has entries in the job's store that no rank wrote"),
    "heartbeat of the wrong shape": ({"joined/1": "1", "who/1": '{"host": "h", "pid": 1}',
                                      "beat/1": '["abc", 5]'},
                                     "rank 1 has entries in the job's store that no rank wrote"),
    "a crash flag without its message": ({"crashed/1": "1", "joined/1": "1"},
                                         "rank 1 raised (no message recorded)"),
    "a flag that is not a number": ({"joined/1": "abc", "who/1": "{}", "beat/1": "[]"},
                                    "rank 1 has entries in the job's store that no rank wrote"),
}


@pytest.mark.parametrize("case", sorted(_FORGED))
def test_entries_another_client_wrote_give_one_line_not_a_traceback(case):
    """A process outside the job connects to its store and writes rank 1's health entries
    (garbage, or well-formed keys no rank wrote): the diagnosis of a failure names what it
    found in one line, within its deadline, and the store stays usable (no read waits for an
    absent key, no add() on a value that is not a number breaks the connection)."""
    entries, said = _FORGED[case]
    store = dist.TCPStore("127.0.0.1", 0, None, True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=60))
    outsider = dist.TCPStore("127.0.0.1", store.port, None, False,
                             timeout=datetime.timedelta(seconds=60))
    for key, value in entries.items():
        outsider.set(f"dglx/health/{key}", value)
    me = Health(store, 0, 2, interval=0.1, store_timeout=2.0)
    me.start()
    start = time.monotonic()
    culprits, why, _ = me.diagnose("world", [0, 1], settle=0.5)
    me.stop()
    assert culprits == [1] and why.startswith(said) and "\n" not in why, why
    assert time.monotonic() - start < 2.0
    store.set("after", "1")  # the store still answers this rank
    assert store.get("after") == b"1"
