"""Uniform negatives through the edge loader, as DGL defines them: each destination drawn
uniformly and independently of every other, on every rank.

DGL's ``negative_sampler.Uniform`` draws from torch's generator. A script that seeds torch
alike on every rank (``torch.manual_seed(seed)``, as ``dglx train`` did) made every rank draw
the same destinations at every step, so the global batch of P ranks held each negative P
times (issue 77, item 5). The loader now draws each step's negatives from the step's own seed
(``negatives_drawn``): the ranks' draws differ, an epoch taken again draws the same, and the
destinations are uniform over the nodes.
"""
import numpy as np
import pytest
import torch

import dgl
import dglx_dist
from dglx_dist.data import CoraGraphDataset
from dglx_dist.strategies import STRATEGIES
from dglx_dist.testing import run_workers

pytestmark = pytest.mark.dist
K = 3


def _graph():
    """Cora with each undirected edge stored as u->v (id e) and v->u (id e + E)."""
    g = CoraGraphDataset()[0]
    src, dst = g.edges()
    keep = src < dst
    u, v = src[keep], dst[keep]
    out = dgl.graph((torch.cat([u, v]), torch.cat([v, u])), num_nodes=g.num_nodes())
    out.ndata["feat"] = g.ndata["feat"]
    e = u.numel()
    return out, torch.cat([torch.arange(e) + e, torch.arange(e)])


def _epoch(loader, epoch):
    """Each step's positive sources and negative pairs, in the graph's node ids."""
    loader.set_epoch(epoch)
    steps = []
    for _, pair, neg, _ in loader:
        nid = pair.ndata[dgl.NID]
        steps.append({"pos_src": nid[pair.edges()[0]].tolist(),
                      "neg": [nid[t].tolist() for t in neg.edges()]})
    return steps


def _job(session, cache):
    full, reverse = _graph()
    g = dglx_dist.distribute(full, STRATEGIES.build("distdgl", fanouts=(4, 4)),
                             cache_dir=cache, session=session)
    try:
        sampler = dglx_dist.as_edge_prediction_sampler(
            dglx_dist.NeighborSampler([4, 4]), exclude="reverse_id", reverse_eids=reverse,
            negative_sampler=dglx_dist.negative_sampler.Uniform(K))
        loader = dglx_dist.DataLoader(g, torch.arange(full.num_edges()), sampler,
                                      batch_size=256, shuffle=True, seed=3)
        torch.manual_seed(0)  # alike on every rank, as a script seeds it
        first = _epoch(loader, 0)
        torch.manual_seed(123)  # the negatives do not follow torch's generator
        return {"first": first, "again": _epoch(loader, 0), "next": _epoch(loader, 1)}
    finally:
        g.close()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """{rank: _job's result} of 2 ranks on 2 virtual servers."""
    tmp = tmp_path_factory.mktemp("negatives")
    return run_workers(_job, 2, tmp / "run", str(tmp / "cache"),
                       env={"DGLX_VIRTUAL_SERVERS": "2"}, timeout=300)


def _destinations(steps):
    return [step["neg"][1] for step in steps]


def test_ranks_seeded_alike_draw_their_own_negatives(ranks):
    a, b = (_destinations(ranks[r]["first"]) for r in range(2))
    assert len(a) == len(b) > 2
    for step, (x, y) in enumerate(zip(a, b)):
        n = min(len(x), len(y))
        same = float(np.mean(np.array(x[:n]) == np.array(y[:n])))
        assert same < 0.02, (step, same)  # by chance about 1 in 2708


def test_an_epoch_taken_again_draws_the_same_negatives_and_the_next_others(ranks):
    for r in range(2):
        got = ranks[r]
        assert _destinations(got["again"]) == _destinations(got["first"]), r
        assert _destinations(got["next"]) != _destinations(got["first"]), r


def test_negatives_are_k_uniform_destinations_per_positive_source(ranks):
    every = []
    for r in range(2):
        for step in ranks[r]["first"] + ranks[r]["next"]:
            src, dst = step["neg"]
            assert src == [s for s in step["pos_src"] for _ in range(K)]  # (u, v') per edge
            every += dst
    counts = np.bincount(np.array(every) * 8 // 2708, minlength=8)
    expected = len(every) / 8
    # ~21k draws in 8 bins of ~2.6k: a bin's standard deviation is about 50
    assert np.all(np.abs(counts - expected) < 6 * np.sqrt(expected)), counts
