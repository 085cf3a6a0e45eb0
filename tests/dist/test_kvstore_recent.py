"""The rows the last pulls brought (dglx_dist.kvstore.recent) on real gloo process groups, 2
servers x 1 rank: later pulls read them instead of asking again (rows equal to a
LocalKVStore's, fewer bytes), the oldest give way at the budget, a barrier keeps them where
nobody wrote; a collective push, a rank's own push and (at the next barrier) a peer's drop
the name written for good, a pull under way across a write keeps nothing; distdgl trains
the same with and without them, with fewer bytes."""
import pytest
import torch

from dglx_dist.kvstore import DistKVStore, LocalKVStore, RowPolicy
from dglx_dist.kvstore.copies import ID_BYTES, SLOT_BYTES, capacity, table_size
from dglx_dist.partition.book import RangeBook
from dglx_dist.testing import run_workers
from tests.dist.test_kvstore_cache import distdgl_trainer

pytestmark = pytest.mark.dist
N, F = 400, 16
VIRTUAL_2x1 = {"DGLX_VIRTUAL_SERVERS": "2", "DGLX_TIMEOUT": "20"}
KEPT = 50  # rows of a name the budget holds
BUDGET = SLOT_BYTES * N + KEPT * (F * 4 + ID_BYTES)


def _stores(session, budget):
    store, ref = DistKVStore(session, serve=True), LocalKVStore()
    policy = RowPolicy(RangeBook([0, N // 2, N]))
    full = {name: sign * torch.arange(N * F, dtype=torch.float32).view(N, F)
            for name, sign in (("feat", 1), ("emb", -1), ("other", 2))}
    me = session.server_id
    for name, rows in full.items():
        store.init_data(name, policy, {me: rows[me * N // 2:(me + 1) * N // 2].clone()})
        ref.init_data(name, policy, {p: rows[p * N // 2:(p + 1) * N // 2].clone()
                                     for p in (0, 1)})
    if budget:
        store.keep_recent(budget)
    return store, ref


def _received(session, store, ref, name, ids, wrong: list) -> int:
    """Pulls ``ids`` of ``name``; the bytes that came from the other server."""
    before = session.counter.snapshot()["recv_inter"]
    got = store.pull(name, ids)
    if not torch.equal(got, ref.pull(name, ids)):
        wrong.append(f"{name} {ids[:3].tolist()}...")
    return session.counter.snapshot()["recv_inter"] - before


def _remote(session, lo, hi):
    """Ids ``lo``..``hi`` of the other server's rows."""
    base = 0 if session.server_id == 1 else N // 2
    return torch.arange(base + lo, base + hi)


def _job(session, budget):
    store, ref = _stores(session, budget)
    wrong, got = [], {}
    a, b = _remote(session, 0, 30), _remote(session, 30, 70)
    got["first"] = _received(session, store, ref, "feat", a, wrong)
    got["again"] = _received(session, store, ref, "feat", a, wrong)
    got["mixed"] = _received(session, store, ref, "feat", torch.cat([a[::3], b, a[1::3]]),
                             wrong)  # b is new: 40 rows over the budget of 50, 20 of a go
    got["a_third"] = _received(session, store, ref, "feat", a, wrong)
    # a barrier where nobody wrote keeps the copies
    session.world.barrier()
    store.forget_written()
    got["after_barrier"] = _received(session, store, ref, "feat", a[:20], wrong)
    # a pull under way as this rank writes the name alone (a row of its own server) keeps
    # nothing, nor do later pulls
    under_way = store.start_pull("emb", b)
    own = _remote_of(1 - session.rank, 0, 1)
    store.push("emb", own, torch.full((1, F), 3.0), collective=False)
    for rank in (0, 1):
        ref.push("emb", _remote_of(1 - rank, 0, 1), torch.full((1, F), 3.0))
    under_way.wait()
    got["written_alone"] = [_received(session, store, ref, "emb", b, wrong) for _ in range(2)]
    # rank 1 writes a row of its own server alone, of which rank 0 keeps a copy: at the
    # barrier every rank drops the name, and rank 0 reads the write
    if session.rank == 1:
        store.push("feat", _remote_of(0, 5, 6), torch.full((1, F), 7.0), collective=False)
    ref.push("feat", _remote_of(0, 5, 6), torch.full((1, F), 7.0))
    session.world.barrier()
    store.forget_written()
    got["peer_wrote"] = [_received(session, store, ref, "feat", a, wrong) for _ in range(2)]
    # a collective push by one rank drops the name everywhere, for good
    got["other_kept"] = [_received(session, store, ref, "other", a, wrong) for _ in range(2)]
    mine = _remote_of(0, 0, 2) if session.rank == 0 else torch.zeros(0, dtype=torch.int64)
    store.push("other", mine, torch.full((mine.numel(), F), 5.0))
    ref.push("other", _remote_of(0, 0, 2), torch.full((2, F), 5.0))
    got["pushed"] = [_received(session, store, ref, "other", a, wrong) for _ in range(2)]
    store.close()
    return {"wrong": wrong, **got}


def _remote_of(rank, lo, hi):
    """Rank ``rank``'s remote ids ``lo``..``hi`` (the other server's rows)."""
    base = 0 if rank == 1 else N // 2
    return torch.arange(base + lo, base + hi)


def _pulled(rows: int) -> int:
    """The bytes a rank receives where both ask the other server for ``rows`` rows: the
    rows, and the peer's request (a head and the ids, int64)."""
    return rows * F * 4 + (rows + 1) * 8 if rows else 0


def test_later_pulls_read_the_rows_the_last_ones_brought(tmp_path):
    res = run_workers(_job, 2, tmp_path, BUDGET, env=VIRTUAL_2x1)
    ref = run_workers(_job, 2, tmp_path / "off", 0, env=VIRTUAL_2x1)
    for rank, out in res.items():
        assert out["wrong"] == [], out["wrong"]
        off = ref[rank]
        assert off["wrong"] == [], off["wrong"]
        assert out["first"] == off["first"] == _pulled(30)
        assert out["again"] == 0 and off["again"] == _pulled(30)
        # of the 60 rows: the 20 of a kept, the 40 of b pulled (then 20 of a overwritten)
        assert out["mixed"] == _pulled(40) and off["mixed"] == _pulled(60)
        assert out["a_third"] == _pulled(20), out  # the oldest 20 gave way
        assert out["after_barrier"] == 0, out
        assert out["written_alone"] == [_pulled(40)] * 2, out
        assert out["peer_wrote"] == [_pulled(30)] * 2, out
        assert out["other_kept"] == [_pulled(30), 0], out
        assert out["pushed"] == [_pulled(30)] * 2, out  # written: not kept any more


def test_a_budget_short_of_a_slot_per_row_keeps_rows_through_fewer_slots(tmp_path):
    """A budget whose half does not hold a slot per row of the name (a graph of many nodes)
    finds its copies through a direct-mapped table of fewer slots, and the rows it keeps
    still serve the next pull (before, such a budget kept nothing)."""
    budget = SLOT_BYTES * N  # 200 slots for 400 rows, and 11 rows
    kept = capacity(budget, N, F * 4)
    assert table_size(budget, N) == N // 2 and kept == 11
    res = run_workers(_job, 2, tmp_path, budget, env=VIRTUAL_2x1)
    for out in res.values():
        assert out["wrong"] == [], out["wrong"]
        assert out["first"] == _pulled(30) and out["again"] == _pulled(30 - kept), out


def _train(session, pdir_path):
    runs = {}
    for reuse_mb in (0.0, 1.0):
        trainer = distdgl_trainer(session, pdir_path, bool(reuse_mb), batch_size=32,
                                  reuse_mb=reuse_mb)
        trainer.fit(2)
        runs[reuse_mb] = {"params": [p.detach().clone() for p in trainer.model.parameters()],
                          "bytes": sum(r["bytes_recv_inter"] for r in trainer.history),
                          "reused": sum(r.get("reused_bytes", 0) for r in trainer.history)}
        trainer.close()
    same = all(torch.equal(a, b) for a, b in zip(runs[0.0]["params"], runs[1.0]["params"]))
    return {"same": same, "bytes": [runs[m]["bytes"] for m in (0.0, 1.0)],
            "reused": [runs[m]["reused"] for m in (0.0, 1.0)]}


def test_distdgl_trains_the_same_with_fewer_bytes(tmp_path, cora_parts):
    res = run_workers(_train, 2, tmp_path, str(cora_parts), env=VIRTUAL_2x1, timeout=300)
    for out in res.values():
        assert out["same"], "parameters differ with the recent rows"
        assert out["reused"][0] == 0 and out["reused"][1] > 0, out
        assert out["bytes"][1] < out["bytes"][0], out


def _read_after_a_peer_wrote(session, cache):
    """Through DGL's API on 2 servers: rank 0 adds 1 to every node's features after each
    step (between two barriers); each step's read of the features of its input nodes must
    see every write so far, though this rank keeps copies of rows it pulled before."""
    import dglx_dist
    from dglx_dist.data import CoraGraphDataset

    graph = CoraGraphDataset()[0]
    graph.ndata["feat"] = torch.zeros(graph.num_nodes(), 4)
    g = dglx_dist.distribute(graph, "distdgl", cache_dir=cache, session=session)
    loader = dglx_dist.DataLoader(g, dglx_dist.node_split(g.ndata["train_mask"], g),
                                  dglx_dist.NeighborSampler([5, 5]), batch_size=16)
    seen, everyone = [], torch.arange(g.num_nodes())
    for step, (input_nodes, _, _) in enumerate(loader):
        if step == 4:
            break
        for _ in range(2):  # the second read: the copies of the first's rows
            seen.append(sorted(set(g.ndata["feat"][input_nodes].flatten().tolist())))
        g.barrier()
        if session.rank == 0:
            g.ndata["feat"][everyone] = g.ndata["feat"][everyone] + 1
        g.barrier()
    reused = session.counter.snapshot()["reused"]
    g.close()
    return {"seen": seen, "reused": reused}


def test_a_barrier_drops_the_copies_a_peer_may_have_written(tmp_path):
    res = run_workers(_read_after_a_peer_wrote, 2, tmp_path / "run", str(tmp_path / "cache"),
                      env=VIRTUAL_2x1)
    for out in res.values():
        assert out["seen"] == [[float(step // 2)] for step in range(8)], out["seen"]
    assert all(out["reused"] > 0 for out in res.values()), res
