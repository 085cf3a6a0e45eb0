"""DGL NeighborSampler's draws over a distributed graph (issue 35): edge ids and prefetched
edge features on blocks, ``prob`` / ``mask`` / ``replace`` draws against their definitions
and single-process DGL, edge-weighted GraphConv and GATConv exact against single-process
DGL, and bad sampler options refused on every rank."""
import collections

import dgl
import dgl.nn as dglnn
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import dglx_dist
from dglx_dist.data import CoraGraphDataset
from dglx_dist.testing import run_workers
from dglx_dist.testing.models import assert_same_params, seeded_model

pytestmark = pytest.mark.dist
DRAWS = 300  # epochs of one-edge draws per seed for the frequencies


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))


def _graph():
    """Cora with edge data: ``p`` weights in [0, 1), a fifth of them 0; ``m`` = p > 0.5
    (booleans); ``w`` positive weights for the convs."""
    g = CoraGraphDataset()[0]
    gen = torch.Generator().manual_seed(3)
    p = torch.rand(g.num_edges(), generator=gen)
    p[torch.rand(g.num_edges(), generator=gen) < 0.2] = 0.0
    g.edata["p"], g.edata["m"] = p, p > 0.5
    g.edata["w"] = 0.5 + torch.rand(g.num_edges(), generator=gen)
    return g


def _edges(g, blocks):
    """Every block's edges as (src, dst, eid) in the user's ids, and its prefetched ``w``."""
    out = []
    for b in blocks:
        s, d = b.edges()
        out.append({"src": g.node_ids(b.srcdata[dgl.NID][s]).tolist(),
                    "dst": g.node_ids(b.dstdata[dgl.NID][d]).tolist(),
                    "eid": b.edata[dgl.EID].tolist(),
                    "w": b.edata["w"].tolist() if "w" in b.edata else None})
    return out


def _draws(session, name, cache):
    """One launch: blocks of a uniform, a ``prob``, a ``mask`` and a ``replace`` loader,
    then ``DRAWS`` epochs of one-edge draws by ``prob`` of 40 seeds."""
    g = dglx_dist.distribute(_graph(), name, cache_dir=cache, session=session)
    seeds = torch.arange(session.rank, g.num_nodes(), 17)
    out = {}
    for kind, kw in (("uniform", {"prefetch_edge_feats": ["w"]}), ("prob", {"prob": "p"}),
                     ("mask", {"mask": "m"}), ("replace", {"replace": True})):
        loader = dglx_dist.DataLoader(g, seeds, dglx_dist.NeighborSampler([3, 2], **kw),
                                      batch_size=64, use_ddp=False)
        out[kind] = [_edges(g, blocks) for _, _, blocks in loader]
    hubs = torch.arange(session.rank, 80, session.world_size)  # 0..79 over the ranks
    loader = dglx_dist.DataLoader(g, hubs, dglx_dist.NeighborSampler([1], prob="p"),
                                  batch_size=80, use_ddp=False)
    counts = collections.Counter()
    for _ in range(DRAWS):
        for _, _, blocks in loader:
            counts.update(blocks[0].edata[dgl.EID].tolist())
    out["counts"] = dict(counts)
    g.close()
    return out


def _launch(session, name, cache, parts):
    """What one launch runs, in one process per rank: ``parts`` of "draws", "step" and
    "refusals" (the module's tests share three launches: the suite's time budget)."""
    run = {"draws": lambda: _draws(session, name, cache),
           "step": lambda: _weighted_step(session, name, cache),
           "refusals": lambda: _refusals(session, cache)}
    return {part: run[part]() for part in parts}


@pytest.fixture(scope="module")
def launches(tmp_path_factory, cache):
    """distdgl at 4 ranks (2 servers x 2): draws and a weighted step; p3 at 2 ranks: draws
    and a weighted step; distdgl at 2 ranks (2 servers x 1): a weighted step and the
    refusals."""
    out = {}
    for key, name, world, parts in (("distdgl", "distdgl", 4, ["draws", "step"]),
                                    ("p3", "p3", 2, ["draws", "step"]),
                                    ("2x1", "distdgl", 2, ["step", "refusals"])):
        res = run_workers(_launch, world, tmp_path_factory.mktemp(key), name, cache, parts,
                          env={"DGLX_VIRTUAL_SERVERS": "2"}, timeout=300)
        out[key] = {part: {r: res[r][part] for r in res} for part in parts}
    return out


@pytest.fixture(scope="module")
def draws(launches):
    return {name: launches[name]["draws"] for name in ("distdgl", "p3")}


@pytest.mark.parametrize("name", ["distdgl", "p3"])
def test_blocks_carry_the_users_edge_ids_and_edge_features(draws, name):
    g = _graph()
    src, dst = (t.tolist() for t in g.edges())
    for r, out in draws[name].items():
        for blocks in out["uniform"] + out["prob"] + out["replace"]:
            for b in blocks:
                assert [src[e] for e in b["eid"]] == b["src"], f"rank {r}"
                assert [dst[e] for e in b["eid"]] == b["dst"], f"rank {r}"
        for blocks in out["uniform"]:  # prefetch_edge_feats: each edge's own row
            for b in blocks:
                assert b["w"] == g.edata["w"][b["eid"]].tolist()


@pytest.mark.parametrize("name", ["distdgl", "p3"])
def test_prob_mask_and_replace_draw_as_dgl_defines_them(draws, name):
    """Per destination: uniform and ``prob`` draw min(fanout, candidates) distinct edges
    (candidates: its in-edges, those of non-zero weight), ``mask`` only masked-in edges,
    ``replace`` exactly ``fanout`` edges with repeats."""
    g = _graph()
    p, m = g.edata["p"], g.edata["m"]
    dst_all = g.edges()[1]
    indeg = torch.bincount(dst_all, minlength=g.num_nodes())
    nonzero = torch.bincount(dst_all[p > 0], minlength=g.num_nodes())
    masked = torch.bincount(dst_all[m], minlength=g.num_nodes())
    repeats = 0
    for out in draws[name].values():
        for kind, candidates in (("uniform", indeg), ("prob", nonzero), ("mask", masked),
                                 ("replace", None)):
            for blocks in out[kind]:
                for b, fanout in zip(blocks, (3, 2)):
                    per = collections.defaultdict(list)
                    for d, e in zip(b["dst"], b["eid"]):
                        per[d].append(e)
                    if kind == "prob":
                        assert bool((p[b["eid"]] > 0).all())
                    if kind == "mask":
                        assert bool(m[b["eid"]].all())
                    for d, es in per.items():
                        if kind == "replace":
                            assert len(es) == fanout
                            repeats += len(es) - len(set(es))
                        else:
                            assert len(es) == len(set(es)) == min(fanout, int(candidates[d]))
    assert repeats > 0  # some node of in-degree below the fanout drew an edge twice


@pytest.mark.parametrize("name", ["distdgl", "p3"])
def test_prob_frequencies_follow_the_weights(draws, name):
    """Each hub's one-edge draws over ``DRAWS`` epochs: the counts of its in-edges against
    ``DRAWS * p_e / sum(p)`` by Pearson's chi-square; its mean per degree of freedom stays
    below 1.5 (about 7 standard deviations above 1 at this many degrees of freedom), and
    single-process DGL's own draws pass the same bound."""
    g = _graph()
    p = g.edata["p"]
    counts = collections.Counter()
    for out in draws[name].values():
        counts.update({int(k): v for k, v in out["counts"].items()})

    def chi2_per_dof(counts):
        stat, dof = 0.0, 0
        for v in range(80):
            eids = g.in_edges(v, form="eid")
            weights = p[eids]
            if int((weights > 0).sum()) < 2:
                continue
            expected = DRAWS * weights / weights.sum()
            got = torch.tensor([counts.get(int(e), 0) for e in eids], dtype=torch.float)
            keep = expected > 0
            stat += float(((got[keep] - expected[keep]) ** 2 / expected[keep]).sum())
            dof += int(keep.sum()) - 1
        return stat / dof

    dgl.seed(0)
    single = collections.Counter()
    for _ in range(DRAWS):
        single.update(dgl.sampling.sample_neighbors(g, torch.arange(80), 1, prob="p")
                      .edata[dgl.EID].tolist())
    assert chi2_per_dof(single) < 1.5
    assert chi2_per_dof(counts) < 1.5
    assert sum(counts.values()) == DRAWS * sum(int((p[g.in_edges(v, form="eid")] > 0).any())
                                               for v in range(80))


class EdgeWeighted(torch.nn.Module):
    """A GraphConv and a GATConv, both weighing messages by ``block.edata["w"]``."""

    def __init__(self, in_feats, classes):
        super().__init__()
        self.layers = torch.nn.ModuleList([
            dglnn.GraphConv(in_feats, 8, norm="right", activation=F.relu),
            dglnn.GATConv(8, classes, num_heads=2)])

    def forward(self, blocks, x):
        h = self.layers[0](blocks[0], x, edge_weight=blocks[0].edata["w"])
        return self.layers[1](blocks[1], h, edge_weight=blocks[1].edata["w"]).mean(1)


def _weighted_step(session, name, cache):
    """One SGD step of :class:`EdgeWeighted` under ``name`` over full neighbourhoods with
    ``w`` prefetched: each rank's output ids and logits, and the stepped parameters (p3:
    its first conv's input columns too)."""
    g = dglx_dist.distribute(_graph(), name, cache_dir=cache, session=session)
    sampler = dglx_dist.MultiLayerFullNeighborSampler(2, prefetch_edge_feats=["w"])
    loader = dglx_dist.DataLoader(g, g.ndata["train_mask"], sampler, batch_size=1000)
    model = dglx_dist.parallelize(seeded_model(lambda: EdgeWeighted(1433, 7)), g)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    out = {"outputs": [], "logits": []}
    for input_nodes, output_nodes, blocks in loader:
        logits = model(blocks, g.ndata["feat"][input_nodes])
        loss = F.cross_entropy(logits, g.ndata["label"][output_nodes])
        opt.zero_grad()
        loss.backward()
        opt.step()
        out["outputs"].append(output_nodes.tolist())
        out["logits"].append(logits.tolist())
    out["params"] = {k: v.tolist() for k, v in model.module.state_dict().items()}
    out["cols"] = g.strategy.cols.tolist() if name == "p3" else None
    g.close()
    return out


@pytest.mark.parametrize("launch", ["2x1", "distdgl", "p3"], ids=["2x1", "2x2", "p3"])
def test_edge_weighted_convs_match_single_process_dgl(launches, launch):
    """Exact under distdgl; under p3 too, whose split first conv gets every rank's block with
    its edge weights (the weights travel with P3's push of the block)."""
    res = launches[launch]["step"]
    g = _graph()
    model = seeded_model(lambda: EdgeWeighted(1433, 7))
    logits = model([g, g], g.ndata["feat"])
    for r, out in res.items():
        for ids, got in zip(out["outputs"], out["logits"]):
            np.testing.assert_allclose(got, logits[ids].tolist(), rtol=1e-4, atol=1e-5,
                                       err_msg=f"rank {r}")
    losses = [F.cross_entropy(logits[torch.tensor(o)], g.ndata["label"][torch.tensor(o)])
              for out in res.values() for o in out["outputs"]]
    torch.stack(losses).mean().backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.5 * p.grad
    for r, out in res.items():
        assert_same_params(f"rank {r}", model, out["params"], out["cols"])


def _refusals(session, cache):
    """Each bad sampler refused on every rank; the job goes on after each."""
    import dglx_dist.errors as errors

    g = dglx_dist.distribute(_graph(), "distdgl", cache_dir=cache, session=session)
    g.edata["p"][torch.tensor([7])] = torch.tensor([-1.0])  # rank 0 or 1 holds it
    g.barrier()
    said = []
    for kw in ({"prob": "nope"}, {"prob": "p"}, {"prefetch_edge_feats": ["nope"]}):
        try:
            dglx_dist.DataLoader(g, torch.arange(10), dglx_dist.NeighborSampler([2], **kw),
                                 batch_size=5)
            said.append(None)
        except errors.DglxError as exc:
            said.append(str(exc))
    g.close()
    g = dglx_dist.distribute(_graph(), "granndis", cache_dir=cache, session=session)
    try:
        dglx_dist.DataLoader(g, torch.arange(10), dglx_dist.NeighborSampler([2], replace=True),
                             batch_size=5)
    except errors.DglxError as exc:
        said.append(str(exc))
    g.close()
    return said


def test_bad_sampler_options_are_refused_on_every_rank(launches):
    res = launches["2x1"]["refusals"]
    assert res[0][:1] + res[0][2:] == res[1][:1] + res[1][2:]
    # the rank holding edge 7's row says what is wrong, the other names that rank
    holder = 0 if "negative" in res[0][1] else 1
    assert "1 edge weights are negative or not finite (e.g. [-1.0]); expected finite " \
        "weights >= 0" in res[holder][1]
    assert f"the arguments of rank(s) [{holder}] were refused" in res[1 - holder][1]
    nope, _, feats, granndis = res[0]
    assert "'nope' is not edge data of this graph; it has ['m', 'p', 'w']" in nope
    assert "prefetch_edge_feats ['nope'] are not edge data" in feats
    assert "NeighborSampler(replace=True) under strategy 'granndis'" in granndis
