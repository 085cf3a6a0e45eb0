"""A DGL user's own ``BlockSampler`` through ``dglx_dist.DataLoader`` (issue 35): written as
DGL's user guide teaches (the graph's ``in_subgraph`` / ``sample_neighbors`` and
``dgl.to_block``), it runs unchanged under distdgl and p3; its blocks are those of the same
sampler on single-process DGL, it trains to the single-process accuracy, and what the
distributed graph cannot serve is refused in one line on every rank. DGL's
``ShaDowKHopSampler`` (steps of one subgraph) and ``NeighborSampler(edge_dir="out")`` run
the same way."""
import statistics

import dgl
import dgl.nn as dglnn
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import dglx_dist
from dglx_dist.data import CoraGraphDataset
from dglx_dist.sampling.in_edges import InEdges
from dglx_dist.sampling.labor import draw_labor
from dglx_dist.testing import run_workers
from dglx_dist.testing.models import seeded_model

pytestmark = pytest.mark.dist


class FullNeighbors(dgl.dataloading.BlockSampler):
    """Every in-edge of each layer's seeds (the guide's first example)."""

    def __init__(self, num_layers, **kwargs):
        super().__init__(**kwargs)
        self.num_layers = num_layers

    def sample_blocks(self, g, seed_nodes, exclude_eids=None):
        output_nodes, blocks = seed_nodes, []
        for _ in range(self.num_layers):
            frontier = g.in_subgraph(seed_nodes)
            block = dgl.to_block(frontier, seed_nodes)
            block.edata[dgl.EID] = frontier.edata[dgl.EID]  # the graph's edge ids
            seed_nodes = block.srcdata[dgl.NID]
            blocks.insert(0, block)
        return seed_nodes, output_nodes, blocks


class FewNeighbors(dgl.dataloading.BlockSampler):
    """``fanouts[i]`` in-edges per seed in layer i, drawn by ``g.sample_neighbors``, and a
    look at every seed's in-degree on the way."""

    def __init__(self, fanouts, prob=None):
        super().__init__()
        self.fanouts, self.prob = fanouts, prob

    def sample_blocks(self, g, seed_nodes, exclude_eids=None):
        output_nodes, blocks = seed_nodes, []
        for fanout in reversed(self.fanouts):
            assert g.in_degrees(seed_nodes).min() >= 0
            frontier = g.sample_neighbors(seed_nodes, fanout, prob=self.prob)
            block = dgl.to_block(frontier, seed_nodes)
            block.edata[dgl.EID] = frontier.edata[dgl.EID]
            seed_nodes = block.srcdata[dgl.NID]
            blocks.insert(0, block)
        return seed_nodes, output_nodes, blocks


class Probe(FullNeighbors):
    """One layer of every in-edge, and what the graph says of each batch's seeds: their
    out-edges (``form="all"``) and both degrees."""

    def __init__(self):
        super().__init__(1)
        self.seen = []

    def sample_blocks(self, g, seed_nodes, exclude_eids=None):
        self.seen.append((seed_nodes, g.out_edges(seed_nodes, form="all"),
                          g.in_degrees(seed_nodes), g.out_degrees(seed_nodes)))
        return super().sample_blocks(g, seed_nodes, exclude_eids)


class SAGE(torch.nn.Module):
    def __init__(self, in_feats, classes):
        super().__init__()
        self.layers = torch.nn.ModuleList([dglnn.SAGEConv(in_feats, 16, "mean"),
                                           dglnn.SAGEConv(16, classes, "mean")])

    def forward(self, blocks, x):
        h = F.relu(self.layers[0](blocks[0], x))
        return self.layers[1](blocks[1], h)


class SubgraphSAGE(SAGE):
    """:class:`SAGE` over a ShaDow-GNN subgraph: a row per node of it (its seeds first)."""

    def forward(self, graph, x):
        return self.layers[1](graph, F.relu(self.layers[0](graph, x)))


def _step_and_train(session, name, cache):
    """A full-neighbourhood step with :class:`FullNeighbors` (output ids, logits, block
    edges), then training with :class:`FewNeighbors` and the test accuracy."""
    g = dglx_dist.distribute(CoraGraphDataset()[0], name, cache_dir=cache, session=session)
    loader = dglx_dist.DataLoader(g, g.ndata["train_mask"], FullNeighbors(2), batch_size=1000)
    model = dglx_dist.parallelize(seeded_model(lambda: SAGE(1433, 7)), g)
    out = {"outputs": [], "logits": [], "edges": []}
    for input_nodes, output_nodes, blocks in loader:
        out["logits"].append(model(blocks, g.ndata["feat"][input_nodes]).tolist())
        out["outputs"].append(output_nodes.tolist())
        for b in blocks:
            s, d = b.edges()
            out["edges"].append([g.node_ids(b.srcdata[dgl.NID][s]).tolist(),
                                 g.node_ids(b.dstdata[dgl.NID][d]).tolist(),
                                 b.edata[dgl.EID].tolist()])
    out["test_acc"] = _train(g, model)
    out["labor"] = _labor(g)
    out["labor_links"] = _labor_links(g)
    out["probe"] = _probe(g)
    out["shadow"] = _shadow(g)
    g.close()
    return out


def _probe(g):
    """What :class:`Probe` saw (in the graph's node ids), and the graph's own degrees."""
    probe = Probe()
    outputs = [output_nodes.tolist() for _, output_nodes, _ in dglx_dist.DataLoader(
        g, torch.arange(g.session.rank, 400, 3), probe, batch_size=60)]
    seen = [[seeds.tolist(), src.tolist(), dst.tolist(), eid.tolist(), ind.tolist(),
             outd.tolist()] for seeds, (src, dst, eid), ind, outd in probe.seen]
    ids = torch.arange(g.session.rank, 2708, 97)  # the DistGraph's own methods (collective)
    drawn = g.sample_neighbors(ids, 3)
    whole = {"sampled": [t.tolist() for t in (*drawn.edges(), drawn.edata[dgl.EID])],
             "in": [t.tolist() for t in g.in_edges(ids, form="all")],
             "out": g.out_edges(ids, form="eid").tolist(),
             "sub": g.in_subgraph(ids).num_edges(),
             "drawn_out": [t.tolist() for t in
                           g.sample_neighbors(ids, 3, edge_dir="out").edges()]}
    return {"seen": seen, "out_blocks": _out_blocks(g), "outputs": outputs, "whole": whole,
            "in": g.in_degrees(torch.arange(0, 2708, 7)).tolist(),
            "out": g.out_degrees().tolist(), "one": [g.in_degrees(5), g.out_degrees(5)]}


def _out_blocks(g):
    """DGL's NeighborSampler of out-edges (every one, two layers): each step's output ids and
    its blocks' edges as (source id, destination id, edge id)."""
    sampler = dgl.dataloading.NeighborSampler([-1, -1], edge_dir="out")
    loader = dglx_dist.DataLoader(g, torch.arange(g.session.rank, 200, 5), sampler,
                                  batch_size=20)
    return [(output_nodes.tolist(), [_triples(g, b) for b in blocks])
            for _, output_nodes, blocks in loader]


def _triples(g, block):
    s, d = block.edges()
    src, dst = block.srcdata[dgl.NID][s], block.dstdata[dgl.NID][d]
    if g is not None:
        src, dst = g.node_ids(src), g.node_ids(dst)
    return sorted(zip(src.tolist(), dst.tolist(), block.edata[dgl.EID].tolist()))


def _labor(g):
    """DGL's LaborSampler (layer dependency, a fixed seed): each step's output ids, its
    blocks' edge ids and source counts."""
    labor = dgl.dataloading.LaborSampler([3, 3], layer_dependency=True)
    labor.set_seed(123)
    rank, world = g.session.rank, g.session.world_size
    loader = dglx_dist.DataLoader(g, torch.arange(rank, 600, world), labor, batch_size=50)
    return [(output_nodes.tolist(), [sorted(b.edata[dgl.EID].tolist()) for b in blocks],
             [b.num_src_nodes() for b in blocks]) for _, output_nodes, blocks in loader]


def _labor_links(g):
    """DGL's LaborSampler in an edge loader leaving each batch's edges out: each step's pair
    nodes, its edges and its blocks' edge ids."""
    labor = dgl.dataloading.LaborSampler([3, 3], layer_dependency=True)
    labor.set_seed(7)
    sampler = dglx_dist.as_edge_prediction_sampler(labor, exclude="self")
    eids = torch.arange(g.session.rank, 1200, g.session.world_size)
    return [(pair.ndata[dgl.NID].tolist(), pair.edata[dgl.EID].tolist(),
             [sorted(b.edata[dgl.EID].tolist()) for b in blocks])
            for _, pair, blocks in dglx_dist.DataLoader(g, eids, sampler, batch_size=100)]


SHADOW_EPOCHS = 15  # single-process DGL: 0.774 to 0.791 over three seeds (30: 0.787 to 0.798)


def _shadow(g):
    """DGL's ShaDowKHopSampler: each step's ids, subgraph edges and logits with every
    2-hop in-neighbour, then the test accuracy after training with [10, 5] (under p3: the
    loader's refusal)."""
    from dglx_dist.errors import NotSupportedError

    rank, world = g.session.rank, g.session.world_size
    try:
        loader = dglx_dist.DataLoader(g, torch.arange(rank, 300, world),
                                      dgl.dataloading.ShaDowKHopSampler([-1, -1]),
                                      batch_size=40)
    except NotSupportedError as exc:
        return str(exc)
    model = dglx_dist.parallelize(seeded_model(lambda: SubgraphSAGE(1433, 7)), g)
    steps = []
    with torch.no_grad():
        for input_nodes, output_nodes, sub in loader:
            logits = model(sub, g.ndata["feat"][input_nodes])[:len(output_nodes)]
            s, d = sub.edges()
            steps.append([input_nodes.tolist(), output_nodes.tolist(), s.tolist(), d.tolist(),
                          sub.edata[dgl.EID].tolist(), logits.tolist()])
    _fit(g, model, dglx_dist.DataLoader(g, g.ndata["train_mask"], dgl.dataloading.
                                        ShaDowKHopSampler([10, 5]), shuffle=True,
                                        batch_size=32 // world), epochs=SHADOW_EPOCHS)
    test = dglx_dist.DataLoader(g, g.ndata["test_mask"],
                                dgl.dataloading.ShaDowKHopSampler([-1, -1]), batch_size=1000)
    return {"steps": steps, "test_acc": _test_accuracy(g, model, test)}


def _test_accuracy(g, model, loader):
    correct = total = 0
    with torch.no_grad():
        for input_nodes, output_nodes, graph in loader:
            logits = model(graph, g.ndata["feat"][input_nodes])[:len(output_nodes)]
            correct += int((logits.argmax(1) == g.ndata["label"][output_nodes]).sum())
            total += len(output_nodes)
    correct, total = dglx_dist.all_reduce([correct, total]).tolist()
    return correct / total


def _fit(g, model, loader, epochs=30):
    """The same loop on the DistGraph and on the plain DGLGraph (blocks, or a subgraph
    whose first rows are the seeds')."""
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(epochs):
        for input_nodes, output_nodes, blocks in loader:
            logits = model(blocks, g.ndata["feat"][input_nodes])[:len(output_nodes)]
            loss = F.cross_entropy(logits, g.ndata["label"][output_nodes])
            opt.zero_grad()
            loss.backward()
            opt.step()


def _train(g, model):
    # the plain script's 32 seeds per step over every rank: as many updates
    _fit(g, model, dglx_dist.DataLoader(g, g.ndata["train_mask"], FewNeighbors([10, 10]),
                                        batch_size=32 // g.session.world_size, shuffle=True))
    test = dglx_dist.DataLoader(g, g.ndata["test_mask"], FullNeighbors(2), batch_size=1000)
    return _test_accuracy(g, model, test)


def _plain_accuracy(build, sampler, epochs=30, seed=0):
    """The same training on single-process DGL with the same sampler; the test accuracy
    over the whole graph (what every 2-hop in-neighbourhood gives)."""
    torch.manual_seed(seed)
    dgl.seed(seed)
    g = CoraGraphDataset()[0]
    model = seeded_model(build)
    train = torch.nonzero(g.ndata["train_mask"]).squeeze(1)
    _fit(g, model, dgl.dataloading.DataLoader(g, train, sampler, batch_size=32, shuffle=True),
         epochs)
    test = torch.nonzero(g.ndata["test_mask"]).squeeze(1)
    with torch.no_grad():
        logits = model(g, g.ndata["feat"]) if isinstance(model, SubgraphSAGE) else \
            model([g, g], g.ndata["feat"])
    return float((logits[test].argmax(1) == g.ndata["label"][test]).float().mean())


def _launch(session, name, cache, refusals):
    """One launch: :func:`_step_and_train`, then (``refusals``) :func:`_refusals`."""
    out = {"run": _step_and_train(session, name, cache)}
    if refusals:
        out["said"] = _refusals(session, cache)
    return out


@pytest.fixture(scope="module")
def launches(tmp_path_factory):
    """distdgl at 4 ranks (2 servers x 2); p3 at 2 ranks, then the refusals (two launches
    for the module: the suite's time budget)."""
    cache = str(tmp_path_factory.mktemp("cache"))
    return {name: run_workers(_launch, world, tmp_path_factory.mktemp(name), name, cache,
                              name == "p3", env={"DGLX_VIRTUAL_SERVERS": "2"}, timeout=300)
            for name, world in (("distdgl", 4), ("p3", 2))}


@pytest.fixture(scope="module")
def runs(launches):
    return {name: {r: res[r]["run"] for r in res} for name, res in launches.items()}


@pytest.mark.parametrize("name", ["distdgl", "p3"])
def test_a_users_sampler_gives_single_process_blocks_and_logits(runs, name):
    g = CoraGraphDataset()[0]
    model = seeded_model(lambda: SAGE(1433, 7))
    with torch.no_grad():
        logits = model([g, g], g.ndata["feat"])
    src, dst = (t.tolist() for t in g.edges())
    for r, out in runs[name].items():
        (ids,), (got,) = out["outputs"], out["logits"]
        np.testing.assert_allclose(got, logits[ids].tolist(), rtol=1e-4, atol=1e-5)
        seeds = ids
        for s, d, e in reversed(out["edges"]):  # output layer first
            want = g.in_edges(torch.tensor(seeds), form="eid")
            assert sorted(e) == sorted(want.tolist()), f"rank {r}"
            assert [src[i] for i in e] == s and [dst[i] for i in e] == d
            seeds = sorted(set(seeds) | set(s))


@pytest.fixture(scope="module")
def plain():
    return _plain_accuracy(lambda: SAGE(1433, 7), FewNeighbors([10, 10]))


@pytest.mark.parametrize("name", ["distdgl", "p3"])
def test_a_users_sampler_trains_to_single_process_accuracy(runs, plain, name):
    for r, out in runs[name].items():
        assert out["test_acc"] >= plain - 0.02, (r, out["test_acc"], plain)


class _OneProcess:
    """Cora in one process whose ``sample_labors`` is the package's LABOR
    (:func:`~dglx_dist.sampling.labor.draw_labor`) over the whole graph, each source's
    variate rolled by its id: what DGL's ``LaborSampler`` draws on it is what one process
    draws. (The law against DGL's own ``sample_labors``: tests/unit/test_labor.py.)"""

    def __init__(self, g):
        self.g, self.edges = g, InEdges.of(*g.edges(), g.num_nodes())
        self.canonical_etypes = g.canonical_etypes

    def sample_labors(self, seed_nodes, fanout, random_seed=None, seed2_contribution=0.0,
                      exclude_edges=None, **kwargs):
        seeds = tuple(torch.as_tensor(random_seed.asnumpy()).reshape(-1).tolist())
        _, pos = draw_labor(self.edges, seed_nodes, fanout, seeds, seed2_contribution,
                            exclude=exclude_edges)
        eid = self.edges.eid[pos]
        src, dst = self.g.find_edges(eid)
        frontier = dgl.graph((src, dst), num_nodes=self.g.num_nodes())
        frontier.edata[dgl.EID] = eid
        return frontier, [torch.zeros(0)]


@pytest.mark.parametrize("name", ["distdgl", "p3"])
def test_labor_draws_what_one_process_draws(runs, name):
    """LABOR over the partitions rolls each source's variate from the same seed on every
    rank, so each step's blocks are those DGL's LaborSampler draws for the same seeds in one
    process: the same edges, hence the same sources per layer."""
    g = _OneProcess(CoraGraphDataset()[0])
    for r, out in runs[name].items():
        ref = dgl.dataloading.LaborSampler([3, 3], layer_dependency=True)
        ref.set_seed(123)
        for outputs, eids, sources in out["labor"]:
            _, _, blocks = ref.sample_blocks(g, torch.tensor(outputs))
            assert [sorted(b.edata[dgl.EID].tolist()) for b in blocks] == eids, f"rank {r}"
            assert [b.num_src_nodes() for b in blocks] == sources
        assert len(out["labor"]) > 1


@pytest.mark.parametrize("name", ["distdgl", "p3"])
def test_labor_in_an_edge_loader_leaves_the_batch_out_as_one_process_does(runs, name):
    """``as_edge_prediction_sampler(LaborSampler(...), exclude="self")``: each step's blocks
    are those DGL's LaborSampler draws in one process for the pair graph's nodes without the
    batch's edges, and hold none of them."""
    g = _OneProcess(CoraGraphDataset()[0])
    for r, out in runs[name].items():
        ref = dgl.dataloading.LaborSampler([3, 3], layer_dependency=True)
        ref.set_seed(7)
        assert len(out["labor_links"]) > 1
        for nodes, batch, eids in out["labor_links"]:
            _, _, blocks = ref.sample_blocks(g, torch.tensor(nodes),
                                             exclude_eids=torch.tensor(batch))
            assert [sorted(b.edata[dgl.EID].tolist()) for b in blocks] == eids, f"rank {r}"
            assert not set(batch) & {e for layer in eids for e in layer}


@pytest.mark.parametrize("name", ["distdgl", "p3"])
def test_the_distgraphs_own_edge_methods_are_dgls(runs, name):
    """``g.sample_neighbors`` / ``in_edges`` / ``out_edges`` / ``in_subgraph`` called on the
    DistGraph by every rank at once, in its node ids."""
    g = CoraGraphDataset()[0]
    src, dst = (t.tolist() for t in g.edges())
    for r, out in runs[name].items():
        whole, ids = out["probe"]["whole"], torch.arange(r, 2708, 97)
        u, v, e = whole["sampled"]
        assert [src[i] for i in e] == u and [dst[i] for i in e] == v
        per = torch.bincount(torch.tensor(v, dtype=torch.int64), minlength=2708)[ids]
        assert per.tolist() == g.in_degrees(ids).clamp(max=3).tolist()
        assert sorted(zip(*whole["in"])) == sorted(zip(*(t.tolist() for t in
                                                         g.in_edges(ids, form="all"))))
        assert sorted(whole["out"]) == sorted(g.out_edges(ids, form="eid").tolist())
        assert whole["sub"] == int(g.in_degrees(ids).sum())


@pytest.mark.parametrize("name", ["distdgl", "p3"])
def test_degrees_and_out_edges_are_dgls(runs, name):
    """``g.in_degrees`` / ``g.out_degrees`` of the DistGraph (read alone, from the store), and
    a sampler's ``g.out_edges`` (gathered from every part) and degrees: single-process DGL's."""
    g = CoraGraphDataset()[0]
    for r, out in runs[name].items():
        probe = out["probe"]
        assert probe["in"] == g.in_degrees(torch.arange(0, 2708, 7)).tolist()
        assert probe["out"] == g.out_degrees().tolist()
        assert probe["one"] == [g.in_degrees(5), g.out_degrees(5)]
        # the sampler is handed each batch's seeds in the graph's own ids, the loader's
        assert [seen[0] for seen in probe["seen"]] == probe["outputs"] and probe["outputs"]
        for seeds, src, dst, eid, ind, outd in probe["seen"]:
            ids = torch.tensor(seeds)
            u, v, e = g.out_edges(ids, form="all")
            assert sorted(zip(src, dst, eid)) == sorted(zip(u.tolist(), v.tolist(),
                                                            e.tolist())), f"rank {r}"
            assert ind == g.in_degrees(ids).tolist() and outd == g.out_degrees(ids).tolist()


class AsksOutEdges(FullNeighbors):
    def sample_blocks(self, g, seed_nodes, exclude_eids=None):
        g.out_subgraph(seed_nodes)


class CallsTheFunction(FullNeighbors):
    def sample_blocks(self, g, seed_nodes, exclude_eids=None):
        dgl.in_subgraph(g, seed_nodes)


class Unchained(FullNeighbors):
    def sample_blocks(self, g, seed_nodes, exclude_eids=None):
        inputs, outputs, blocks = super().sample_blocks(g, seed_nodes)
        return inputs, outputs, blocks[::-1]


def _refusals(session, cache):
    import dglx_dist.errors as errors

    said = []
    for name, samplers in (("distdgl", (AsksOutEdges(2), CallsTheFunction(2), Unchained(2),
                                        FewNeighbors([2], prob="nope"))),
                           ("granndis", (FullNeighbors(2),))):
        g = dglx_dist.distribute(CoraGraphDataset()[0], name, cache_dir=cache,
                                 session=session)
        for sampler in samplers:
            try:
                for _ in dglx_dist.DataLoader(g, torch.arange(40), sampler, batch_size=10):
                    pass
                said.append(None)
            except errors.DglxError as exc:
                said.append(f"{type(exc).__name__}: {exc}")
        g.close()
    return said


def test_what_the_graph_cannot_serve_is_one_line_on_every_rank(launches):
    res = {r: out["said"] for r, out in launches["p3"].items()}
    assert res[0] == res[1]
    out_edges, function, unchained, prob, granndis = res[0]
    assert out_edges.startswith("NotServedError: DataLoader: sampler AsksOutEdges asked the "
                                "distributed graph for 'out_subgraph', which it does not have; "
                                "samplers are served sample_neighbors, sample_labors, "
                                "in_subgraph")
    assert "for '_graph'" in function and "not DGL's functions that need a local graph" in \
        function
    assert "the blocks do not chain: blocks[1]'s destination nodes are not the seeds" in \
        unchained
    assert "g.sample_neighbors(prob='nope'): not edge data of this graph; it has []" in prob
    assert "sampler FullNeighbors under strategy 'granndis', which does not sample" in granndis


def test_shadow_subgraphs_are_single_process_dgls(runs):
    """DGL's ShaDowKHopSampler under distdgl (4 ranks as 2 servers x 2): with every 2-hop
    in-neighbour each step's subgraph is the one single-process DGL's sampler induces for
    the same seeds (its nodes, the seeds first; its edges) and a model over it gives its
    logits."""
    g = CoraGraphDataset()[0]
    model = seeded_model(lambda: SubgraphSAGE(1433, 7))
    for r, out in runs["distdgl"].items():
        assert len(out["shadow"]["steps"]) > 1
        for inputs, outputs, s, d, eids, logits in out["shadow"]["steps"]:
            ref_in, ref_out, sub = dgl.dataloading.ShaDowKHopSampler([-1, -1]).sample(
                g, torch.tensor(outputs))
            assert inputs[:len(outputs)] == outputs == ref_out.tolist(), f"rank {r}"
            assert sorted(inputs) == sorted(ref_in.tolist())
            assert sorted(eids) == sorted(sub.edata[dgl.EID].tolist())
            ids = torch.tensor(inputs)
            src, dst = g.find_edges(torch.tensor(eids))
            assert ids[s].tolist() == src.tolist() and ids[d].tolist() == dst.tolist()
            with torch.no_grad():
                want = model(sub, g.ndata["feat"][ref_in])[:len(outputs)]
            np.testing.assert_allclose(logits, want.tolist(), rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def plain_shadow():
    """The median over three seeds (single runs spread by 1.7 points; measured 0.778 at seed
    0, and 0.778 under distdgl)."""
    return statistics.median(_plain_accuracy(lambda: SubgraphSAGE(1433, 7),
                                             dgl.dataloading.ShaDowKHopSampler([10, 5]),
                                             SHADOW_EPOCHS, seed) for seed in range(3))


def test_shadow_trains_to_single_process_accuracy_and_p3_refuses_it(runs, plain_shadow):
    for r, out in runs["distdgl"].items():
        assert out["shadow"]["test_acc"] >= plain_shadow - 0.02, (r, out["shadow"]["test_acc"],
                                                                  plain_shadow)
    for out in runs["p3"].values():
        assert out["shadow"].startswith("DataLoader: sampler ShaDowKHopSampler (its steps are "
                                        "subgraphs, not blocks) under strategy 'p3'"), out


@pytest.mark.parametrize("name", ["distdgl", "p3"])
def test_out_edges_are_drawn_as_dgl_draws_them(runs, name):
    """``g.sample_neighbors(..., edge_dir="out")`` draws up to the fanout of each seed's
    out-edges (gathered from every part); with ``NeighborSampler(edge_dir="out")`` the seeds
    aggregate their out-neighbours: its blocks are those single-process DGL's in-edge
    sampler gives on the reversed graph (same edge ids) for the same seeds."""
    g = CoraGraphDataset()[0]
    src, dst = (t.tolist() for t in g.edges())
    ref, reverse = dgl.dataloading.NeighborSampler([-1, -1]), dgl.reverse(g)
    for r, out in runs[name].items():
        ids = torch.arange(r, 2708, 97)
        u, v = out["probe"]["whole"]["drawn_out"]
        per = torch.bincount(torch.tensor(u, dtype=torch.int64), minlength=2708)[ids]
        assert per.tolist() == g.out_degrees(ids).clamp(max=3).tolist(), f"rank {r}"
        assert set(zip(u, v)) <= set(zip(src, dst))
        assert len(out["probe"]["out_blocks"]) > 1
        for outputs, blocks in out["probe"]["out_blocks"]:
            _, _, want = ref.sample_blocks(reverse, torch.tensor(outputs))
            assert [[list(t) for t in b] for b in blocks] == \
                [[list(t) for t in _triples(None, b)] for b in want], f"rank {r}"
