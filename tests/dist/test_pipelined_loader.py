"""The pipelined loader (a worker thread draws the next ``prefetch_factor`` steps and starts
their pulls, on communicators of its own): for a fixed seed the same batches, in the same
order, and the same trained parameters as the loop in turn (``use_prefetch_thread=False``),
under distdgl (with and without its cache of remote rows) and p3 on 2 ranks of 2 virtual
servers (sampling and pulls cross ranks), for node and edge loaders; a loop left early
leaves no worker behind; a failure while drawing reaches the caller at its step."""
import dataclasses
import multiprocessing
import threading
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import dglx_dist
from dglx_dist.api.loader_call import Delivery
from dglx_dist.api.prefetch import Prefetch
from dglx_dist.data import CoraGraphDataset
from dglx_dist.errors import NotSupportedError
from dglx_dist.graphcore.frames import NID
from dglx_dist.models import SAGE
from dglx_dist.runtime.peer import PeerError
from dglx_dist.tasks.link import link_loss
from dglx_dist.testing import run_workers
from dglx_dist.testing.models import seeded_model

pytestmark = pytest.mark.dist
NAMES = ("distdgl", "p3", "distdgl cached")
OPTIONS = {"distdgl cached": {"cache_mb": 0.2}}  # the worker's pulls counted, the cache
# filled on the loop's thread after the first epoch (0.2 MB: some of the other part's rows)
# (DGL's delivery options where the steps stay on the host change nothing about them)
MODES = {"in turn": {"use_prefetch_thread": False}, "pipelined": {"use_prefetch_thread": True},
         "3 deep": {"use_prefetch_thread": True, "prefetch_factor": 3, "device": "cpu",
                    "pin_prefetcher": False, "use_alternate_streams": True},
         "3 ahead here": {"prefetch_factor": 3},  # (a CPU's default: on the calling thread)
         "processes": {"num_workers": 2}}  # DGL's sampler processes, the pulls on the thread


def _ids(t) -> list:
    return t.tolist() if isinstance(t, torch.Tensor) else {k: v.tolist() for k, v in t.items()}


def _train(g, loader, classes) -> dict:
    """Two epochs of a loop over ``loader`` (dropout on: the model draws from torch's
    generator while the worker draws the steps); each step's ids and the parameters."""
    model = dglx_dist.parallelize(seeded_model(
        lambda: SAGE(g.ndata["feat"].shape[1], 8, classes, 2, dropout=0.5)), g)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    torch.manual_seed(1)
    steps, workers, times = [], set(), []
    for _ in range(2):
        drawn = _drawn_counts(loader)
        for input_nodes, output_nodes, blocks in loader:
            drawn["taken"] += 1
            drawn["ahead"] = max(drawn["ahead"], drawn["drawn"] - drawn["taken"])
            workers.update(t.name for t in threading.enumerate()
                           if t.name.startswith("dglx-loader"))
            workers.update(p.name for p in multiprocessing.active_children()
                           if p.name.startswith("dglx-sampler"))
            steps.append([_ids(input_nodes), _ids(output_nodes)] +
                         [[_ids(b.srcdata[NID]), _ids(b.dstdata[NID])] for b in blocks])
            loss = F.cross_entropy(model(blocks, blocks[0].srcdata["feat"]),
                                   blocks[-1].dstdata["label"])
            opt.zero_grad()
            loss.backward()
            opt.step()
        loader.prefetch.start = drawn.pop("start")
        times.append({**dataclasses.asdict(loader.times), **drawn})
    params = [p.detach().reshape(-1).tolist() for p in model.module.parameters()]
    return {"steps": steps, "params": params, "workers": sorted(workers), "times": times,
            "depth": loader.depth}


def _drawn_counts(loader) -> dict:
    """Counts the steps drawn (their pulls started) against those the loop has taken."""
    counts = {"drawn": 0, "taken": 0, "ahead": 0, "start": loader.prefetch.start}

    def start(step, store=None):
        counts["drawn"] += 1
        return counts["start"](step, store)

    loader.prefetch.start = start
    return counts


def _compare(session, cache):
    out = {}
    dataset = CoraGraphDataset()
    for name in NAMES:
        g = dglx_dist.distribute(dataset[0], name.split()[0], cache_dir=cache,
                                 session=session, **OPTIONS.get(name, {}))
        ids = dglx_dist.node_split(g.ndata["train_mask"], g)
        sampler = dglx_dist.NeighborSampler([4, 4], prefetch_node_feats=["feat"],
                                            prefetch_labels=["label"])
        try:
            runs = {}
            for mode, options in MODES.items():
                loader = dglx_dist.DataLoader(g, ids, sampler, batch_size=16, shuffle=True,
                                              **options)
                hits = g.session.counter.snapshot().get("cache_hits", 0)
                runs[mode] = _train(g, loader, dataset.num_classes)
                runs[mode]["threaded"] = loader._threaded is not None
                runs[mode]["cache_hits"] = g.session.counter.snapshot().get(
                    "cache_hits", 0) - hits
            # a loop left after two steps on every rank, then a whole epoch: nothing left
            # running, the lane free again, the epoch's steps all there
            for i, _ in enumerate(loader):
                if i == 1:
                    break
            left = [t.name for t in threading.enumerate() if t.name.startswith("dglx-loader")]
            runs["after break"] = {"left": left, "steps": sum(1 for _ in loader),
                                   "len": len(loader)}
            # DGL's default: a prefetch thread only where the steps go to a GPU
            default = dglx_dist.DataLoader(g, ids, sampler, batch_size=16)
            runs["default"] = {"threaded": default._threaded is not None,
                               "lookahead": default.lookahead}
            if name == "distdgl":
                runs["device"] = _to_device(g, ids, sampler)
                runs["draws counted"] = _draws_counted(g, ids)
            if name == "p3":  # DGL's gpu_cache of rows p3 holds itself: refused in one line
                kept = Delivery(device=torch.device("cpu"), gpu_cache={"feat": 10})
                try:
                    Prefetch(g, sampler, kept)
                except NotSupportedError as exc:
                    runs["kept"] = str(exc)
            out[name] = runs
        finally:
            g.close()
    return out


def _draws_counted(g, ids) -> dict:
    """What the counter counted over an epoch of draws alone (no rows prefetched, nothing
    trained), in turn and by two sampler processes."""
    out = {}
    for mode in ("in turn", "processes"):
        loader = dglx_dist.DataLoader(g, ids, dglx_dist.NeighborSampler([4, 4]), batch_size=16,
                                      shuffle=True, **MODES[mode])
        g.barrier()
        before = g.session.counter.snapshot()
        steps = sum(1 for _ in loader)
        g.barrier()
        after = g.session.counter.snapshot()
        out[mode] = {"steps": steps, **{k: after[k] - before[k] for k in after}}
    return out


def _to_device(g, ids, sampler) -> dict:
    """DGL's ``device``: a GPU's steps (their blocks and rows there, a worker thread by
    default) where the rank has one, else refused in one line; and ``persistent_workers``
    with ``num_workers``."""
    kept = dglx_dist.DataLoader(g, ids, sampler, batch_size=16, num_workers=1,
                                persistent_workers=True)
    out = {"persistent": kept.delivery.persistent and kept._threaded is not None}
    try:  # DGL's use_uva: the steps drawn on the GPU (the worker's sampler there)
        uva = dglx_dist.DataLoader(g, ids, sampler, batch_size=16, use_uva=True)
        steps = [(blocks[0].device.type, blocks[-1].device.type,
                  blocks[0].srcdata["feat"].device.type, inputs.device.type)
                 for inputs, _, blocks in uva]
        out["uva"] = {"steps": len(steps), "len": len(uva), "devices": sorted(set(steps)),
                      "threaded": uva._threaded is not None}
    except ValueError as exc:
        out["uva"] = {"refused": str(exc)}
    try:
        loader = dglx_dist.DataLoader(g, ids, sampler, batch_size=16, device="cuda")
    except ValueError as exc:
        return {**out, "refused": str(exc)}
    _, _, blocks = next(iter(loader))
    return {**out, "threaded": loader._threaded is not None, "blocks": str(blocks[0].device),
            "feat": str(blocks[0].srcdata["feat"].device), "pinned": loader.delivery.pin}


def _train_edges(g, loader) -> dict:
    """Two epochs of a link-prediction loop over ``loader`` (dropout on); each step's pair
    graphs, negatives and blocks, and the parameters."""
    model = dglx_dist.parallelize(seeded_model(
        lambda: SAGE(g.ndata["feat"].shape[1], 8, 8, 2, dropout=0.5)), g)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    torch.manual_seed(1)
    steps = []
    for _ in range(2):
        for input_nodes, pair, neg, blocks in loader:
            ends = [[_ids(t) for t in graph.edges()] + [_ids(graph.ndata[NID])]
                    for graph in (pair, neg)]
            steps.append([_ids(input_nodes), ends] +
                         [[_ids(b.srcdata[NID]), _ids(b.dstdata[NID])] for b in blocks])
            loss = link_loss(pair, neg, model(blocks, blocks[0].srcdata["feat"]))
            opt.zero_grad()
            loss.backward()
            opt.step()
    params = [p.detach().reshape(-1).tolist() for p in model.module.parameters()]
    return {"steps": steps, "params": params, "threaded": loader._threaded is not None}


def _compare_edges(session, cache):
    """An edge loader (reverse edges excluded, the package's uniform negatives) pipelined
    and in turn, under distdgl."""
    cora = CoraGraphDataset()[0]
    src, dst = cora.edges()
    keep = src < dst  # each undirected edge as u->v (id e) and v->u (id e + E)
    u, v = src[keep], dst[keep]
    both = dglx_dist.graph((torch.cat([u, v]), torch.cat([v, u])), num_nodes=cora.num_nodes())
    both.ndata["feat"] = cora.ndata["feat"]
    g = dglx_dist.distribute(both, "distdgl", cache_dir=cache, session=session)
    n, e = g.num_edges(), u.numel()
    reverse = torch.cat([torch.arange(e) + e, torch.arange(e)])
    sampler = dglx_dist.as_edge_prediction_sampler(
        dglx_dist.NeighborSampler([4, 4], prefetch_node_feats=["feat"]), exclude="reverse_id",
        reverse_eids=reverse, negative_sampler=dglx_dist.negative_sampler.Uniform(2))
    train = dglx_dist.edge_split(torch.arange(0, n, 7), g)
    try:
        return {mode: _train_edges(g, dglx_dist.DataLoader(g, train, sampler, batch_size=32,
                                                           shuffle=True, **options))
                for mode, options in MODES.items()}
    finally:
        g.close()


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    cache = str(tmp_path_factory.mktemp("cache"))
    return run_workers(_compare, 2, tmp_path_factory.mktemp("run"), cache, timeout=300,
                       env={"DGLX_VIRTUAL_SERVERS": "2"})


@pytest.mark.parametrize("name", NAMES)
def test_pipelined_batches_and_parameters_are_the_loop_in_turns(compared, name):
    for r in range(2):
        runs = compared[r][name]
        turn = runs["in turn"]
        assert not turn["threaded"] and turn["workers"] == []
        assert len(turn["steps"]) > 4
        for mode, depth, procs in (("pipelined", 2, []), ("3 deep", 3, []),
                                   ("processes", 2, [0, 1])):
            got = runs[mode]  # (the processes draw, the thread starts the pulls)
            assert got["threaded"] and got["workers"] == [f"dglx-loader-rank{r}"] + [
                f"dglx-sampler-rank{r}-{w}" for w in procs], got["workers"]
            # the worker is never more than prefetch_factor steps ahead of the loop, and each
            # epoch's draws, pulls' starts and hand-overs were timed (dglx bench's "sample
            # work", "pull work" and the step's wait for its rows): the starts on the worker
            assert got["depth"] == depth
            for t in got["times"]:
                assert t["ahead"] <= depth and t["drawn"] == t["taken"], t
                assert t["draw"] > 0 and t["rows"] > 0 and t["start"] > 0, t
                assert t["start_here"] == 0, t
            assert got["steps"] == turn["steps"], (r, mode)
            for a, b in zip(got["params"], turn["params"]):
                np.testing.assert_array_equal(np.array(a), np.array(b))
        assert all(t["ahead"] == 0 and t["draw"] > 0 and t["start_here"] == t["start"] > 0
                   for t in turn["times"]), turn["times"]
        # the calling thread looks prefetch_factor steps ahead: the same steps and parameters
        here = runs["3 ahead here"]
        assert not here["threaded"] and here["workers"] == [] and here["depth"] == 3
        assert all(t["ahead"] == 3 and t["start_here"] == t["start"] > 0
                   for t in here["times"]), here["times"]
        assert here["steps"] == turn["steps"], r
        for a, b in zip(here["params"], turn["params"]):
            np.testing.assert_array_equal(np.array(a), np.array(b))
        after = runs["after break"]
        assert after["left"] == [] and after["steps"] == after["len"], after
        assert runs["default"] == {"threaded": False, "lookahead": True}  # on a CPU
        if name == "distdgl":  # the processes' exchanges are counted as the rank's
            counted = runs["draws counted"]
            assert counted["processes"] == counted["in turn"], counted
            assert counted["in turn"]["calls"] > counted["in turn"]["steps"] > 0, counted
            device = runs["device"]
            assert device["persistent"], device
            if torch.cuda.is_available():
                assert device["threaded"] and device["pinned"], device
                assert device["blocks"].startswith("cuda") and device["feat"].startswith("cuda")
                uva = device["uva"]  # blocks and rows on the GPU, the ids on the host
                assert uva["threaded"] and uva["steps"] == uva["len"] > 0, uva
                assert [tuple(d) for d in uva["devices"]] == [("cuda", "cuda", "cuda", "cpu")]
            else:
                assert "device='cuda', but this rank has 0 CUDA device(s)" in device["refused"]
                assert device["uva"]["refused"] == (
                    "DataLoader: use_uva=True draws the steps on a GPU, and this rank has no "
                    "CUDA device; expected use_uva=False")
        if name == "p3":
            assert runs["kept"] == ("DataLoader: gpu_cache['node']['feat']: strategy 'p3' holds "
                                    "'feat' itself; expected no gpu_cache of it")
        if name == "distdgl cached":  # filled after the first epoch in turn, then read
            assert all(runs[mode]["cache_hits"] > 0 for mode in MODES), runs
        else:
            assert not any(runs[mode]["cache_hits"] for mode in MODES)


def test_an_edge_loaders_pipelined_steps_and_parameters_are_the_loop_in_turns(tmp_path):
    """Its pairs are made on the calling thread (the negatives from torch's generator, the
    model's dropout's too, seeded per step), its blocks on the worker: the same pair graphs,
    negatives, blocks and trained parameters as in turn."""
    got = run_workers(_compare_edges, 2, tmp_path, str(tmp_path / "cache"), timeout=300,
                      env={"DGLX_VIRTUAL_SERVERS": "2"})
    for runs in got.values():
        turn = runs["in turn"]
        assert not turn["threaded"] and len(turn["steps"]) > 4
        for mode in ("pipelined", "3 deep", "processes"):
            assert runs[mode]["threaded"] and runs[mode]["steps"] == turn["steps"], mode
            for a, b in zip(runs[mode]["params"], turn["params"]):
                np.testing.assert_array_equal(np.array(a), np.array(b))


def _failing_worker(session, cache):
    """Rank 0's worker fails while it starts the pulls of step 2."""
    g = dglx_dist.distribute(CoraGraphDataset()[0], "distdgl", cache_dir=cache,
                             session=session)
    loader = dglx_dist.DataLoader(g, dglx_dist.node_split(g.ndata["train_mask"], g),
                                  dglx_dist.NeighborSampler([4, 4], prefetch_node_feats=["feat"]),
                                  batch_size=16, shuffle=True, use_prefetch_thread=True)
    start, calls = loader.prefetch.start, []

    def failing(step, store=None):
        calls.append(threading.current_thread().name)
        if session.rank == 0 and len(calls) == 3:
            raise ValueError("injected: drawing step 2 failed")
        return start(step, store)

    loader.prefetch.start = failing
    taken, t0 = 0, time.monotonic()
    try:
        for _ in loader:
            taken += 1
    except PeerError as exc:  # rank 1: rank 0 left at step 2
        return {"taken": taken, "error": str(exc), "ranks": exc.ranks,
                "seconds": time.monotonic() - t0, "threads": sorted(set(calls))}
    except ValueError as exc:  # rank 0: its worker's error, here, at step 2
        if session.rank == 0:
            assert taken == 2 and "injected" in str(exc), (taken, exc)
            assert sorted(set(calls)) == ["dglx-loader-rank0"], calls
            raise  # the job ends as with an error in the loop
    return {"taken": taken}


def test_a_failure_in_the_worker_ends_the_job_naming_the_rank(tmp_path):
    cache = str(tmp_path / "cache")
    res = run_workers(_failing_worker, 2, tmp_path / "run", cache, expect_failure=[0],
                      env={"DGLX_VIRTUAL_SERVERS": "2", "DGLX_TIMEOUT": "20"}, timeout=120)
    # rank 0 raised its worker's error at step 2, on its own thread, as an error in the loop
    assert res[0]["error"].startswith("ValueError: injected") and res[0]["exitcode"], res[0]
    one = res[1]
    assert one["taken"] == 2 and 0 in one["ranks"], one
    assert one["seconds"] < 30, one
    assert one["threads"] == ["dglx-loader-rank1"], one


def _server_pulls(session, cache):
    """distdgl with ``server_pulls`` on 2 servers x 2 ranks: the same loop in turn and
    pipelined; each one's steps, parameters and the bytes its epochs received."""
    dataset = CoraGraphDataset()
    g = dglx_dist.distribute(dataset[0], "distdgl", cache_dir=cache, session=session,
                             server_pulls=True, reuse_mb=0)  # (the copies outlive a barrier)
    ids = dglx_dist.node_split(g.ndata["train_mask"], g)
    sampler = dglx_dist.NeighborSampler([4, 4], prefetch_node_feats=["feat"],
                                        prefetch_labels=["label"])
    out = {}
    try:
        for mode in ("in turn", "pipelined"):
            loader = dglx_dist.DataLoader(g, ids, sampler, batch_size=16, shuffle=True,
                                          **MODES[mode])
            g.barrier()
            before = g.session.counter.snapshot()
            out[mode] = _train(g, loader, dataset.num_classes)
            g.barrier()
            after = g.session.counter.snapshot()
            out[mode]["bytes"] = {k: after[k] - before[k] for k in ("recv_inter", "recv_intra")}
            out[mode]["threaded"] = loader._threaded is not None
    finally:
        g.close()
    return out


def test_a_servers_ranks_pull_together_on_the_worker_thread_too(tmp_path):
    """The worker's pulls are coalesced per server as the loop's own are: the same steps,
    parameters and bytes across servers as the loop in turn, the rows passed on inside each
    server (its thread finishes each step's pull before handing the step over)."""
    cache = str(tmp_path / "cache")
    res = run_workers(_server_pulls, 4, tmp_path / "run", cache, timeout=300,
                      env={"DGLX_VIRTUAL_SERVERS": "2"})
    for r in range(4):
        turn, piped = res[r]["in turn"], res[r]["pipelined"]
        assert piped["threaded"] and not turn["threaded"]
        assert piped["steps"] == turn["steps"] and piped["params"] == turn["params"], r
        assert piped["bytes"]["recv_inter"] == turn["bytes"]["recv_inter"] > 0, (r, piped, turn)
        assert piped["bytes"]["recv_intra"] > 0 and turn["bytes"]["recv_intra"] > 0, r
        assert all(t["start_here"] == 0 and t["start"] > 0 for t in piped["times"]), piped


def _dying_process(session, cache):
    """Rank 0's sampler process is killed after the loop took two steps."""
    g = dglx_dist.distribute(CoraGraphDataset()[0], "distdgl", cache_dir=cache,
                             session=session)
    loader = dglx_dist.DataLoader(g, dglx_dist.node_split(g.ndata["train_mask"], g),
                                  dglx_dist.NeighborSampler([4, 4], prefetch_node_feats=["feat"]),
                                  batch_size=16, shuffle=True, num_workers=1)
    proc = loader._threaded[1]._procs[0]
    taken, t0 = 0, time.monotonic()
    try:
        for _ in loader:
            taken += 1
            if taken == 2 and session.rank == 0:
                proc.kill()
                t0 = time.monotonic()
    except Exception as exc:  # noqa: BLE001  (what each rank's loop ends with)
        if session.rank == 0:
            raise
        return {"taken": taken, "kind": type(exc).__name__, "error": str(exc),
                "ranks": getattr(exc, "ranks", None), "seconds": time.monotonic() - t0}
    return {"taken": taken}


def _failing_process(session, cache):
    """Rank 0's sampler process is sent a node id out of range for the third step."""
    from dglx_dist.api.workers import SamplerProcs

    g = dglx_dist.distribute(CoraGraphDataset()[0], "distdgl", cache_dir=cache,
                             session=session)
    loader = dglx_dist.DataLoader(g, dglx_dist.node_split(g.ndata["train_mask"], g),
                                  dglx_dist.NeighborSampler([4, 4]), batch_size=16,
                                  shuffle=True, num_workers=1)
    procs, sent = loader._threaded[1], []
    send = procs._send

    def bad(w, args):
        sent.append(w)
        if session.rank == 0 and len(sent) == 3:
            args = (torch.tensor([10**9]), *args[1:])
        return send(w, args)

    procs._send = bad
    taken, t0 = 0, time.monotonic()
    try:
        for _ in loader:
            taken += 1
    except PeerError as exc:  # rank 1: rank 0 left
        return {"taken": taken, "ranks": exc.ranks, "seconds": time.monotonic() - t0}
    return {"taken": taken}


def test_a_failed_draw_in_a_sampler_process_is_one_line_naming_the_rank(tmp_path):
    """The process's error reaches its rank at the step, as the loop's own would (the type
    and message, the rank and the process named); the peer's loop ends naming the rank."""
    res = run_workers(_failing_process, 2, tmp_path / "run", str(tmp_path / "cache"),
                      expect_failure=[0], env={"DGLX_VIRTUAL_SERVERS": "2", "DGLX_TIMEOUT": "20"},
                      timeout=120)
    assert res[0]["error"].startswith("StateError: rank 0: the loader's sampler process 0: "
                                      "IdOutOfRangeError: "), res[0]
    assert "\n" not in res[0]["error"]
    one = res[1]
    assert one["taken"] == 2 and 0 in one["ranks"] and one["seconds"] < 30, one


def test_a_dead_sampler_process_ends_the_job_naming_the_rank(tmp_path):
    """DGL's ``num_workers``: a sampler process that dies ends its rank's loop with a line
    naming the rank and the process, and the peer's loop with an error naming the rank,
    within the timeout (never a hang)."""
    res = run_workers(_dying_process, 2, tmp_path / "run", str(tmp_path / "cache"),
                      expect_failure=[0], env={"DGLX_VIRTUAL_SERVERS": "2", "DGLX_TIMEOUT": "20"},
                      timeout=120)
    assert res[0]["error"].startswith("StateError: rank 0: the loader's sampler process 0 "
                                      "exited (code -9)"), res[0]
    one = res[1]
    assert one["taken"] >= 2 and 0 in (one["ranks"] or []), one
    assert one["seconds"] < 30, one
