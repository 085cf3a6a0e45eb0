"""Link prediction through the drop-in API (DGL's as_edge_prediction_sampler over a DistGraph).

One job per strategy (2 ranks, 2 virtual servers) runs every check, and the tests read its
results: one step with full neighbourhoods, fixed negatives and exclude="reverse_id" gives
single-process DGL's parameters on the same pairs with the same edges removed (the
full-graph strategies: without exclusion, which they refuse); sampled
batches never hold a positive edge or its reverse; GlobalUniform draws from every part in
proportion to its nodes, and never an edge; the ranking metrics over ranks are those of all
the scores on one process.
"""
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import dgl
import dglx_dist
import dglx_dist.dgl.distributed
from dglx_dist.data import CoraGraphDataset
from dglx_dist.models import SAGE
from dglx_dist.strategies import STRATEGIES
from dglx_dist.strategies.abilities import exact_options
from dglx_dist.testing import run_workers
from dglx_dist.testing.models import assert_same_params, seeded_model

pytestmark = pytest.mark.dist
LR = 0.5
K = 2  # negatives per positive
PROBE = torch.arange(0, 2708, 97)  # nodes whose embeddings dglx_dist.inference gives
SEEDS = 160  # positive edges of the exact step (every rank passes the same; each takes half)
# the exclusion each strategy runs: the full-graph ones pass messages over the whole graph
EXCLUDE = {"distdgl": "reverse_id", "p3": "reverse_id", "granndis": None, "fullgraph": None}


def _graph():
    """Cora with each undirected edge stored as u->v (id e) and v->u (id e + E): the reverse
    of edge e is (e + E) mod 2E."""
    g = CoraGraphDataset()[0]
    src, dst = g.edges()
    keep = src < dst
    u, v = src[keep], dst[keep]
    out = dgl.graph((torch.cat([u, v]), torch.cat([v, u])), num_nodes=g.num_nodes())
    for key in ("feat", "label", "train_mask", "val_mask", "test_mask"):
        out.ndata[key] = g.ndata[key]
    out.edata["w"] = torch.arange(out.num_edges(), dtype=torch.float32)  # = the edge id
    e = u.numel()
    return out, torch.cat([torch.arange(e) + e, torch.arange(e)])


class FixedNegatives:
    """k negatives per edge, a function of the edge id alone (the same on one process)."""

    def __init__(self, k):
        self.k = k

    def __call__(self, g, eids):
        src, _ = g.find_edges(eids)
        step = torch.arange(self.k).repeat(eids.numel())
        return src.repeat_interleave(self.k), (eids.repeat_interleave(self.k) * 7 + step * 13
                                               + 3) % g.num_nodes()


class ScoredSAGE(SAGE):
    """GraphSAGE with a scorer that has parameters (called outside forward, on the pairs)."""

    def __init__(self, in_feats):
        super().__init__(in_feats, 8, 8, 2, dropout=0.0)
        self.predictor = torch.nn.Linear(8, 1)


def _model(g):
    return seeded_model(lambda: ScoredSAGE(g.ndata["feat"].shape[1]))


def _score(pair, h, predictor):
    with pair.local_scope():
        pair.ndata["h"] = h
        pair.apply_edges(dgl.function.u_mul_v("h", "h", "m"))
        return predictor(pair.edata["m"]).squeeze(1)


def _loss(pos, neg):
    scores = torch.cat([pos, neg])
    labels = torch.cat([torch.ones_like(pos), torch.zeros_like(neg)])
    return F.binary_cross_entropy_with_logits(scores, labels)


def _exact_step(g, reverse, exclude):
    """One SGD step of the user's loop; the batch's pairs (node ids) and the parameters. The
    loader is built as DGL's DistDGL scripts build it: DistEdgeDataLoader with the edge
    options beside a block sampler (it wraps them with as_edge_prediction_sampler)."""
    loader = dglx_dist.dgl.distributed.DistEdgeDataLoader(
        g, torch.arange(SEEDS) * 37, dglx_dist.MultiLayerFullNeighborSampler(2),
        exclude=exclude, reverse_eids=reverse, negative_sampler=FixedNegatives(K),
        batch_size=SEEDS)
    model = dglx_dist.parallelize(_model(g), g)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    batches = []
    for input_nodes, pair, neg, blocks in loader:
        h = model(blocks, g.ndata["feat"][input_nodes])
        predictor = model.module.predictor  # inside the parallelized model: synchronised
        loss = _loss(_score(pair, h, predictor), _score(neg, h, predictor))
        opt.zero_grad()
        loss.backward()
        opt.step()
        nid = pair.ndata[dgl.NID]
        batches.append({"eids": pair.edata[dgl.EID].tolist(),
                        "pos": [nid[t].tolist() for t in pair.edges()],
                        "neg": [nid[t].tolist() for t in neg.edges()]})
    cols = g.strategy.cols.tolist() if hasattr(g.strategy, "cols") else None  # p3's columns
    # after the step; batches smaller than a rank's nodes (full-graph strategies take one)
    embeddings = dglx_dist.inference(model, g, batch_size=500)[PROBE].tolist()
    # the probe's rows alone, sampled (above every in-degree), and a fanout too few
    sampled = {name: _error_of(lambda: dglx_dist.inference(model, g, PROBE, fanouts=f)[PROBE])
               for name, f in (("sampled", [200, 200]), ("wrong", [200]))}
    return batches, {k: v.tolist() for k, v in model.module.state_dict().items()}, cols, \
        embeddings, sampled


def _error_of(call):
    """``call()``'s result as a list, or its error as one line."""
    try:
        return call().tolist()
    except Exception as e:  # noqa: BLE001 - the message is what is checked
        return f"{type(e).__name__}: {e}"


def _leaks(g, reverse):
    """Positive edges (or reverses) found in sampled blocks, over an epoch of small batches
    (the error where the strategy cannot exclude edges)."""
    sampler = dglx_dist.as_edge_prediction_sampler(
        dglx_dist.NeighborSampler([4, 4], prefetch_node_feats=["feat"]), exclude="reverse_id",
        reverse_eids=reverse, negative_sampler=dglx_dist.negative_sampler.Uniform(3),
        prefetch_labels=["w"])
    train = torch.arange(0, g.num_edges(), 3)
    try:
        loader = dglx_dist.DataLoader(g, train, sampler, batch_size=64, shuffle=True)
    except Exception as e:  # noqa: BLE001 - the message is what is checked
        return f"{type(e).__name__}: {e}"
    leaks = batches = negatives = prefetched = 0
    for input_nodes, pair, neg, blocks in loader:
        assert torch.equal(pair.edata["w"], pair.edata[dgl.EID].float())  # prefetch_labels
        if "feat" in blocks[0].srcdata:  # prefetch_node_feats (p3: its column-slice handle)
            got, want = blocks[0].srcdata["feat"], g.ndata["feat"][input_nodes]
            assert torch.equal(got.ids, want.ids) if hasattr(got, "ids") else \
                torch.equal(got, want)
            prefetched += 1
        nid = pair.ndata[dgl.NID]
        u, v = (nid[t] for t in pair.edges())
        banned = set(zip(u.tolist(), v.tolist())) | set(zip(v.tolist(), u.tolist()))
        for block in blocks:
            s, d = block.edges()
            s = g.node_ids(block.srcdata[dgl.NID][s])
            d = g.node_ids(block.dstdata[dgl.NID][d])
            leaks += len(banned & set(zip(s.tolist(), d.tolist())))
        batches += 1
        negatives += neg.num_edges()
        assert neg.num_edges() == 3 * pair.num_edges()
    return {"leaks": leaks, "batches": batches, "negatives": negatives,
            "steps": len(loader), "mine": loader.indices.numel(), "prefetched": prefetched}


def _step_record(g, batch) -> dict:
    """A step of an edge loader in the graph's ids: its inputs, positive and negative pairs,
    the pairs' edge ids and each block's edge ids (sorted; the count where it has none)."""
    input_nodes, pair, neg, blocks = batch
    nid = pair.ndata[dgl.NID]
    return {"inputs": input_nodes.tolist(), "eids": pair.edata[dgl.EID].tolist(),
            "pos": [nid[t].tolist() for t in pair.edges()],
            "neg": [nid[t].tolist() for t in neg.edges()],
            "graphs": [type(pair).__name__, type(neg).__name__],
            "blocks": [sorted(b.edata[dgl.EID].tolist()) if dgl.EID in b.edata else
                       b.num_edges() for b in blocks]}  # a full-graph block: no edge ids


def _against_dgls(g, reverse, name):
    """The package's as_edge_prediction_sampler and negative samplers beside DGL's, through
    the same loader (the same seeds): whether every step is the same (inputs, pairs,
    negatives, and the blocks' edges, so the same exclusions), and its negatives' counts and
    ranges."""
    exclude = EXCLUDE[name]
    configs = [("Uniform", exclude)] + ([("GlobalUniform", "self")] if exclude else [])
    out = {}
    for negatives, mode in configs:
        runs = []
        for lib, wrap, nodes in ((dglx_dist, dglx_dist.as_edge_prediction_sampler, dglx_dist),
                                 (dgl.dataloading, dgl.dataloading.as_edge_prediction_sampler,
                                  dgl.dataloading)):
            node = nodes.NeighborSampler([4, 4]) if exclude else \
                nodes.MultiLayerFullNeighborSampler(2)
            sampler = wrap(node, exclude=mode, negative_sampler=getattr(
                lib.negative_sampler, negatives)(2),
                reverse_eids=reverse if mode == "reverse_id" else None)
            loader = dglx_dist.DataLoader(g, torch.arange(0, g.num_edges(), 7), sampler,
                                          batch_size=256, shuffle=True, seed=3)
            torch.manual_seed(11 + g.rank())
            runs.append([_step_record(g, batch) for batch in loader])
        ours, theirs = runs
        neg = [n for step in ours for n in step["neg"][0] + step["neg"][1]]
        out[f"{negatives}/{mode}"] = {
            "same": ours == theirs, "steps": len(ours),
            "pos": sum(len(step["eids"]) for step in ours),
            "neg": sum(len(step["neg"][0]) for step in ours),
            "range": [min(neg), max(neg)], "graphs": ours[0]["graphs"]}
    return out


def _global_uniform(g):
    torch.manual_seed(100 + g.rank())
    u, v = g.global_uniform_negative_sampling(4000)
    return {"u": u.tolist(), "v": v.tolist(), "owner": g.pdir.book.owner(
        g.part_ids(torch.cat([u, v])).numpy()).tolist(),
        "part_sizes": [int(s) for s in np.bincount(g.pdir.book.owner(
            np.arange(g.num_nodes())), minlength=g.pdir.num_parts)]}


def _metrics(g):
    gen = torch.Generator().manual_seed(7 + g.rank())
    n = 30 + 20 * g.rank()
    pos = torch.randn(n, generator=gen)
    neg = torch.round(torch.randn(n, 5, generator=gen) * 2) / 2  # ties with each other
    pos[:3] = neg[:3, 0]  # and with a positive
    return {"pos": pos.tolist(), "neg": neg.tolist(),
            "got": dglx_dist.ranking_metrics(pos, neg, ks=(1, 3))}


class OutOfRange:
    def __call__(self, g, eids):
        return eids, eids + g.num_nodes()


def _refused(g, reverse):
    """The one-line message of each bad argument (raised on every rank)."""
    full = dglx_dist.MultiLayerFullNeighborSampler(2)
    bad = {
        "eids": lambda: dglx_dist.DataLoader(
            g, torch.tensor([0, g.num_edges()]),
            dglx_dist.as_edge_prediction_sampler(full), batch_size=4),
        "reverse": lambda: dglx_dist.DataLoader(
            g, torch.arange(8), dglx_dist.as_edge_prediction_sampler(
                full, exclude="reverse_id", reverse_eids=reverse[:-1]), batch_size=4),
        "mode": lambda: dglx_dist.DataLoader(
            g, torch.arange(8), dglx_dist.as_edge_prediction_sampler(
                full, exclude="reverse_types", reverse_etypes={"_E": "_E"}), batch_size=4),
        "negatives": lambda: next(iter(dglx_dist.DataLoader(
            g, torch.arange(8), dglx_dist.as_edge_prediction_sampler(
                full, negative_sampler=OutOfRange()), batch_size=4))),
    }
    out = {}
    for key, call in bad.items():
        try:
            call()
            out[key] = None
        except Exception as e:  # noqa: BLE001 - the message is what is checked
            out[key] = f"{type(e).__name__}: {e}"
    return out


def _job(session, name, cache):
    full, reverse = _graph()
    options = exact_options(STRATEGIES.get(name), 2)
    g = dglx_dist.distribute(full, STRATEGIES.build(name, **options), cache_dir=cache,
                             session=session)
    try:
        exact = _exact_step(g, reverse, EXCLUDE[name])
        return {"exact": exact, "leaks": _leaks(g, reverse), "global": _global_uniform(g),
                "metrics": _metrics(g), "refused": _refused(g, reverse),
                "against_dgls": _against_dgls(g, reverse, name)}
    finally:
        g.close()


def _jobs(session, names, cache):
    """:func:`_job` for each strategy of ``names`` in turn, on the same ranks."""
    return {name: _job(session, name, cache) for name in names}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """{name: {rank: _job's result}} for every strategy of EXCLUDE, in one launch of 2 ranks
    (each strategy's graph closed before the next)."""
    tmp = tmp_path_factory.mktemp("link")
    names = sorted(EXCLUDE)
    res = run_workers(_jobs, 2, tmp / "run", names, str(tmp / "cache"),
                      env={"DGLX_VIRTUAL_SERVERS": "2"}, timeout=480)
    return {name: {r: res[r][name] for r in res} for name in names}


@pytest.fixture(scope="module", params=sorted(EXCLUDE))
def job(request, jobs):
    return request.param, jobs[request.param]


def _reference(batches_per_rank, exclude):
    """Single-process DGL: each rank's loss on the whole graph (without that rank's batch
    edges and their reverses, with exclude="reverse_id"), averaged over the ranks (DDP), one
    SGD step."""
    full, reverse = _graph()
    model = _model(full)
    losses = []
    for batch in batches_per_rank:
        eids = torch.tensor(batch["eids"], dtype=torch.long)
        g = full
        if exclude == "reverse_id":
            g = dgl.remove_edges(full, torch.unique(torch.cat([eids, reverse[eids]])))
        h = model([g, g], g.ndata["feat"])
        pos = model.predictor(h[batch["pos"][0]] * h[batch["pos"][1]]).squeeze(1)
        neg = model.predictor(h[batch["neg"][0]] * h[batch["neg"][1]]).squeeze(1)
        losses.append(_loss(pos, neg))
    torch.stack(losses).mean().backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= LR * p.grad
    return model


def test_one_step_matches_single_process_dgl(job):
    name, res = job
    full, reverse = _graph()
    batches = [res[r]["exact"][0] for r in range(2)]
    assert all(len(b) == 1 for b in batches), name
    batches = [b[0] for b in batches]
    every = sorted(e for b in batches for e in b["eids"])
    assert every == sorted((torch.arange(SEEDS) * 37).tolist())  # each seed edge once
    src, dst = full.find_edges(torch.tensor(batches[0]["eids"]))
    assert batches[0]["pos"] == [src.tolist(), dst.tolist()]  # pairs in the batch's order
    want = _reference(batches, EXCLUDE[name])
    with torch.no_grad():
        embeddings = want([full, full], full.ndata["feat"])[PROBE]
    for r in range(2):
        _, params, cols, got, fanouts = res[r]["exact"]
        assert_same_params(f"{name} rank {r}", want, params, cols)
        np.testing.assert_allclose(np.array(got), embeddings.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=f"{name} rank {r}: dglx_dist.inference")
        if EXCLUDE[name] is None:  # full-graph steps: sampled inference refused
            assert fanouts["sampled"] == (
                f"NotSupportedError: inference: fanouts under {name}: its steps are full-graph "
                f"forwards over every neighbour; leave fanouts out"), fanouts
            continue
        # fanouts above Cora's largest in-degree (168) draw every neighbour: the same rows
        np.testing.assert_allclose(np.array(fanouts["sampled"]), embeddings.numpy(),
                                   rtol=1e-4, atol=1e-5, err_msg=f"{name} rank {r}: fanouts")
        assert fanouts["wrong"] == ("InvalidValueError: inference: fanouts [200] has 1 "
                                    "entries; the model has 2 layers, one each"), fanouts


def test_no_positive_edge_or_its_reverse_in_the_blocks(job):
    name, res = job
    if EXCLUDE[name] is None:  # full-graph steps: exclusion refused, with what to do instead
        for r in range(2):
            assert res[r]["leaks"] == (
                f"NotSupportedError: {name}: exclude= cannot be honoured (every step passes "
                "messages over the whole graph); pass exclude=None and remove held-out edges "
                "from the graph before distribute"), res[r]["leaks"]
        return
    for r in range(2):
        got = res[r]["leaks"]
        assert got["batches"] == got["steps"] > 1, (name, got)
        assert got["leaks"] == 0, (name, got)
        assert got["prefetched"] == got["batches"], (name, got)
    # the two ranks' shares are the training edges, each once
    assert sum(res[r]["leaks"]["mine"] for r in range(2)) == len(range(0, 10556, 3))


def test_the_packages_edge_sampler_steps_as_dgls(job):
    """``dglx_dist.as_edge_prediction_sampler`` with ``dglx_dist.negative_sampler``'s
    ``Uniform`` (and ``GlobalUniform`` with ``exclude="self"`` where blocks are sampled) takes
    the very steps DGL's own objects take through the loader; the negatives are k per
    positive (GlobalUniform: at most k), node ids of the graph; the pair graphs are the
    package's."""
    name, res = job
    for r in range(2):
        got = res[r]["against_dgls"]
        assert set(got) == {f"Uniform/{EXCLUDE[name]}"} | (
            {"GlobalUniform/self"} if EXCLUDE[name] else set()), got
        for key, run in got.items():
            assert run["same"] and run["steps"] >= 2, (name, key, run)
            k = 2 * run["pos"]
            assert run["neg"] == k if key.startswith("Uniform") else 0.9 * k <= run["neg"] <= k
            assert 0 <= run["range"][0] and run["range"][1] < 2708, (name, key, run)
            assert run["graphs"] == ["Graph", "Graph"]  # the package's (DGL's: DGL's loaders)


def test_global_uniform_draws_every_part_in_proportion_and_no_edge(job):
    name, res = job
    full, _ = _graph()
    got = [res[r]["global"] for r in range(2)]
    u = torch.tensor(sum((x["u"] for x in got), []))
    v = torch.tensor(sum((x["v"] for x in got), []))
    assert 7000 <= u.numel() <= 8000  # what a rank asked for, minus the rare edge or repeat
    assert not bool(full.has_edges_between(u, v).any())
    assert not bool((u == v).any())
    pairs = set(zip(u.tolist()[:u.numel() // 2], v.tolist()[:u.numel() // 2]))
    assert len(pairs) == u.numel() // 2 or len(got[0]["u"]) != u.numel() // 2
    owner = np.array(sum((x["owner"] for x in got), []))
    sizes = np.array(got[0]["part_sizes"])
    share = np.bincount(owner, minlength=sizes.size) / owner.size
    # 2 x ~7500 endpoints: a part's share is within 2 points of its share of the nodes (the
    # binomial's standard deviation is about 0.4 points)
    np.testing.assert_allclose(share, sizes / sizes.sum(), atol=0.02, err_msg=name)


def _metrics_reference(pos, neg, ks):
    ranks = [1 + sum(n > p for n in row) + 0.5 * sum(n == p for n in row)
             for p, row in zip(pos, neg)]
    out = {"mrr": float(np.mean([1 / r for r in ranks]))}
    out.update({f"hits@{k}": float(np.mean([r <= k for r in ranks])) for k in ks})
    negs = [n for row in neg for n in row]
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in negs)
    out["auc"] = wins / (len(pos) * len(negs))
    return out


def test_ranking_metrics_over_ranks_are_those_of_all_scores(job):
    name, res = job
    pos = sum((res[r]["metrics"]["pos"] for r in range(2)), [])
    neg = sum((res[r]["metrics"]["neg"] for r in range(2)), [])
    want = _metrics_reference(pos, neg, (1, 3))
    for r in range(2):
        got = res[r]["metrics"]["got"]
        assert got.keys() == want.keys()
        for key in want:
            assert got[key] == pytest.approx(want[key], rel=1e-9), (name, key)


def test_bad_arguments_are_one_clear_error(job):
    name, res = job
    for r in range(2):
        got = res[r]["refused"]
        assert got["eids"].startswith("IdOutOfRangeError: DataLoader: ids [10556] out of "
                                      "range; the graph has edges 0..10555"), got
        assert got["reverse"].startswith("InvalidValueError: as_edge_prediction_sampler: "
                                         "reverse_eids has shape (10555,); expected one "
                                         "reverse edge id per edge (10556,)"), got
        assert got["mode"].startswith("NotSupportedError: as_edge_prediction_sampler: "
                                      "exclude='reverse_types'"), got
        assert got["negatives"].startswith("IdOutOfRangeError: the negative sampler's "
                                           "destinations: ids ["), got


def _dorylus(session, cache):
    full, _ = _graph()
    g = dglx_dist.distribute(full, "dorylus", cache_dir=cache, session=session)
    try:
        dglx_dist.DataLoader(g, torch.arange(8), dglx_dist.as_edge_prediction_sampler(
            dglx_dist.MultiLayerFullNeighborSampler(2)), batch_size=4)
    except Exception as e:  # noqa: BLE001 - the message is what is checked
        return f"{type(e).__name__}: {e}"
    return None


def test_a_strategy_without_link_prediction_refuses_the_edge_loader(tmp_path):
    res = run_workers(_dorylus, 2, tmp_path / "run", str(tmp_path / "cache"))
    for r in range(2):
        assert res[r] == ("NotSupportedError: DataLoader: strategy 'dorylus' does not train "
                          "link prediction (edge loaders run under distdgl, p3, granndis and "
                          "fullgraph; docs/link_prediction.md)"), res[r]


def _split(session, cache):
    """What every rank of a job gets from the link task's split, and what rank 0 wrote."""
    from dglx_dist.data import read_dataset
    from dglx_dist.prepare import resolve_dataset
    from dglx_dist.tasks.link import split_once

    path, val, test = split_once(resolve_dataset("cora"), 0, session, cache)
    ds = read_dataset(path)
    return {"path": str(path), "pairs": [t.tolist() for t in (*val, *test)],
            "edges": [ds.src.tolist(), ds.dst.tolist()], "feat": ds.feat.sum().item()}


def test_the_link_split_is_made_once_by_rank_0_and_read_by_every_rank(tmp_path):
    """``dglx train --task link``'s split (tasks.link.split_once): rank 0 writes the
    training graph with the held-out pairs into the cache, every rank reads the same, and it
    is what split_pairs gives in one process."""
    from dglx_dist.data import read_dataset
    from dglx_dist.prepare import resolve_dataset
    from dglx_dist.tasks.link import split_pairs

    res = run_workers(_split, 2, tmp_path / "run", str(tmp_path / "cache"))
    assert res[0] == res[1]
    full = read_dataset(resolve_dataset("cora"))
    train, _, val, test = split_pairs(full, 0)
    assert res[0]["pairs"] == [t.tolist() for t in (*val, *test)]
    assert res[0]["edges"] == [train.src.tolist(), train.dst.tolist()]
    assert res[0]["feat"] == pytest.approx(full.feat.sum().item())
    entries = [p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")]
    assert entries == [Path(res[0]["path"]).name] and entries[0].startswith("cora-link-split-")
