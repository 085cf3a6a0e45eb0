"""The remote-row cache (dglx_dist.kvstore.cache) on real gloo process groups, 2 servers x 2
ranks: the rows it chooses, pulls through it equal to a LocalKVStore's, its budget, a push
that drops it, refusals; counts set aside until the fill (pulls between count nothing);
fills from the rows the pulls brought (no rows between servers) and again with the next
epoch's misses; while it learns, the kept rows serve later pulls, and a barrier drops only a
name a peer wrote alone; distdgl training with and without it on the same steps, its fill as the
second epoch starts; and through DGL's API, a training loader built anew for the next epoch
fills it where an evaluation's loader does not."""
import pytest
import torch

from dglx_dist.errors import StateError
from dglx_dist.kvstore import DistKVStore, LocalKVStore, RowPolicy
from dglx_dist.kvstore.cache import choose_rows
from dglx_dist.kvstore.copies import ID_BYTES
from dglx_dist.models import SAGE
from dglx_dist.partition import PartitionDir
from dglx_dist.partition.book import RangeBook
from dglx_dist.testing import run_workers
from dglx_dist.trainer import Trainer

pytestmark = pytest.mark.dist
N, F = 400, 16
VIRTUAL_2x2 = {"DGLX_VIRTUAL_SERVERS": "2", "DGLX_TIMEOUT": "20"}
ROW = F * 4 + ID_BYTES
BUDGET = 60 * ROW  # 60 of the 200 rows of the other server


def _asks(rank: int) -> torch.Tensor:
    """A rank's pulls while counting: low ids more often (each server's ranks the same
    skew), some of its own server's rows too."""
    g = torch.Generator().manual_seed(rank)
    return [torch.unique((torch.rand(120, generator=g) ** 2 * N).long()) for _ in range(3)]


def _register(store, session=None):
    policy = RowPolicy(RangeBook([0, N // 2, N]))
    full = {"feat": torch.arange(N * F, dtype=torch.float32).view(N, F),
            "emb": -torch.arange(N * F, dtype=torch.float32).view(N, F)}
    for name, rows in full.items():
        parts = [0, 1] if session is None else [session.server_id]
        store.init_data(name, policy, {p: rows[p * N // 2:(p + 1) * N // 2].clone()
                                       for p in parts})


def _expected_choice(server: int, ranks: list[int]) -> dict[str, torch.Tensor]:
    """What the server should cache: its ranks' counts of the other server's rows."""
    counts = torch.zeros(N, dtype=torch.int32)
    for r in ranks:
        for ids in _asks(r):
            remote = ids[(ids >= N // 2) != (server == 1)]
            counts.index_add_(0, remote, torch.ones(remote.numel(), dtype=torch.int32))
    return choose_rows({0: counts}, {0: F * 4}, BUDGET).get(0, torch.zeros(0, dtype=torch.int64))


def _every_row_same(store, ref) -> bool:
    every = torch.arange(N)
    return torch.equal(store.pull("feat", every), ref.pull("feat", every))


def _cache_job(session):
    out = {}
    store, ref = DistKVStore(session, serve=True), LocalKVStore()
    _register(store, session)
    _register(ref)
    try:
        store.start_cache(10 * 2**40)
        out["too_big"] = "not refused"
    except ValueError as exc:
        out["too_big"] = str(exc)
    store.start_cache(BUDGET)
    inter = []
    for epoch in range(2):
        before = session.counter.snapshot()
        for ids in _asks(session.rank):
            mixed = ids[torch.randperm(ids.numel(), generator=torch.Generator().manual_seed(0))]
            for name in ("feat", "emb"):
                if not torch.equal(store.pull(name, ids), ref.pull(name, ids)):
                    out.setdefault("wrong", []).append(f"{name} epoch {epoch}")
                # unique ids in mixed order: one gather of own and cached rows
                if not torch.equal(store.pull(name, mixed, dedup=False), ref.pull(name, mixed)):
                    out.setdefault("wrong", []).append(f"{name} epoch {epoch}, one gather")
        if epoch == 0:  # "emb" is written while counting: never cached
            store.push("emb", torch.tensor([0]), torch.zeros(1, F))
            ref.push("emb", torch.tensor([0]), torch.zeros(1, F))
            # the counts set aside: pulls before the fill (every row, three times) count
            # nothing, or the fill would choose other rows
            out["aside"] = [store.set_aside_counts()]
            for _ in range(3):
                store.pull("feat", torch.arange(N))
            out["aside"] += [store.set_aside_counts(), bool(store.cache.held)]
            store.fill_cache()
        after = session.counter.snapshot()
        inter.append(after["recv_inter"] - before["recv_inter"])
    held = store.cache.held
    out.update(inter=inter, hits=after["cache_hits"], cached=sorted(held),
               nbytes=store.cache.nbytes, ids=held[0].ids.tolist() if 0 in held else [],
               joined=held[0].base if 0 in held else None)
    try:  # one rank's push cannot reach the other servers' copies
        store.push("feat", torch.tensor([1]), torch.zeros(1, F), collective=False)
        out["p2p"] = "not refused"
    except StateError as exc:
        out["p2p"] = str(exc)
    session.world.barrier()
    # a collective push drops every rank's copies, even where this rank wrote nothing
    ids = torch.tensor([N // 2 + session.rank, N // 2 - 1 - session.rank])
    values = torch.full((2, F), 1000.0 + session.rank)
    mine = 2 if session.rank == 0 else 0
    store.push("feat", ids[:mine], values[:mine])
    ref.push("feat", torch.tensor([N // 2, N // 2 - 1]), torch.full((2, F), 1000.0))
    out["after_push"] = sorted(store.cache.held)
    out["rows_after_push"] = _every_row_same(store, ref)
    store.close()
    return out


def test_cache_chooses_serves_and_drops_rows_exactly(tmp_path):
    res = run_workers(_cache_job, 4, tmp_path, env=VIRTUAL_2x2)
    for rank, out in res.items():
        server = rank // 2
        assert "cache_mb=" in out["too_big"] and "MB of" in out["too_big"], out["too_big"]
        assert out.get("wrong") is None, out["wrong"]
        want = _expected_choice(server, [2 * server, 2 * server + 1])
        assert out["aside"] == [True, False, False], out["aside"]
        assert out["cached"] == [0] and out["ids"] == want.tolist()  # "emb" (index 1) not
        assert out["joined"] == server  # the copies follow the server's one part
        assert 0 < out["nbytes"] <= BUDGET and out["nbytes"] == want.numel() * ROW
        assert out["hits"] > 0 and out["inter"][1] < out["inter"][0], out
        assert "collective=False" in out["p2p"] and "cached" in out["p2p"], out["p2p"]
        assert out["after_push"] == [] and out["rows_after_push"], out


def _refill_job(session):
    """Three epochs of pulls with a budget that holds every remote row: the middle half of
    the ids; every id but the first and the last (each server's other half: a second
    fill); every id (one row new to each server, fewer than REFILL_SHARE of what it
    holds: the third fill adds it, and the counting ends). What each fill moved between servers, the
    ids held after each, and whether the part is still the memory init_data made (the
    copies grew its file: the part was not copied). "by_rank" has a part per rank, two on
    each server: its copies have a file of their own, which grows the same way."""
    store, ref = DistKVStore(session), LocalKVStore()
    _register(store, session)
    _register(ref)
    by_rank = RowPolicy(RangeBook([0, N // 4, N // 2, 3 * N // 4, N]))
    rows = torch.arange(N * F, dtype=torch.float64).view(N, F) / 7
    store.init_data("by_rank", by_rank, {session.rank: rows[session.rank * N // 4:
                                                            (session.rank + 1) * N // 4]})
    ref.init_data("by_rank", by_rank, {p: rows[p * N // 4:(p + 1) * N // 4] for p in range(4)})
    part = store.local_parts("feat")[session.server_id]
    store.start_cache(N * ROW + N * (F * 8 + ID_BYTES))
    out = {"wrong": [], "fill_bytes": [], "held": [], "counting": [], "by_rank": []}
    g = torch.Generator().manual_seed(session.rank)
    for epoch in range(3):
        for _ in range(3):
            ids = torch.unique(torch.randint(N // 4, 3 * N // 4, (40,), generator=g)) \
                if epoch == 0 else torch.arange(N)
            if epoch == 1:
                ids = ids[(ids != 0) & (ids != N - 1)]  # rows epoch 0 did not pull
            for name in ("feat", "by_rank"):
                if not torch.equal(store.pull(name, ids), ref.pull(name, ids)):
                    out["wrong"].append((name, epoch))
        before = session.counter.snapshot()["recv_inter"]
        store.fill_cache()
        out["fill_bytes"].append(session.counter.snapshot()["recv_inter"] - before)
        out["held"].append(sorted(store.cache.held[0].ids.tolist()))
        out["by_rank"].append(sorted(store.cache.held[2].ids.tolist()))
        out["counting"].append(store.cache.counting)
    every = torch.arange(N)
    out["rows"] = _every_row_same(store, ref) and torch.equal(store.pull("by_rank", every),
                                                              ref.pull("by_rank", every))
    out["own_file"] = store.cache.held[2].base is None and store.cache.held[0].base is not None
    session.world.barrier()
    if session.rank % 2 == 0:  # one rank of each server writes through the first mapping
        part[0, 0] = -1.0
    session.world.barrier()
    out["in_place"] = float(store.local_parts("feat")[session.server_id][0, 0]) == -1.0
    store.close()
    return out


def test_fills_come_from_the_rows_pulled_and_grow_with_later_misses(tmp_path):
    res = run_workers(_refill_job, 4, tmp_path, env=VIRTUAL_2x2)
    for rank, out in res.items():
        assert out["wrong"] == [] and out["rows"] and out["in_place"], out
        assert out["own_file"] and out["by_rank"] == out["held"], out["by_rank"]
        first, second, third = (set(h) for h in out["held"])
        # flags only: two rows of F floats would be more (the first fill alone holds dozens)
        assert len(first) > 10 and all(b < 2 * F * 4 for b in out["fill_bytes"]), out
        elsewhere = {i for i in range(N) if (i >= N // 2) != (rank // 2 == 1)}
        assert first < second == elsewhere - {0, N - 1} and third == elsewhere, \
            (len(first), len(second), len(third))
        assert out["counting"] == [True, True, False]
        mates = [res[r]["held"] for r in res if r // 2 == rank // 2]
        assert all(h == out["held"] for h in mates)  # one cache per server


def _learning_job(session):
    """2 servers x 1 rank, a budget that holds every row: while the cache learns, a pull
    reads the rows an earlier one kept (no bytes, the counter's ``reused``), and counts them
    for the fill all the same; a barrier keeps them where nobody wrote, and drops a name
    the peer wrote alone (rank 0 then reads the write); the fill takes the name not
    written, from the copies."""
    store, ref = DistKVStore(session, serve=True), LocalKVStore()
    _register(store, session)
    _register(ref)
    store.start_cache(2 * N * ROW)
    other = torch.arange(N // 2, N) if session.server_id == 0 else torch.arange(N // 2)
    a, out, wrong = other[:30], {}, []

    def received(name, ids):
        before = session.counter.snapshot()
        if not torch.equal(store.pull(name, ids), ref.pull(name, ids)):
            wrong.append(name)
        after = session.counter.snapshot()
        return [after["recv_inter"] - before["recv_inter"], after["reused"] - before["reused"]]

    out["feat"] = [received("feat", a), received("feat", a[5:25])]
    out["emb"] = [received("emb", a), received("emb", a)]
    if session.rank == 1:  # a row rank 0 keeps a copy of
        store.push("feat", torch.tensor([N // 2 + 5]), torch.full((1, F), 7.0),
                   collective=False)
    ref.push("feat", torch.tensor([N // 2 + 5]), torch.full((1, F), 7.0))
    session.world.barrier()
    store.forget_written()
    out["after_barrier"] = [received("feat", a), received("emb", a)]
    before = session.counter.snapshot()["recv_inter"]
    store.fill_cache()
    out["fill_bytes"] = session.counter.snapshot()["recv_inter"] - before
    out["held"] = {i: h.ids.tolist() for i, h in store.cache.held.items()}
    out["wrong"], out["a"] = wrong, a.tolist()
    store.close()
    return out


def test_the_rows_kept_while_the_cache_learns_serve_later_pulls(tmp_path):
    res = run_workers(_learning_job, 2, tmp_path, env={**VIRTUAL_2x2, "DGLX_TIMEOUT": "20"})
    rows = 30 * F * 4 + 31 * 8  # 30 rows, and the peer's request for 30 (head and ids)
    for out in res.values():
        assert out["wrong"] == [], out["wrong"]
        assert out["feat"] == [[rows, 0], [0, 20 * F * 4]], out["feat"]
        assert out["emb"] == [[rows, 0], [0, 30 * F * 4]], out["emb"]
        assert out["after_barrier"] == [[rows, 0], [0, 30 * F * 4]], out["after_barrier"]
        assert out["fill_bytes"] < 2 * F * 4, out  # flags and counts: no rows
        assert out["held"] == {"1": out["a"]}, out["held"]  # "emb" (index 1), not "feat"


def distdgl_trainer(session, pdir_path, threaded: bool, **options) -> Trainer:
    """distdgl's Trainer of a 2-layer SAGE (hidden 8, no dropout) with ``options``, seeded
    alike, its training loader on a worker thread where ``threaded``."""
    torch.manual_seed(0)
    pdir = PartitionDir(pdir_path)
    model = SAGE(pdir.feat_dim, 8, pdir.num_classes, num_layers=2, dropout=0.0)
    return Trainer(model, pdir, "distdgl", session=session, progress=False, lr=0.01,
                   train_loader={"use_prefetch_thread": threaded}, **options)


def _train(session, pdir_path):
    runs = {}
    for cache_mb in (0.0, 0.8):  # 0.8 MB: about 10% of the other server's rows
        # (the cached run's loader draws on a worker thread, which pulls and counts too)
        trainer = distdgl_trainer(session, pdir_path, bool(cache_mb), batch_size=64,
                                  cache_mb=cache_mb, reuse_mb=0)  # the cache alone
        trainer.fit(1)  # evaluated: the first epoch's counts wait for the second epoch
        cache = trainer.strategy.store.cache
        first = None if cache is None else [bool(cache.held), cache.aside]
        trainer.fit(3, eval_every=2)
        runs[cache_mb] = {
            "after_first": first,
            "params": [p.detach().clone() for p in trainer.model.parameters()],
            "records": [{k: v for k, v in r.items() if k.startswith(("cache", "bytes_"))}
                        for r in trainer.history],
            "threaded": trainer.loader._threaded is not None}
        trainer.close()
    same = all(torch.equal(a, b) for a, b in zip(runs[0.0]["params"], runs[0.8]["params"]))
    return {"same_params": same, "plain": runs[0.0]["records"], "cached": runs[0.8]["records"],
            "threads": [runs[0.0]["threaded"], runs[0.8]["threaded"]],
            "after_first": runs[0.8]["after_first"]}


def test_distdgl_trains_the_same_with_the_cache(tmp_path, cora_parts):
    res = run_workers(_train, 4, tmp_path, str(cora_parts), env=VIRTUAL_2x2, timeout=300)
    out = res[0]
    assert all(r["same_params"] for r in res.values()), "parameters differ with the cache"
    assert all(r["threads"] == [False, True] for r in res.values())
    # after the first epoch and its evaluation: nothing filled yet, the counts set aside (the
    # fill runs as the training loader's second epoch starts)
    assert all(r["after_first"] == [False, True] for r in res.values()), res
    plain, cached = out["plain"], out["cached"]
    assert "cache_hit_rate" not in cached[0] and "cache_hit_rate" not in plain[-1]
    for later, ref in zip(cached[1:], plain[1:]):  # the cache filled as the second began
        assert 0 < later["cache_hit_rate"] < 1 and later["cache_saved_bytes"] > 0, later
        assert later["bytes_recv_inter"] < ref["bytes_recv_inter"], (later, ref)


def _anew_each_epoch(session, cache_dir):
    """DGL's drop-in API with the cache: an epoch of a training loader, an evaluation's
    loader (other batch size, no shuffling), then a training loader built anew with the
    same arguments (as a script that builds its loader in the epoch loop does)."""
    import dglx_dist
    from dglx_dist.data import CoraGraphDataset

    g = dglx_dist.distribute(CoraGraphDataset()[0], "distdgl", cache_dir=cache_dir,
                             session=session, cache_mb=0.2)
    sampler = dglx_dist.NeighborSampler([4, 4], prefetch_node_feats=["feat"])
    train = dglx_dist.node_split(g.ndata["train_mask"], g)
    every = dglx_dist.node_split(torch.ones(g.num_nodes(), dtype=torch.bool), g)
    out = {}
    try:
        for name, ids, options in (("train", train, {"shuffle": True}),
                                   ("eval", every, {"batch_size": 64}),
                                   ("train anew", train, {"shuffle": True})):
            loader = dglx_dist.DataLoader(g, ids, sampler, **{"batch_size": 16, **options})
            cache = g.store.cache  # (started as the first loader set the strategy up)
            hits = session.counter.snapshot().get("cache_hits", 0)
            for _ in loader:
                pass
            out[name] = {"held": bool(cache.held), "aside": cache.aside,
                         "hits": session.counter.snapshot().get("cache_hits", 0) - hits}
    finally:
        g.close()
    return out


def test_a_loader_built_anew_each_epoch_fills_the_cache_and_an_evaluation_does_not(tmp_path):
    res = run_workers(_anew_each_epoch, 2, tmp_path, str(tmp_path / "cache"), timeout=300,
                      env={"DGLX_VIRTUAL_SERVERS": "2", "DGLX_TIMEOUT": "60"})
    for out in res.values():
        assert out["train"] == {"held": False, "aside": True, "hits": 0}, out
        assert out["eval"] == {"held": False, "aside": True, "hits": 0}, out  # no fill
        assert out["train anew"]["held"] and out["train anew"]["hits"] > 0, out
