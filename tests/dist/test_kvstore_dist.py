"""The distributed KVStore on real gloo process groups, checked against LocalKVStore.

Every worker builds the same LocalKVStore reference and replays every rank's requests on it (the
requests are drawn from seeds known to all ranks), so each rank checks its own answers.
"""
import os

import pytest
import torch

from dglx_dist.kvstore import (ColumnPolicy, DistEmbedding, DistKVStore, LocalKVStore, RowPolicy,
                               SparseAdagrad, SparseAdam)
from dglx_dist.partition.book import FeatureSlices, HashBook, RangeBook
from dglx_dist.runtime.sized import HEAD_BYTES
from dglx_dist.testing import run_workers

pytestmark = pytest.mark.dist
N, D = 40, 5
VIRTUAL_2x2 = {"DGLX_VIRTUAL_SERVERS": "2", "DGLX_TIMEOUT": "20"}
ONE_SERVER_2 = {"DGLX_VIRTUAL_SERVERS": "1", "DGLX_TIMEOUT": "20"}
TWO_SERVERS_1 = {"DGLX_VIRTUAL_SERVERS": "2", "DGLX_TIMEOUT": "20"}


def _num_parts(session, per):
    return session.topology.num_servers if per == "server" else session.world_size


def _policies(num_parts, book):
    if book == "range":
        bounds = torch.linspace(0, N, num_parts + 1).round().long().tolist()
        row = RowPolicy(RangeBook(bounds))
    else:
        row = RowPolicy(HashBook(N, num_parts, seed=3))
    return row, ColumnPolicy(FeatureSlices.even(D, num_parts), N)


def _mine(store, policy, full, only_local=None):
    """part_data for the parts this rank's server holds (optionally only on one local rank)."""
    session = store.session
    if only_local is not None and session.local_rank != only_local:
        return None
    servers = store.part_servers(policy)
    return {p: full[policy.part_ids(p)][(slice(None), *_cols(policy, p))].clone()
            for p, s in enumerate(servers) if s == session.server_id}


def _cols(policy, p):
    return (policy.slices.slice(p),) if policy.splits_columns else ()


def _register(store, row, col, only_local=None):
    feat = torch.arange(N * D, dtype=torch.float32).view(N, D)
    label = torch.arange(N, dtype=torch.int64) * 7
    args = [("feat", row, feat), ("label", row, label), ("cols", col, feat * 2)]
    for name, policy, full in args:
        data = _mine(store, policy, full, only_local) if isinstance(store, DistKVStore) else \
            {p: full[policy.part_ids(p)][(slice(None), *_cols(policy, p))] for p in
             range(policy.num_parts)}
        store.init_data(name, policy, data, trailing_shape=tuple(full.shape[1:]),
                        dtype=full.dtype)


def _request(step, rank, n=12):
    g = torch.Generator().manual_seed(1000 * step + rank)
    ids = torch.randint(0, N, (int(torch.randint(0, n, (1,), generator=g)),), generator=g)
    return ids, torch.randn((ids.numel(), D), generator=g)


def _close(got, want):
    """Equal dtype and shape, values equal up to float rounding (sums may group differently)."""
    return (got.dtype == want.dtype and got.shape == want.shape
            and bool(torch.allclose(got.double(), want.double(), rtol=1e-6, atol=1e-5)))


def _round_trip(session, per, book, only_local):
    store, ref = DistKVStore(session), LocalKVStore()
    row, col = _policies(_num_parts(session, per), book)
    _register(store, row, col, only_local)
    _register(ref, row, col)
    session.world.barrier()  # virtual servers share /dev/shm: wait for every server's unlink
    leftovers = [f for f in os.listdir(store.shm_dir) if store.token in f]
    names, w, ok = ["feat", "label", "cols"], session.world_size, []
    for step in range(6):
        name = names[(step + session.rank) % 3]  # ranks pull different names in one step
        ids, _ = _request(step, session.rank)
        # odd steps skip deduplication (the ids do have duplicates: still answered)
        ok.append(_close(store.pull(name, ids, dedup=step % 2 == 0), ref.pull(name, ids)))
        # a pull started before the pushes reads the rows as they were when it started, and
        # its answers travel while the pushes run their own collectives
        ahead = store.start_pull("cols", ids, dedup=step % 2 == 1)
        want_ahead = ref.pull("cols", ids)
        op = "add" if step % 2 else "assign"
        for r in range(w):  # replay every rank's push on the reference, in rank order
            rid, vals = _request(100 + step, r)
            rname = names[(step + r) % 2 * 2]  # "feat" or "cols"
            if r == session.rank:
                store.push(rname, rid, vals, op=op)
            ref.push(rname, rid, vals, op=op)
        ok.append(_close(ahead.wait(), want_ahead) and ahead.wait() is ahead.wait())
        for name in names:
            everything = torch.arange(N).flip(0)
            got = store.pull(name, everything, dedup=step % 2 == 1)
            ok.append(_close(got, ref.pull(name, everything)))
    # rows pulled for a GPU job land in page-locked memory, ready for a non-blocking copy
    pulled = store.pull("feat", torch.arange(N), dedup=False)
    ok.append(pulled.is_pinned() == (session.device.type == "cuda"))
    store.close()
    return {"ok": ok, "token": store.token, "leftovers": leftovers}


def _round_trips(session, configs):
    return [_round_trip(session, *config) for config in configs]


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_round_trip_2x2(tmp_path, device):
    """2 servers x 2 ranks: a part per server (rows given by both or one local rank), per rank;
    where CUDA exists (`make test-core` on a GPU machine) also for ranks computing on it."""
    configs = [("server", "range", None), ("server", "hash", 1), ("rank", "hash", None)]
    _check_round_trips(run_workers(_round_trips, 4, tmp_path, configs,
                                   env={**VIRTUAL_2x2, "DGLX_DEVICE": device}))


@pytest.mark.parametrize("env", [ONE_SERVER_2, TWO_SERVERS_1], ids=["1x2", "2x1"])
def test_round_trip_world_2(tmp_path, env):
    configs = [("server", "range", None), ("rank", "hash", None)]
    _check_round_trips(run_workers(_round_trips, 2, tmp_path, configs, env=env))


def _check_round_trips(res):
    for i in range(len(res[0])):
        for r, outs in res.items():
            assert all(outs[i]["ok"]), (i, r, outs[i]["ok"])
            assert outs[i]["leftovers"] == [], outs[i]["leftovers"]
        token = res[0][i]["token"]
        assert all(outs[i]["token"] == token for outs in res.values())
        assert not [f for f in os.listdir("/dev/shm") if token in f]


def _bytes(session, per):
    store = DistKVStore(session)  # each rank asks alone (the default): the protocol's bytes
    row, col = _policies(_num_parts(session, per), "range")
    _register(store, row, col)
    servers = store.part_servers(row)
    owner = [servers[int(p)] for p in row.part_of(torch.arange(N))]
    own = torch.tensor([i for i in range(N) if owner[i] == session.server_id])
    remote = torch.tensor([i for i in range(N) if owner[i] != session.server_id])
    deltas = []
    for ids in (own[[0, 1, 1, 3]], torch.cat([own[:2], remote[[0, 2, 2, 5, 0]]])):
        before = session.counter.snapshot()
        asked = ids if session.rank == 0 else torch.zeros(0, dtype=torch.int64)
        got = store.pull("feat", asked)
        assert torch.equal(got, torch.arange(N * D, dtype=torch.float32).view(N, D)[asked])
        after = session.counter.snapshot()
        deltas.append({k: after[k] - before[k] for k in after})
    store.close()
    return deltas


def _own_rows_fail(session):
    """Rank 0's read of its own rows fails in the middle of a pull: it raises that error
    once it has answered its peer, whose pull gets its rows; the next pull works on both."""
    from dglx_dist.kvstore.shards import PullPlan

    store = DistKVStore(session)
    row, col = _policies(_num_parts(session, "server"), "range")
    _register(store, row, col)
    full = torch.arange(N * D, dtype=torch.float32).view(N, D)
    ids = torch.tensor([1, N - 2, 3, N - 1])  # both servers' rows, on each rank
    read = PullPlan.fill_local
    if session.rank == 0:
        def broken(plan):
            PullPlan.fill_local = read  # once
            raise RuntimeError("the own rows could not be read")
        PullPlan.fill_local = broken
    try:
        first = bool(torch.equal(store.pull("feat", ids), full[ids]))
    except RuntimeError as exc:
        first = str(exc)
    second = bool(torch.equal(store.pull("feat", ids.flip(0)), full[ids.flip(0)]))
    store.close()
    return {"first": first, "second": second}


def test_a_failed_read_of_own_rows_raises_after_serving_the_peers(tmp_path):
    res = run_workers(_own_rows_fail, 2, tmp_path, env=TWO_SERVERS_1)
    assert res[0] == {"first": "the own rows could not be read", "second": True}
    assert res[1] == {"first": True, "second": True}


def _bytes_all(session):
    return {per: _bytes(session, per) for per in ("server", "rank")}


def test_pull_byte_counts(tmp_path):
    """Own-server rows cost no payload bytes; remote rows exactly their ids out, rows back
    (each rank asking alone)."""
    res = run_workers(_bytes_all, 4, tmp_path, env=VIRTUAL_2x2)
    row_bytes, n_remote = D * 4, 3  # remote[[0, 2, 2, 5, 0]] has 3 unique ids
    payload = ("sent_intra", "sent_inter", "recv_intra", "recv_inter")
    for r, per_placement in res.items():
        for per, (local, mixed) in per_placement.items():
            # the requests lead with their row counts (a 16-byte header to the one cross
            # peer); the answers do not (every caller knows the size of what it asked for)
            assert {k: local[k] for k in payload} == dict.fromkeys(payload, 0), (per, r, local)
            assert local["control_sent"] == HEAD_BYTES and local["calls"] == 2, (per, r, local)
            want = dict.fromkeys(payload, 0)
            if r == 0:  # requester: [name index, 3 unique ids] out, 3 rows back
                want.update(sent_inter=8 * (1 + n_remote), recv_inter=n_remote * row_bytes)
            if r == 2:  # rank 0's cross peer on the other server answers
                want.update(recv_inter=8 * (1 + n_remote), sent_inter=n_remote * row_bytes)
            assert {k: mixed[k] for k in payload} == want, (per, r, mixed)


def _server_pulls(session, coalesce):
    """Both ranks of server 0 pull overlapping rows of server 1 (and some of their own) in
    one exchange, of two names with rows of different widths; server 1's ranks pull their
    own rows. The rows, and the bytes each rank received."""
    store = DistKVStore(session)
    if coalesce:
        store.pull_per_server()
    row, col = _policies(session.topology.num_servers, "hash")
    _register(store, row, col)
    servers = store.part_servers(row)
    on = torch.tensor([servers[p] for p in row.part_of(torch.arange(N)).tolist()])
    shared = torch.randint(0, N, (30,), generator=torch.Generator().manual_seed(0))
    own = torch.randint(0, N, (10,), generator=torch.Generator().manual_seed(session.rank))
    ids = torch.cat([shared, own])
    if session.server_id == 1:
        ids = ids[on[ids] == 1]
    before = session.counter.snapshot()
    feat, label = store.start_pull_many([("feat", ids), ("label", ids.flip(0))]).wait()
    after = session.counter.snapshot()
    ref = LocalKVStore()
    _register(ref, row, col)
    same = torch.equal(feat, ref.pull("feat", ids)) and \
        torch.equal(label, ref.pull("label", ids.flip(0)))
    store.close()
    return {"same": same, "remote": sorted(set(ids[on[ids] != session.server_id].tolist())),
            "bytes": {k: after[k] - before[k] for k in ("recv_inter", "recv_intra")}}


def _server_pulls_both_ways(session):
    return [_server_pulls(session, c) for c in (True, False)]


def test_a_server_pulls_each_remote_row_once(tmp_path):
    """Coalesced (``pull_per_server()``), rows both ranks of a server
    ask for cross the link once: the server receives the rows of the union of its ranks'
    remote ids, once each, and each rank gets exactly the rows it asked for (as asking
    alone, which receives the rows of each rank's own remote ids)."""
    both = run_workers(_server_pulls_both_ways, 4, tmp_path, env=VIRTUAL_2x2)
    res = {c: {r: both[r][i] for r in both} for i, c in enumerate((True, False))}
    width = D * 4 + 8  # a feat row and a label row
    union = set().union(*(res[True][r]["remote"] for r in (0, 1)))
    alone = sum(len(res[False][r]["remote"]) for r in (0, 1))
    got = {c: sum(res[c][r]["bytes"]["recv_inter"] for r in (0, 1)) for c in res}
    assert got[True] == len(union) * width < got[False] == alone * width, got
    assert all(res[c][r]["same"] for c in res for r in range(4))
    assert all(res[False][r]["bytes"]["recv_intra"] == 0 for r in range(4))
    assert all(res[True][r]["bytes"]["recv_intra"] > 0 for r in (0, 1))  # rows passed on


def _train(session, kind, steps):
    ref, store = LocalKVStore(seed=5), DistKVStore(session, seed=5)
    row, _ = _policies(session.topology.num_servers, "hash")
    init = lambda shape, dtype: torch.randn(shape, dtype=dtype)  # noqa: E731
    make_opt = {"adagrad": lambda e: SparseAdagrad(e, lr=0.3),
                "adam": lambda e: SparseAdam(e, lr=0.1)}[kind]
    emb, emb_ref = (DistEmbedding(s, "emb", N, D, row, init=init) for s in (store, ref))
    opt, opt_ref = make_opt([emb]), make_opt([emb_ref])
    everything, touched = torch.arange(N), torch.zeros(N, dtype=torch.bool)
    start = store.pull("emb", everything)
    for step in range(steps):
        for r in range(session.world_size):
            ids, weight = _request(step, r, n=20)
            touched[ids] = True
            if r == session.rank:
                (emb(ids) * weight).square().sum().backward()
            (emb_ref(ids) * weight).square().sum().backward()
        opt.step()
        opt_ref.step()
    diffs = {}
    for name in ref.names():
        got, want = store.pull(name, everything), ref.pull(name, everything)
        diffs[name] = float(((got - want).abs() / want.abs().clamp_min(1)).max())
    changed = (store.pull("emb", everything) != start).any(1)
    store.close()
    return {"diffs": diffs, "changed": changed.tolist(), "touched": touched.tolist()}


def _train_all(session):
    return {kind: _train(session, kind, 3) for kind in ("adagrad", "adam")}


def test_sparse_optimizers_match_local(tmp_path):
    res = run_workers(_train_all, 4, tmp_path, env=VIRTUAL_2x2)
    for r, per_kind in res.items():
        for kind, out in per_kind.items():
            assert max(out["diffs"].values()) < 1e-5, (kind, r, out["diffs"])
            assert len(out["diffs"]) == (2 if kind == "adagrad" else 4)
            assert out["changed"] == out["touched"] and any(out["touched"]), kind


def _bad_calls(session):
    store, ref = DistKVStore(session), LocalKVStore()
    row, col = _policies(session.topology.num_servers, "range")
    _register(store, row, col)
    _register(ref, row, col)
    ids = torch.tensor([0, N - 1, 17])
    errors = {}
    calls = {"pull_dtype": lambda: store.pull("feat", ids.int()),
             "pull_range": lambda: store.pull("feat", torch.tensor([N])),
             "pull_name": lambda: store.pull("nope", ids),
             "push_op": lambda: store.push("feat", ids, torch.ones(3, D), op="nope"),
             "push_shape": lambda: store.push("feat", ids, torch.ones(3, D + 1))}
    for what, call in calls.items():
        if session.rank == 1:
            try:
                call()
            except (KeyError, ValueError) as exc:
                errors[what] = f"{type(exc).__name__}: {exc}"
        elif what.startswith("pull"):  # the other ranks' calls complete normally
            assert torch.equal(store.pull("cols", ids), ref.pull("cols", ids))
        else:
            store.push("feat", ids, torch.full((3, D), float(session.rank)), op="add")
    for r in (0, 2, 3):
        for _ in range(2):
            ref.push("feat", ids, torch.full((3, D), float(r)), op="add")
    assert torch.equal(store.pull("feat", torch.arange(N)), ref.pull("feat", torch.arange(N)))
    errors.update(_bad_inits(session, store, row))
    store.close()
    return errors


def _bad_inits(session, store, row):
    errors = {}
    bad = {"disagree": lambda: store.init_data(
               "x", row, trailing_shape=(D,) if session.rank != 3 else (D + 1,)),
           "placement": lambda: store.init_data(
               "y", _policies(3, "range")[0], trailing_shape=(D,)),
           "elsewhere": lambda: store.init_data(
               "z", row, {1 - session.server_id: torch.zeros(20, D)} if session.rank == 2
               else None, trailing_shape=(D,))}
    for what, call in bad.items():
        try:
            call()
        except ValueError as exc:
            errors[what] = str(exc)
    return errors


def test_bad_arguments_raise_on_the_caller_only(tmp_path):
    res = run_workers(_bad_calls, 4, tmp_path, env=VIRTUAL_2x2, timeout=60)
    errors = res[1]
    assert "1-D torch.int64" in errors["pull_dtype"]
    assert "id 40 at position 0 is outside [0, 40)" in errors["pull_range"]
    assert "unknown tensor name 'nope'" in errors["pull_name"] and "'feat'" in errors["pull_name"]
    assert "unknown push op 'nope'" in errors["push_op"] and "'assign'" in errors["push_op"]
    assert "expected torch.float32 of shape (3, 5)" in errors["push_shape"]
    for r in (0, 2, 3):
        assert not any(k.startswith(("pull", "push")) for k in res[r]), res[r]
    # init_data is collective: a bad or disagreeing rank makes every rank raise
    for r, out in res.items():
        assert "disagree" in out["disagree"], out
        assert "3 parts" in out["placement"] and "needs 2 parts" in out["placement"], out
        assert ("failed on ranks [2]" in out["elsewhere"] if r != 2
                else "live on other servers" in out["elsewhere"]), out
    assert "[3]" in res[0]["disagree"] and "[0, 1, 2]" in res[3]["disagree"]


# -- non-collective pull / push (collective=False): the owners' serving threads answer ---------
FAST = {"DGLX_TIMEOUT": "8"}


def _serving_threads():
    import threading
    return [t.name for t in threading.enumerate() if "kvserve" in t.name]


def _everything(name):
    return torch.arange(N).flip(0)


def _alone(session, per, book):
    """Rank 0 pulls every partition's rows while the others wait in a barrier; then every rank
    pulls a different number of times; bad ids fail on the caller only."""
    store, ref = DistKVStore(session, serve=True), LocalKVStore()
    row, col = _policies(_num_parts(session, per), book)
    _register(store, row, col)
    _register(ref, row, col)
    ok, errors = [], {}
    if session.rank == 0:
        for name in ("feat", "label", "cols"):
            ok.append(_close(store.pull(name, _everything(name), collective=False),
                             ref.pull(name, _everything(name))))
            ids, _ = _request(7, 0, n=30)
            for dedup in (True, False):
                got = store.pull(name, ids, dedup=dedup, collective=False)
                ok.append(_close(got, ref.pull(name, ids)))
        try:
            store.pull("feat", torch.tensor([N]), collective=False)
        except ValueError as exc:
            errors["range"] = str(exc)
    session.world.barrier()
    for step in range(2 * session.rank + 1):  # 1, 3, 5, 7 pulls
        ids, _ = _request(step, session.rank, n=25)
        name = ("feat", "label", "cols")[step % 3]
        ok.append(_close(store.pull(name, ids, collective=False), ref.pull(name, ids)))
    session.world.barrier()
    before = _serving_threads()
    store.close()
    return {"ok": ok, "errors": errors, "before": before, "after": _serving_threads()}


def _alone_all(session, configs):
    return [_alone(session, *config) for config in configs]


@pytest.mark.parametrize("world,env", [(2, TWO_SERVERS_1), (4, VIRTUAL_2x2)],
                         ids=["2x1", "2x2"])
def test_p2p_pull_from_one_rank(tmp_path, world, env):
    configs = [("server", "range"), ("rank", "hash")]
    res = run_workers(_alone_all, world, tmp_path, configs, env={**env, **FAST}, timeout=90)
    for r, outs in res.items():
        for out in outs:
            assert out["ok"] and all(out["ok"]), (r, out["ok"])
            assert len(out["before"]) == 1 and out["after"] == [], (r, out)
            assert ("id 40 at position 0" in out["errors"].get("range", "")) == (r == 0), out
    assert len(res[0][0]["ok"]) == 9 + 1 and len(res[world - 1][0]["ok"]) == 2 * world - 1


def _push_alone(session):
    """Rank 0 alone pushes (assign, add, a registered op); then every rank pulls the rows."""
    store, ref = DistKVStore(session, serve=True), LocalKVStore()
    row, col = _policies(session.world_size, "hash")  # a part per rank: writers everywhere
    for s in (store, ref):
        s.register_op("scale", lambda cur, vals, local, state: cur * vals)
    _register(store, row, col)
    _register(ref, row, col)
    if session.rank == 0:
        for step, op in enumerate(("assign", "add", "scale", "assign")):
            ids, vals = _request(200 + step, 0, n=30)
            name = ("feat", "cols")[step % 2]
            store.push(name, ids, vals, op=op, collective=False)
            ref.push(name, ids, vals, op=op)
    else:
        for step, op in enumerate(("assign", "add", "scale", "assign")):
            ids, vals = _request(200 + step, 0, n=30)
            ref.push(("feat", "cols")[step % 2], ids, vals, op=op)
    session.world.barrier()  # rank 0's pushes were acknowledged before it got here
    ok = []
    for name in ("feat", "cols", "label"):
        want = ref.pull(name, _everything(name))
        ok.append(_close(store.pull(name, _everything(name), collective=False), want))
        ok.append(_close(store.pull(name, _everything(name)), want))  # collective
    # a store nobody closes: the session's shutdown stops its serving thread
    DistKVStore(session, serve=True).init_data("left_open", row, trailing_shape=(2,))
    store.close()
    return ok


def test_p2p_push_from_one_rank(tmp_path):
    res = run_workers(_push_alone, 4, tmp_path, env={**VIRTUAL_2x2, **FAST}, timeout=90)
    for r, ok in res.items():
        assert all(ok), (r, ok)


def _dead_owner(session):
    import time
    from dglx_dist.runtime.comm import PeerError

    store = DistKVStore(session, serve=True)
    row, col = _policies(session.topology.num_servers, "range")
    _register(store, row, col)
    session.world.barrier()
    if session.rank == 1:
        time.sleep(0.5)  # while rank 0 pulls
        os._exit(3)
    start, pulls = time.monotonic(), 0
    try:
        while time.monotonic() - start < 30:
            store.pull("feat", torch.arange(N), collective=False)
            pulls += 1
    except PeerError as exc:
        return {"ranks": exc.ranks, "message": str(exc), "after": time.monotonic() - start,
                "pulls": pulls}
    return {"ranks": None, "pulls": pulls}


def test_p2p_dead_owner_is_named(tmp_path):
    res = run_workers(_dead_owner, 2, tmp_path, env={**TWO_SERVERS_1, "DGLX_TIMEOUT": "5"},
                      timeout=60, expect_failure=[1])
    out = res[0]
    assert out["ranks"] == [1], out
    assert "rank 1" in out["message"] and out["pulls"] > 0, out
    assert out["after"] < 0.5 + 5 + 5, out
