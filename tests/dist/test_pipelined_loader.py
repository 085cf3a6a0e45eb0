"""The pipelined loader (a worker thread draws the next ``prefetch_factor`` steps and starts
their pulls, on communicators of its own): for a fixed seed the same batches, in the same
order, and the same trained parameters as the loop in turn (``use_prefetch_thread=False``),
under distdgl and p3 on 2 ranks of 2 virtual servers (sampling and pulls cross ranks); a
loop left early leaves no worker behind; a failure while drawing reaches the caller at its
step."""
import dataclasses
import threading
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import dglx_dist
from dglx_dist.data import CoraGraphDataset
from dglx_dist.graphcore.frames import NID
from dglx_dist.models import SAGE
from dglx_dist.runtime.peer import PeerError
from dglx_dist.testing import run_workers
from dglx_dist.testing.models import seeded_model

pytestmark = pytest.mark.dist
NAMES = ("distdgl", "p3")
MODES = {"in turn": {"use_prefetch_thread": False}, "pipelined": {},
         "3 deep": {"prefetch_factor": 3}}


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
        g = dglx_dist.distribute(dataset[0], name, cache_dir=cache, session=session)
        ids = dglx_dist.node_split(g.ndata["train_mask"], g)
        sampler = dglx_dist.NeighborSampler([4, 4], prefetch_node_feats=["feat"],
                                            prefetch_labels=["label"])
        try:
            runs = {}
            for mode, options in MODES.items():
                loader = dglx_dist.DataLoader(g, ids, sampler, batch_size=16, shuffle=True,
                                              **options)
                runs[mode] = _train(g, loader, dataset.num_classes)
                runs[mode]["threaded"] = loader._threaded is not None
            # a loop left after two steps on every rank, then a whole epoch: nothing left
            # running, the lane free again, the epoch's steps all there
            for i, _ in enumerate(loader):
                if i == 1:
                    break
            left = [t.name for t in threading.enumerate() if t.name.startswith("dglx-loader")]
            runs["after break"] = {"left": left, "steps": sum(1 for _ in loader),
                                   "len": len(loader)}
            out[name] = runs
        finally:
            g.close()
    return out


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
        for mode, depth in (("pipelined", 2), ("3 deep", 3)):
            got = runs[mode]
            assert got["threaded"] and got["workers"] == [f"dglx-loader-rank{r}"], got["workers"]
            # the worker is never more than prefetch_factor steps ahead of the loop, and each
            # epoch's draws and hand-overs were timed (dglx bench's "sample work" and the
            # step's wait for its rows)
            assert got["depth"] == depth
            for t in got["times"]:
                assert t["ahead"] <= depth and t["drawn"] == t["taken"], t
                assert t["draw"] > 0 and t["rows"] > 0, t
            assert got["steps"] == turn["steps"], (r, mode)
            for a, b in zip(got["params"], turn["params"]):
                np.testing.assert_array_equal(np.array(a), np.array(b))
        assert all(t["ahead"] == 0 and t["draw"] > 0 for t in turn["times"]), turn["times"]
        after = runs["after break"]
        assert after["left"] == [] and after["steps"] == after["len"], after


def _failing_worker(session, cache):
    """Rank 0's worker fails while it starts the pulls of step 2."""
    g = dglx_dist.distribute(CoraGraphDataset()[0], "distdgl", cache_dir=cache,
                             session=session)
    loader = dglx_dist.DataLoader(g, dglx_dist.node_split(g.ndata["train_mask"], g),
                                  dglx_dist.NeighborSampler([4, 4], prefetch_node_feats=["feat"]),
                                  batch_size=16, shuffle=True)
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
