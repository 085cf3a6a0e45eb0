"""The comm layer on real gloo process groups: results, byte counters, named failures."""
import os
import time

import pytest
import torch

from dglx_dist.runtime.comm import PeerError
from dglx_dist.runtime.sized import HEAD_BYTES, short_bytes
from dglx_dist.testing import WorkerError, run_workers

pytestmark = pytest.mark.dist
VIRTUAL_2x2 = {"DGLX_VIRTUAL_SERVERS": "2", "DGLX_TIMEOUT": "20"}


def _exchange(session):
    r, w = session.rank, session.world_size
    # rank r sends (r + j) rows of width 3 to rank j, each row filled with 10*r + j
    send = [torch.full((r + j, 3), float(10 * r + j)) for j in range(w)]
    before = session.counter.snapshot()
    recv = session.world.all_to_all_v(send)
    after = session.counter.snapshot()
    ok = all(recv[j].shape == (j + r, 3) and bool((recv[j] == 10 * j + r).all())
             for j in range(w))
    return {"ok": ok, "server": session.server_id, "local": session.local_rank,
            "server_members": session.server.members, "cross_members": session.cross.members,
            "delta": {k: after[k] - before[k] for k in after}}


def test_all_to_all_v_and_counters_on_virtual_servers(tmp_path):
    res = run_workers(_exchange, 4, tmp_path, env=VIRTUAL_2x2)
    for r, out in res.items():
        assert out["ok"], r
        assert out["server"] == r // 2 and out["local"] == r % 2
        assert out["server_members"] == [2 * (r // 2), 2 * (r // 2) + 1]
        assert out["cross_members"] == [r % 2, 2 + r % 2]
        same = [j for j in range(4) if j // 2 == r // 2 and j != r]
        other = [j for j in range(4) if j // 2 != r // 2]
        row = 3 * 4  # 3 float32 per row
        d = out["delta"]
        assert d["sent_intra"] == sum((r + j) * row for j in same)
        assert d["sent_inter"] == sum((r + j) * row for j in other)
        assert d["recv_intra"] == sum((j + r) * row for j in same)
        assert d["recv_inter"] == sum((j + r) * row for j in other)
        assert d["control_sent"] == HEAD_BYTES * 3  # a row count to each peer


def _collectives(session):
    r, w = session.rank, session.world_size
    out = {}
    gathered = session.world.all_gather_v(torch.arange(r + 1, dtype=torch.float32))
    out["gather_v"] = [g.tolist() for g in gathered]
    t = torch.full((4,), float(r))
    session.world.all_reduce(t)
    out["all_reduce"] = t.tolist()
    rs = session.world.reduce_scatter(torch.arange(2 * w, dtype=torch.float32) * (r + 1))
    out["reduce_scatter"] = rs.tolist()
    b = torch.full((2,), float(r))
    session.server.broadcast(b, src=0)
    out["broadcast"] = b.tolist()
    s = torch.tensor([float(r)])
    session.server.all_reduce(s, op="max")
    out["server_max"] = s.item()
    session.world.barrier()
    return out


def test_collectives(tmp_path):
    res = run_workers(_collectives, 4, tmp_path, env=VIRTUAL_2x2)
    total = sum(r + 1 for r in range(4))
    for r, out in res.items():
        assert out["gather_v"] == [list(range(j + 1)) for j in range(4)]
        assert out["all_reduce"] == [6.0] * 4
        assert out["reduce_scatter"] == [float(2 * r * total), float((2 * r + 1) * total)]
        assert out["broadcast"] == [float(2 * (r // 2))] * 2
        assert out["server_max"] == float(2 * (r // 2) + 1)


def _dies(session, victim, hang, gave_up):
    session.world.all_reduce(torch.ones(1))
    if session.rank == victim:
        if hang:  # alive but stuck past the others' 4 s timeout: until both have given up
            deadline = time.monotonic() + 12
            while len(os.listdir(gave_up)) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
        os._exit(3)
    t0 = time.monotonic()
    try:
        session.world.all_reduce(torch.ones(8))
    except PeerError as exc:
        out = {"ranks": exc.ranks, "message": str(exc), "seconds": time.monotonic() - t0}
        open(os.path.join(gave_up, str(session.rank)), "w").close()
        return out
    return {"ranks": None}


@pytest.mark.parametrize("hang", [False, True], ids=["killed", "hung"])
def test_failed_rank_is_named_on_every_survivor(tmp_path, hang):
    (tmp_path / "gave-up").mkdir()
    res = run_workers(_dies, 3, tmp_path / "run", 1, hang, str(tmp_path / "gave-up"),
                      env={"DGLX_TIMEOUT": "4"}, expect_failure=[1], timeout=40)
    for r in (0, 2):
        assert res[r]["ranks"] == [1], res[r]
        assert "rank 1" in res[r]["message"]
        assert res[r]["seconds"] < 4 + 5, res[r]
        if hang:
            assert "timed out after 4s" in res[r]["message"]
    assert res[1]["exitcode"] != 0


def _raise(session):
    if session.rank == 1:
        raise ValueError("boom on purpose")
    return session.rank


def test_launcher_reraises_child_traceback(tmp_path):
    with pytest.raises(WorkerError, match=r"(?s)rank 1 .*ValueError: boom on purpose"):
        run_workers(_raise, 2, tmp_path, env={"DGLX_TIMEOUT": "5"})


def _raises_then_others_wait(session):
    if session.rank == 1:
        # leaving the session with an exception, as a crashing training script does
        session.__exit__(ValueError, ValueError("bad batch 17"), None)
        os._exit(4)
    try:
        session.world.all_reduce(torch.ones(2))
    except PeerError as exc:
        return {"ranks": exc.ranks, "message": str(exc)}
    return {"ranks": None}


def test_crashed_rank_is_named_with_its_error(tmp_path):
    res = run_workers(_raises_then_others_wait, 3, tmp_path, env={"DGLX_TIMEOUT": "5"},
                      expect_failure=[1], timeout=40)
    for r in (0, 2):
        assert res[r]["ranks"] == [1], res[r]
        assert "rank 1 raised ValueError: bad batch 17" in res[r]["message"]


def _raises_while_others_make_groups(session):
    if session.rank == 0:  # e.g. a damaged part file only rank 0 reads
        session.__exit__(ValueError, ValueError("part-00000/feat.arrow: damaged"), None)
        os._exit(4)
    try:
        session.new_world_comm("late")
    except PeerError as exc:
        return {"ranks": exc.ranks, "message": str(exc)}
    return {"ranks": None}


def test_a_rank_that_fails_before_new_groups_is_named(tmp_path):
    """Issue 40, case 11: torch's new_group, which rank 1 called while rank 0 failed, used
    to end rank 1 with "Connection reset by peer"."""
    res = run_workers(_raises_while_others_make_groups, 2, tmp_path,
                      env={"DGLX_TIMEOUT": "5"}, expect_failure=[0], timeout=40)
    assert res[1]["ranks"] == [0], res[1]
    assert "rank 0 raised ValueError: part-00000/feat.arrow: damaged" in res[1]["message"]


def _known_sizes(session):
    r, w = session.rank, session.world_size
    send = [torch.full((j + 1, 2), float(r)) for j in range(w)]
    recv = session.world.all_to_all_v(send, recv_rows=[r + 1] * w)
    return {"recv": [t.tolist() for t in recv], "control": session.counter.control_sent}


def test_all_to_all_v_with_known_sizes(tmp_path):
    res = run_workers(_known_sizes, 3, tmp_path, env={"DGLX_TIMEOUT": "20"})
    for r, out in res.items():
        assert out["recv"] == [[[float(j)] * 2] * (r + 1) for j in range(3)]
        assert out["control"] == 0  # no count round


def _unknown_sizes(session):
    """Five exchanges started before any is waited for, waited for out of order: messages
    that fit the receiver's first buffer and messages that do not (their rows under a tag of
    their own), empty ones, and dtypes of every width, a bool among them."""
    r, w = session.rank, session.world_size
    big = short_bytes(w - 1) // 4 + 1  # float32 rows of one column: one more than fits

    def rows(j: int) -> int:
        return 0 if r == j == 1 else big + r if (r + j) % 2 else r + j + 1

    sends = {"f32": [torch.arange(rows(j), dtype=torch.float32) + 1000 * r for j in range(w)],
             "i64": [torch.full((j, 3), 10 * r + j, dtype=torch.int64) for j in range(w)],
             "bool": [torch.tensor([r % 2, j % 2] * 2, dtype=torch.bool).view(1, 2, 2).expand(
                 r + 2 * j, 2, 2) for j in range(w)],
             "c128": [torch.full((r, 1), complex(r, j), dtype=torch.complex128)
                      for j in range(w)],
             "f64": [-torch.arange(rows(j), dtype=torch.float64) for j in range(w)]}
    started = {k: session.world.start_all_to_all_v(v) for k, v in sends.items()}
    # the rows of f64's large messages arrive after f32's: received in the order started
    recv = {k: started[k].wait() for k in ("bool", "f64", "f32", "c128", "i64")}
    recv["c128"] = [torch.view_as_real(t) for t in recv["c128"]]  # (JSON has no complex)
    return {k: [t.tolist() for t in v] for k, v in recv.items()}


def test_all_to_all_v_of_unknown_sizes_in_one_round_or_two(tmp_path):
    w = 3
    res = run_workers(_unknown_sizes, w, tmp_path, env={"DGLX_TIMEOUT": "20"})
    big = short_bytes(w - 1) // 4 + 1
    for r, out in res.items():
        for j in range(w):  # what rank j sent to rank r
            n = 0 if r == j == 1 else big + j if (r + j) % 2 else r + j + 1
            assert out["f32"][j] == (torch.arange(n, dtype=torch.float32) + 1000 * j).tolist()
            assert out["i64"][j] == [[10 * j + r] * 3] * r
            assert out["bool"][j] == [[[bool(j % 2), bool(r % 2)]] * 2] * (j + 2 * r)
            assert out["c128"][j] == [[[float(j), float(r)]]] * j
            assert out["f64"][j] == (-torch.arange(n, dtype=torch.float64)).tolist()


def _point_to_point(session):
    """Rank 1 sends tags 2, 0, 1 in that order; rank 0 posted receives for 0, 1, 2 first and
    sees each as it lands (not in posting order), with bytes counted once."""
    before = session.counter.snapshot()
    if session.rank == 0:
        recvs = {tag: session.world.start_recv(torch.zeros(tag + 1, 2), 1, tag)
                 for tag in range(3)}
        order = []
        deadline = time.monotonic() + 20
        while len(order) < 3 and time.monotonic() < deadline:
            order += [t for t, tr in recvs.items() if t not in order and tr.done()]
            time.sleep(0.001)
        values = {t: recvs[t].wait().tolist() for t in recvs}
        out = {"order": order, "values": values}
    else:
        for tag in (2, 0, 1):
            session.world.start_send(torch.full((tag + 1, 2), float(tag)), 0, tag).wait()
            time.sleep(0.3)
        out = {}
    after = session.counter.snapshot()
    return out | {"delta": {k: after[k] - before[k] for k in after}}


def test_point_to_point_transfers_complete_out_of_order(tmp_path):
    res = run_workers(_point_to_point, 2, tmp_path, env={"DGLX_TIMEOUT": "20"})
    assert res[0]["order"] == [2, 0, 1]
    assert res[0]["values"] == {str(t): [[float(t)] * 2] * (t + 1) for t in range(3)}
    nbytes = sum((t + 1) * 2 * 4 for t in range(3))
    assert res[0]["delta"]["recv_intra"] == nbytes and res[0]["delta"]["sent_intra"] == 0
    assert res[1]["delta"]["sent_intra"] == nbytes


def _recv_from_dead(session):
    if session.rank == 1:
        time.sleep(0.5)
        os._exit(3)
    t0 = time.monotonic()
    transfer = session.world.start_recv(torch.zeros(4), 1, tag=7)
    try:
        transfer.wait()
    except PeerError as exc:
        return {"ranks": exc.ranks, "message": str(exc), "seconds": time.monotonic() - t0}
    return {"ranks": None}


def test_receive_from_a_dead_peer_names_it(tmp_path):
    res = run_workers(_recv_from_dead, 2, tmp_path, env={"DGLX_TIMEOUT": "4"},
                      expect_failure=[1], timeout=40)
    assert res[0]["ranks"] == [1] and "rank 1" in res[0]["message"], res[0]
    assert res[0]["seconds"] < 4 + 5, res[0]


def _through_host_and_native(session):
    """The same collectives on the world group as it is and through a communicator that
    carries no device itself (native=()), so every tensor goes through host memory the way
    a CUDA tensor does on a group of gloo alone: the results and counted bytes must agree."""
    from dglx_dist.runtime.comm import ByteCounter, Comm

    r, w, dev = session.rank, session.world_size, session.device
    staged = Comm("staged", session.world.group, session.world.members, r, session.topology,
                  ByteCounter(), session.health, session.env.timeout, native=())
    out = {}
    for name, comm in (("native", session.world), ("staged", staged)):
        before = comm.counter.snapshot()
        got = {"a2a": [t.tolist() for t in comm.all_to_all_v(
            [torch.full((r + j, 2), float(10 * r + j), device=dev) for j in range(w)])]}
        got["a2a_known"] = [t.tolist() for t in comm.start_all_to_all_v(
            [torch.full((1, 2), float(r), device=dev) for _ in range(w)],
            recv_rows=[1] * w).wait()]
        gathered = comm.all_gather_v(torch.arange(r + 1.0, device=dev))
        got["gather_v"] = [t.tolist() for t in gathered]
        t = torch.full((3,), float(r + 1), device=dev)
        same = comm.all_reduce(t) is t  # in place: the caller's tensor holds the sum
        pending = comm.start_all_reduce(u := torch.full((2,), float(r), device=dev), op="max")
        got["reduce"] = [t.tolist(), same, pending.wait() is u, u.tolist()]
        scattered = comm.reduce_scatter(torch.arange(2.0 * w, device=dev) * (r + 1))
        got["reduce_scatter"] = scattered.tolist()
        b = torch.full((2,), float(r), device=dev)
        got["broadcast"] = [comm.broadcast(b, src=1) is b, b.tolist()]
        into = torch.zeros(3, device=dev)
        if r == 0:
            comm.start_send(torch.arange(3.0, device=dev) + 7, peer=1, tag=5).wait()
        elif r == 1:
            got["recv_is_into"] = comm.start_recv(into, peer=0, tag=5).wait() is into
        got["recv"] = into.tolist()
        got["devices"] = sorted({str(x.device) for x in [*gathered, t, u, scattered, b, into]})
        after = comm.counter.snapshot()
        got["bytes"] = {k: after[k] - before[k] for k in after if k != "calls"}
        out[name] = got
    return out


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_tensors_through_host_memory_match_the_native_group(tmp_path, device):
    """Where CUDA exists (the GPU check of `make test-core`), the ranks share the GPU over
    gloo and both communicators move its tensors through host memory."""
    res = run_workers(_through_host_and_native, 3, tmp_path,
                      env={"DGLX_TIMEOUT": "20", "DGLX_DEVICE": device})
    for r, out in res.items():
        native, staged = out["native"], out["staged"]
        assert staged == native, r
        assert [d.split(":")[0] for d in native["devices"]] == [device], r
        assert native["reduce"] == [[6.0] * 3, True, True, [2.0, 2.0]]
        assert native["broadcast"] == [True, [1.0, 1.0]]
        assert native["recv"] == ([7.0, 8.0, 9.0] if r == 1 else [0.0] * 3)
        assert native["a2a"] == [[[float(10 * j + r)] * 2] * (j + r) for j in range(3)]
        assert native["bytes"]["sent_intra"] + native["bytes"]["sent_inter"] > 0


def _mixed_kinds(session):
    from dglx_dist.errors import InvalidValueError

    session.check_devices()  # all on the CPU: accepted
    if session.rank == 1:  # as a rank on a machine with CUDA would be (none here)
        session.device = torch.device("cuda", 0)
    try:
        session.check_devices()
    except InvalidValueError as exc:
        return str(exc)
    return None


def test_ranks_on_different_kinds_of_device_are_refused_on_every_rank(tmp_path):
    res = run_workers(_mixed_kinds, 3, tmp_path)
    lines = set(res.values())
    assert lines == {"mixed devices among ranks: rank(s) 0, 2 on cpu; rank(s) 1 on cuda; "
                     "expected every rank on the same kind of device (the same --device, and "
                     "CUDA on every machine of a GPU job)"}


def _nccl_job(session):
    """One rank per GPU under NCCL: device tensors through the comm layer, the KVStore's rows
    (host, pinned) to the device, and a DDP step on the device."""
    from torch.nn.parallel import DistributedDataParallel

    from dglx_dist.kvstore import DistKVStore, RowPolicy
    from dglx_dist.partition.book import RangeBook
    from dglx_dist.runtime.transfer import DeviceCopies

    dev, w, r = session.device, session.world_size, session.rank
    got = session.world.all_to_all_v([torch.full((j + 1, 2), float(r), device=dev)
                                      for j in range(w)])
    total = session.world.all_reduce(torch.ones(3, device=dev))
    store = DistKVStore(session)
    table = torch.arange(40.0).view(20, 2)
    store.init_data("feat", RowPolicy(RangeBook([0, 20])), {0: table} if r == 0 else {})
    rows = store.pull("feat", torch.tensor([3, 1, 7]), dedup=False)
    on_device = DeviceCopies(dev).start(rows)()
    model = DistributedDataParallel(torch.nn.Linear(2, 1).to(dev), device_ids=[dev.index])
    model(on_device).sum().backward()
    store.close()
    return {"a2a": [g.device.type == "cuda" and bool((g == j).all()) for j, g in enumerate(got)],
            "total": total.tolist(), "pinned": rows.is_pinned(),
            "rows": on_device.cpu().tolist(), "grad_on": str(model.module.weight.grad.device)}


if torch.cuda.is_available():  # defined where CUDA exists (a GPU machine's make test-core-here)
    def test_one_rank_per_gpu_under_nccl(tmp_path):
        gpus = torch.cuda.device_count()
        res = run_workers(_nccl_job, gpus, tmp_path, env={"DGLX_BACKEND": "nccl",
                                                           "DGLX_DEVICE": "cuda"})
        for r, out in res.items():
            assert out["a2a"] == [True] * gpus and out["total"] == [float(gpus)] * 3, out
            assert out["pinned"] and out["rows"] == [[6.0, 7.0], [2.0, 3.0], [14.0, 15.0]]
            assert out["grad_on"] == f"cuda:{r}", out
