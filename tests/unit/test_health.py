"""Naming the failed rank when the store's host is frozen: a real TCPStore served by another
process, stopped with SIGSTOP (as a frozen rank 0 hosting the job's store would be). Every
store call on the failure path returns within its deadline instead of waiting for ever. And a
frozen peer: every wait on it that fails or is given up on takes the group's failure path."""
import datetime
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

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


@pytest.mark.parametrize("terminated", [False, True], ids=["raised", "sigterm"])
def test_a_peers_sigterm_is_no_crash_to_outlive_a_sigterm_for(terminated):
    """A rank SIGTERMed after a peer crashed goes on to name that peer
    (``session.exit_on_sigterm``); a peer that left by a SIGTERM of its own (a launcher
    signalling its ranks one by one, as torchrun 2.13's did here) is no such crash: the
    rank would name "rank 1 raised SystemExit: 143" instead of ending as it was told."""
    store = dist.TCPStore("127.0.0.1", 0, None, True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=60))
    me, peer = Health(store, 0, 2, interval=0.1), Health(store, 1, 2, interval=0.1)
    assert not me.peer_crashed()
    peer.record_crash("SystemExit: 143" if terminated else "RuntimeError: boom",
                      terminated=terminated)
    assert me.peer_crashed() is not terminated
    assert not peer.peer_crashed()  # its own crash is no peer's
    assert me.diagnose("world", [0, 1], settle=0.1)[0] == [1]  # still named if asked


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


class _FrozenPeerHealth:
    """Heartbeats as a survivor reads them when rank 1 is frozen (for a :class:`Comm`)."""

    def __init__(self, names=(1,)):
        self.op_seqs, self.names, self.ended, self.marked = {}, list(names), [], []

    def mark(self, state):
        self.marked.append(state)

    def diagnose(self, group, members):
        why = "; ".join(f"rank {r} sent no heartbeat for 20.4s" for r in self.names)
        return self.names, why, set(self.names)

    def end_frozen(self, frozen):
        self.ended.append(sorted(frozen))


def _comm(health):
    from dglx_dist.runtime.comm import ByteCounter, Comm
    from dglx_dist.runtime.topology import Topology

    return Comm("world", None, [0, 1], 0, Topology(1, 2), ByteCounter(), health, 20.0)


def test_gloos_pair_closure_is_a_frozen_peers_failure():
    """Once one wait on a connection to a frozen peer times out, gloo closes it and every other
    wait on it fails with "Application timeout caused pair closure" (issue 77, item 4: two raw
    tracebacks): the group's failure path, naming the frozen rank."""
    from dglx_dist.runtime.comm import PeerError

    health = _FrozenPeerHealth()
    comm = _comm(health)

    def closed():
        raise RuntimeError("Application timeout caused pair closure")

    with pytest.raises(PeerError, match=r"recv \(tag 7\) from rank 1 on the world group failed "
                                        r"on rank 0: rank 1 sent no heartbeat .*\[timed out"):
        comm.guard("recv (tag 7) from rank 1", closed)
    assert comm.failure is not None and comm.failure.ranks == [1] and health.ended == [[1]]


def test_a_wait_past_its_deadline_fails_the_group_as_a_timed_out_collective():
    """A transfer or collective its poller gave up on (a frozen peer never closes its
    connections) is diagnosed like a collective that timed out: the frozen rank named and
    ended, the group broken, so nothing on the way out waits on it again."""
    from dglx_dist.runtime.pending import Pending, Transfer

    health = _FrozenPeerHealth()
    comm = _comm(health)
    never = SimpleNamespace(is_completed=lambda: False, wait=lambda timeout=None: True)
    err = Pending(comm, "all_reduce", never, lambda: None).fail(20.0)
    assert err.ranks == [1] and "rank 1 sent no heartbeat" in str(err), err
    assert comm.failure is err and health.marked == ["failed"] and health.ended == [[1]]
    # a group that failed already gives its first failure, without a second diagnosis
    transfer = Transfer(comm, "recv (tag 3) from rank 1", never, lambda: None, None, 1)
    assert transfer.fail(20.0) is err and health.ended == [[1]]
    # heartbeats that blame nobody: the transfer's peer is named
    comm = _comm(_FrozenPeerHealth(names=()))
    err = Transfer(comm, "send (tag 3) to rank 1", never, lambda: None, None, 1).fail(20.0)
    assert err.ranks == [1] and "(rank 1 dead or stuck?)" in str(err) and comm.failure is err
