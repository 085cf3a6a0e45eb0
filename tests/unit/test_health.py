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
