"""Link prediction on edge types of a typed graph through the drop-in API (distdgl, 2 ranks
on 2 virtual servers and 4 ranks as 2 servers x 2), against single-process DGL's own edge
loader.

One job per shape runs every check and the tests read its results: with full neighbourhoods,
a batch of ("paper", "cites", "paper") and ("author", "writes", "paper") edges with
exclude="reverse_types" gives pair graphs of exactly the batch's edges and blocks whose edges,
per layer and edge type, are those DGL's DataLoader gives for the same seeds, negatives and
exclusion (the excluded edges absent); so does exclude="reverse_id" with reverse_eids per edge
type; DGL's Uniform(k) draws negatives of the right types and ranges; sampled batches never
hold a batch edge or its reverse of the reverse type; find_edges and edge_split take per-type
ids; bad arguments are one line on every rank. Last, a short training run (the benchmark's,
benchmarks/bench_hetero_link.py) learns the held-out links.
"""
import collections
import re

import dgl
import pytest
import torch

import dglx_dist
from dglx_dist.testing import run_workers
from tests.dist.test_hetero import typed_graph

pytestmark = pytest.mark.dist
K = 2  # negatives per positive
CITES = ("paper", "cites", "paper")
WRITES = ("author", "writes", "paper")
REV = {"writes": "rev-writes", "rev-writes": "writes"}
SEEDS = {"cites": torch.arange(0, 70, 3), WRITES: torch.arange(1, 90, 4)}
FIND = torch.tensor([0, 17, 69])
EPOCHS = 3  # of the short training run


class FixedNegatives:
    """k negatives per edge of each seed type, a function of its per-type id (the same on a
    DistGraph and on one process): the edge's source, a destination of the type."""

    def __init__(self, k):
        self.k = k

    def __call__(self, g, eids):
        out = {}
        for etype, ids in eids.items():
            etype = g.to_canonical_etype(etype)
            src, _ = g.find_edges(ids, etype=etype)
            step = torch.arange(self.k).repeat(ids.numel())
            out[etype] = (src.repeat_interleave(self.k),
                          (ids.repeat_interleave(self.k) * 7 + step * 13 + 3)
                          % g.num_nodes(etype[2]))
        return out


def _cites_reverse():
    """A reverse edge id for each cites edge (an involution: pairs of ids swapped)."""
    ids = torch.arange(70)
    return torch.where(ids % 2 == 0, (ids + 1) % 70, ids - 1)


def _edges(graph, nid_src, nid_dst):
    """Per canonical edge type, the edges as (src per-type id, dst per-type id)."""
    out = {}
    for et in graph.canonical_etypes:
        s, d = graph.edges(etype=et)
        out[":".join(et)] = list(zip(nid_src[et[0]][s].tolist(), nid_dst[et[2]][d].tolist()))
    return out


def _describe(batch):
    """What a loader's batch holds, in per-type ids (the same shape for ours and DGL's)."""
    input_nodes, pair, neg, blocks = batch
    nid = {t: pair.nodes[t].data[dgl.NID] for t in pair.ntypes}
    return {
        "input": {t: v.tolist() for t, v in input_nodes.items()},
        "pair_nodes": {t: v.tolist() for t, v in nid.items()},
        "eids": {":".join(et): pair.edges[et].data[dgl.EID].tolist()
                 for et in pair.canonical_etypes},
        "pos": _edges(pair, nid, nid), "neg": _edges(neg, nid, nid),
        "neg_types": {":".join(et): neg.num_edges(et) for et in neg.canonical_etypes},
        "labels": {":".join(et): pair.edges[et].data["w"].tolist()
                   for et in pair.canonical_etypes if "w" in pair.edges[et].data},
        "last_dst": {t: blocks[-1].dstnodes[t].data[dgl.NID].tolist() for t in pair.ntypes},
        "blocks": [_edges(b, {t: b.srcnodes[t].data[dgl.NID] for t in b.srctypes},
                          {t: b.dstnodes[t].data[dgl.NID] for t in b.dsttypes})
                   for b in blocks],
    }


def _full_sampler(exclude, **kw):
    return dglx_dist.as_edge_prediction_sampler(
        dglx_dist.MultiLayerFullNeighborSampler(2), exclude=exclude,
        negative_sampler=FixedNegatives(K), **kw)


def _one_batch(g, seeds, sampler):
    batches = [_describe(b) for b in dglx_dist.DataLoader(g, seeds, sampler, batch_size=200)]
    assert len(batches) == 1
    return batches[0]


def _uniform(g):
    sampler = dglx_dist.as_edge_prediction_sampler(
        dglx_dist.MultiLayerFullNeighborSampler(1),
        negative_sampler=dglx_dist.negative_sampler.Uniform(3))
    return _one_batch(g, {WRITES: torch.arange(90)}, sampler)


def _leaks(g):
    """Batch edges (or their reverses of the reverse type) in sampled blocks, an epoch
    (edges told apart by their endpoints: those with a parallel edge are not counted)."""
    src, dst = typed_graph().edges(etype="writes")
    pairs = collections.Counter(zip(src.tolist(), dst.tolist()))
    sampler = dglx_dist.as_edge_prediction_sampler(
        dglx_dist.NeighborSampler([3, 3], prefetch_node_feats=["feat"]),
        exclude="reverse_types", reverse_etypes=REV,
        negative_sampler=dglx_dist.negative_sampler.Uniform(1))
    leaks = batches = 0
    loader = dglx_dist.DataLoader(g, {"writes": torch.arange(90)}, sampler, batch_size=8,
                                  shuffle=True)
    for batch in loader:
        got = _describe(batch)
        writes = {e for e in got["pos"][":".join(WRITES)] if pairs[e] == 1}
        for block in got["blocks"]:
            rev = set(block.get("paper:rev-writes:author", []))  # (left out without edges)
            leaks += len(writes & set(block.get(":".join(WRITES), [])))
            leaks += len({(v, u) for u, v in writes} & rev)
        assert torch.equal(batch[3][0].srcnodes["paper"].data["feat"],
                           g.nodes["paper"].data["feat"][batch[0]["paper"]])
        batches += 1
    return {"leaks": leaks, "batches": batches, "steps": len(loader)}


def _refused(g):
    full = dglx_dist.MultiLayerFullNeighborSampler(2)

    def loader(seeds, **kw):
        return dglx_dist.DataLoader(g, seeds, dglx_dist.as_edge_prediction_sampler(full, **kw),
                                    batch_size=4)

    bad = [lambda: loader({"venue": torch.arange(3)}),
           lambda: loader({"cites": torch.tensor([0, 70])}),
           lambda: loader(torch.arange(3)),
           lambda: loader({"cites": torch.arange(3)}, exclude="reverse_types",
                          reverse_etypes={"cites": "cited-by"}),
           lambda: loader({"cites": torch.arange(3)}, exclude="reverse_types"),
           lambda: loader({"writes": torch.arange(3)}, exclude="reverse_types",
                          reverse_etypes={"writes": "cites"}),
           lambda: loader({"writes": torch.arange(3)}, exclude="reverse_id",
                          reverse_eids={"cites": _cites_reverse()}),
           lambda: loader({"cites": torch.arange(3)}, exclude="reverse_id",
                          reverse_eids={"cites": torch.arange(69)}),
           lambda: loader({"cites": torch.arange(3)}, exclude="reverse"),
           lambda: loader({"cites": torch.arange(3)},
                          negative_sampler=dglx_dist.negative_sampler.GlobalUniform(1)),
           lambda: g.find_edges(torch.tensor([0])),
           lambda: g.find_edges(torch.tensor([50]), etype="has_topic"),
           lambda: loader({"cites": torch.arange(3)}, prefetch_labels=["weight"])]
    out = []
    for call in bad:
        try:
            call()
            out.append("not refused")
        except Exception as exc:  # noqa: BLE001 - the message is what is checked
            out.append(f"{type(exc).__name__}: {exc}")
    return out


def _job(session, cache):
    g = dglx_dist.distribute(typed_graph(), "distdgl", cache_dir=cache, session=session)
    share = dglx_dist.edge_split(torch.ones(70, dtype=torch.bool), g, etype="cites")
    return {"find": {":".join(et): [t.tolist() for t in g.find_edges(FIND, etype=et)]
                     for et in (CITES, WRITES)},
            "split": share.tolist(),
            "types": _one_batch(g, SEEDS, _full_sampler("reverse_types", reverse_etypes=REV,
                                                        prefetch_labels=["w"])),
            "reverse_id": _one_batch(g, {"cites": torch.arange(0, 70, 2)}, _full_sampler(
                "reverse_id", reverse_eids={"cites": _cites_reverse()})),
            "uniform": _uniform(g), "leaks": _leaks(g), "refused": _refused(g)}


@pytest.fixture(scope="module", params=[2, 4], ids=["2x1", "2x2"])
def job(request, tmp_path_factory):
    """Every rank's results, at 2 ranks on 2 virtual servers and at 4 ranks as 2 servers x
    2 (each server's part sampled for two ranks)."""
    tmp = tmp_path_factory.mktemp("hetero-link")
    return run_workers(_job, request.param, tmp / "run", str(tmp / "cache"),
                       env={"DGLX_VIRTUAL_SERVERS": "2"}, timeout=240)


def _dgl_batch(seeds, exclude, **kw):
    """Single-process DGL's own edge loader: one batch of ``seeds`` (per-type ids)."""
    sampler = dgl.dataloading.as_edge_prediction_sampler(
        dgl.dataloading.MultiLayerFullNeighborSampler(2), exclude=exclude,
        negative_sampler=FixedNegatives(K), **kw)
    loader = dgl.dataloading.DataLoader(typed_graph(), seeds, sampler, batch_size=1000)
    batches = [_describe(b) for b in loader]
    assert len(batches) == 1
    return batches[0]


def _pairs(edges):
    """Edges as tuples (the results' JSON made them lists)."""
    return [tuple(e) for e in edges]


def _same_edges(got, want, what):
    """Per edge type, the same edges with their multiplicities (a type without edges may be
    left out: DGL's distributed sampler, unlike its sampler on one graph, leaves it out)."""
    got, want = ({et: e for et, e in edges.items() if len(e)} for edges in (got, want))
    assert got.keys() == want.keys(), what
    for et in want:
        assert collections.Counter(map(tuple, got[et])) == collections.Counter(
            map(tuple, want[et])), (what, et)


def _check_against_dgl(got, want):
    g = typed_graph()
    for et, eids in got["eids"].items():  # the batch's edges, with their endpoints
        src, dst = g.find_edges(torch.tensor(eids, dtype=torch.long), etype=tuple(et.split(":")))
        assert _pairs(got["pos"][et]) == list(zip(src.tolist(), dst.tolist())), et
    assert {t: sorted(v) for t, v in got["pair_nodes"].items()} == \
        {t: sorted(v) for t, v in want["pair_nodes"].items()}
    assert got["last_dst"] == got["pair_nodes"]  # output row i of type t: pair node i
    _same_edges(got["pos"], want["pos"], "pair graph")
    _same_edges(got["neg"], want["neg"], "negative pair graph")
    assert {t: sorted(v) for t, v in got["input"].items()} == \
        {t: sorted(v) for t, v in want["input"].items()}
    for layer, (mine, theirs) in enumerate(zip(got["blocks"], want["blocks"])):
        _same_edges(mine, theirs, f"block {layer}")


def test_reverse_types_batch_matches_dgl_and_leaves_the_edges_out(job):
    g = typed_graph()
    seen = {"paper:cites:paper": [], "author:writes:paper": []}
    for r in job:
        got = job[r]["types"]
        seeds = {tuple(et.split(":")): torch.tensor(ids, dtype=torch.long)
                 for et, ids in got["eids"].items() if ids}
        _check_against_dgl(got, _dgl_batch(seeds, "reverse_types", reverse_etypes=REV))
        for et in seen:
            seen[et] += got["eids"][et]
        # prefetch_labels=["w"]: the batch's cites edges carry their weights, writes has none
        want = g.edges["cites"].data["w"][torch.tensor(got["eids"]["paper:cites:paper"],
                                                        dtype=torch.long)]
        assert list(got["labels"]) == (["paper:cites:paper"] if want.numel() else [])
        assert got["labels"].get("paper:cites:paper", []) == want.tolist()
        # the batch's writes edges are in no layer, nor their rev-writes twins; its cites
        # edges are in no layer either, though their destinations are every layer's
        writes = set(_pairs(got["pos"]["author:writes:paper"]))
        rev = {(v, u) for u, v in writes}
        cites = set(_pairs(got["pos"]["paper:cites:paper"]))
        for block in got["blocks"]:
            assert not writes & set(_pairs(block.get("author:writes:paper", [])))
            assert not rev & set(_pairs(block.get("paper:rev-writes:author", [])))
            assert not cites & set(_pairs(block.get("paper:cites:paper", [])))
        for u, v in writes:  # in the graph, into a destination of the last layer
            assert v in got["last_dst"]["paper"]
            assert u in g.in_edges(torch.tensor([v]), etype="writes")[0].tolist()
    assert sorted(seen["paper:cites:paper"]) == SEEDS["cites"].tolist()  # each seed once
    assert sorted(seen["author:writes:paper"]) == SEEDS[WRITES].tolist()


def test_reverse_id_per_edge_type_matches_dgl(job):
    for r in job:
        got = job[r]["reverse_id"]
        ids = torch.tensor(got["eids"]["paper:cites:paper"], dtype=torch.long)
        _check_against_dgl(got, _dgl_batch({CITES: ids}, "reverse_id",
                                           reverse_eids={CITES: _cites_reverse()}))


def test_uniform_negatives_have_the_types_and_ranges_of_dgls(job):
    g = typed_graph()
    for r in job:
        got = job[r]["uniform"]
        pos, neg = got["pos"]["author:writes:paper"], got["neg"]["author:writes:paper"]
        assert got["neg_types"] == {":".join(et): 3 * len(pos) if et == WRITES else 0
                                    for et in g.canonical_etypes}
        assert [u for u, _ in neg] == [u for u, _ in pos for _ in range(3)]  # each source k times
        assert all(0 <= v < 40 for _, v in neg)
        assert len({v for _, v in neg}) > 10  # drawn over the papers, not a constant
    assert sorted(sum((job[r]["uniform"]["eids"]["author:writes:paper"] for r in job),
                      [])) == list(range(90))


def test_sampled_batches_never_hold_a_batch_edge_or_its_reverse(job):
    for r in job:
        got = job[r]["leaks"]
        assert got["batches"] == got["steps"] > 1, got
        assert got["leaks"] == 0, got


def test_find_edges_and_edge_split_take_per_type_ids(job):
    g = typed_graph()
    for r in job:
        for et in (CITES, WRITES):
            src, dst = g.find_edges(FIND, etype=et)
            assert job[r]["find"][":".join(et)] == [src.tolist(), dst.tolist()]
    shares = [job[r]["split"] for r in job]
    assert sorted(sum(shares, [])) == list(range(70))
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_bad_arguments_are_one_line_on_every_rank(job):
    expected = [
        r"UnknownNameError: edge type 'venue' is not a relation of the canonical edge types",
        r"IdOutOfRangeError: DataLoader \(edge type \('paper', 'cites', 'paper'\)\): ids "
        r"\[70\] out of range; the graph has edges 0..69",
        r"InvalidTypeError: DataLoader: this graph has edge types .*; pass the edge ids as a "
        r"dict \{edge type: ids\}",
        r"UnknownNameError: as_edge_prediction_sampler: reverse_etypes: edge type 'cited-by' "
        r"is not a relation",
        r"InvalidValueError: as_edge_prediction_sampler: exclude='reverse_types' needs "
        r"reverse_etypes",
        r"InvalidValueError: as_edge_prediction_sampler: reverse_etypes maps \('author', "
        r"'writes', 'paper'\) \(90 edges\) to \('paper', 'cites', 'paper'\) \(70 edges\)",
        r"InvalidValueError: as_edge_prediction_sampler: reverse_eids has no entry for edge "
        r"types \[\('author', 'writes', 'paper'\)\]",
        r"InvalidValueError: as_edge_prediction_sampler: reverse_eids\[\('paper', 'cites', "
        r"'paper'\)\] has shape \(69,\); expected one reverse edge id per edge of the type "
        r"\(70,\)",
        r"NotSupportedError: as_edge_prediction_sampler: exclude='reverse'; expected None",
        r"NotSupportedError: as_edge_prediction_sampler: negative_sampler.GlobalUniform is "
        r"not supported on a graph with edge types yet",
        r"InvalidValueError: this graph has edge types .*; pass etype= naming one",
        r"IdOutOfRangeError: find_edges \(edge type \('paper', 'has_topic', 'field'\)\): ids "
        r"\[50\] out of range; the graph has edges 0..49",
        r"InvalidValueError: as_edge_prediction_sampler: prefetch_labels names 'weight', "
        r"which no edge type has; edge data here: \['w', 'year'\]",
    ]
    for r in job:
        got = job[r]["refused"]
        assert len(got) == len(expected)
        for line, pattern in zip(got, expected):
            assert re.search(pattern, line), (pattern, line)
            assert "\n" not in line


@pytest.mark.parametrize("strategy", ["distdgl", "p3"])
def test_a_short_training_run_learns_the_held_out_links(tmp_path, strategy):
    """2 ranks, a few epochs of benchmarks/bench_hetero_link.py's training: the held-out MRR
    rises well above the untrained model's (the benchmark compares it with single-process DGL
    over 3 seeds and 40 epochs: docs/link_prediction.md). Under p3 the input projections run
    on feature columns."""
    from benchmarks.sweeps import hetero_link

    res = run_workers(hetero_link.dist_worker, 2, tmp_path / "run", str(tmp_path / "cache"),
                      [0], EPOCHS, strategy, env={"DGLX_VIRTUAL_SERVERS": "2"}, timeout=240)
    train, test, negatives = hetero_link.split(hetero_link.make_graph())
    model = hetero_link.HeteroSAGE(train.etypes, 0)
    x = {t: train.nodes[t].data["feat"] for t in train.ntypes}
    with torch.no_grad():
        h = model([train, train], x)
    untrained = hetero_link.mrr(h["author"], h["paper"], test, negatives)
    trained = hetero_link.dist_mrr(res)[0]
    assert trained > untrained + 0.08, (untrained, trained)
