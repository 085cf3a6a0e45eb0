"""Graphs with node and edge types through the drop-in API: distribute a DGL heterograph,
read node data by type, split ids by type, and one R-GCN step through DataLoader +
parallelize gives single-process DGL's logits and gradients (the featureless type's
embedding rows included), at 2 ranks and at 4 ranks as 2 servers."""
import importlib
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import dglx_dist
from dglx_dist.kvstore.embedding import same_ids
from dglx_dist.testing import run_workers

pytestmark = pytest.mark.dist
HID, CLASSES = 5, 3
DIMS = {"paper": 6, "field": 4}  # the featured types' widths


def typed_graph():
    """Papers (6-d features, labels), authors (no features), fields (4-d features); writes,
    cites and has_topic with the reverse relations."""
    import dgl

    rng = np.random.default_rng(7)
    n = {"paper": 40, "author": 30, "field": 8}
    writes = (rng.integers(0, 30, 90), rng.integers(0, 40, 90))
    cites = (rng.integers(0, 40, 70), rng.integers(0, 40, 70))
    topic = (rng.integers(0, 40, 50), rng.integers(0, 8, 50))
    g = dgl.heterograph({
        ("author", "writes", "paper"): writes, ("paper", "rev-writes", "author"): writes[::-1],
        ("paper", "cites", "paper"): cites, ("paper", "has_topic", "field"): topic,
        ("field", "rev-has_topic", "paper"): topic[::-1]}, num_nodes_dict=n)
    g.nodes["paper"].data["feat"] = torch.from_numpy(rng.normal(size=(40, 6)).astype("float32"))
    g.nodes["field"].data["feat"] = torch.from_numpy(rng.normal(size=(8, 4)).astype("float32"))
    g.nodes["paper"].data["label"] = torch.from_numpy(rng.integers(0, CLASSES, 40))
    g.nodes["paper"].data["train_mask"] = torch.arange(40) < 24
    g.edges["cites"].data["w"] = torch.from_numpy(rng.random(70).astype("float32"))
    g.edges["has_topic"].data["w"] = torch.from_numpy(rng.random(50).astype("float32"))
    g.edges["writes"].data["year"] = torch.from_numpy(rng.integers(1990, 2020, (90, 2)))
    return g


class RGCN(torch.nn.Module):
    """Two HeteroGraphConv layers of GraphConv per relation over typed inputs: a projection
    of each featured type, the given rows of the others; the convs of ``lib`` (``"dgl.nn"``
    or ``"dglx_dist.nn"``: the same parameters from the same seed)."""

    def __init__(self, rels, dims, norm="right", lib="dgl.nn"):
        dglnn = importlib.import_module(lib)

        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.ModuleDict({t: torch.nn.Linear(d, HID) for t, d in dims.items()})
        self.convs = torch.nn.ModuleList([
            dglnn.HeteroGraphConv({r: dglnn.GraphConv(HID, out, norm=norm,
                                                      allow_zero_in_degree=True)
                                   for r in rels}, aggregate="sum")
            for out in (HID, CLASSES)])

    def forward(self, blocks, x):
        h = {t: self.proj[t](v) if t in self.proj else v for t, v in x.items()}
        h = {t: F.relu(v) for t, v in self.convs[0](blocks[0], h).items()}
        return self.convs[1](blocks[1], h)  # by node type, as DGL's R-GCN examples return


def _emb_init(shape, dtype):
    return torch.full(shape, 0.5, dtype=dtype)


def _grad(p):
    """A parameter's gradient; zeros for one no edge of the step reached (a relation into
    a type the last layer does not output)."""
    return (torch.zeros_like(p) if p.grad is None else p.grad).tolist()


def rgcn_job(g, emb_name="author_emb", norm="right", lib="dgl.nn"):
    """One R-GCN step's pieces on ``g`` (collective, in this order): the authors' embedding,
    this rank's training papers, a full-neighbourhood loader over them, the wrapped model
    (its convs ``lib``'s)."""
    import dglx_dist.dgl as dgl

    emb = dgl.distributed.DistEmbedding(g.num_nodes("author"), HID, emb_name, _emb_init,
                                        g.get_node_partition_policy("author"))
    train = dglx_dist.node_split(g.nodes["paper"].data["train_mask"], g.get_partition_book(),
                                 ntype="paper")
    loader = dglx_dist.DataLoader(g, {"paper": train},
                                  dgl.dataloading.MultiLayerFullNeighborSampler(2),
                                  batch_size=100)
    return emb, train, loader, dglx_dist.parallelize(RGCN(g.etypes, DIMS, norm, lib), g)


def _one_step(session, cache, lib):
    g = dglx_dist.distribute(typed_graph(), "distdgl", cache_dir=cache, session=session)
    emb, train, loader, model = rgcn_job(g, lib=lib)
    out = {"ntypes": g.ntypes, "etypes": g.canonical_etypes, "papers": g.num_nodes("paper"),
           "train": train.tolist()}
    for input_nodes, output_nodes, blocks in loader:
        out.update(rgcn_step(g, emb, model, input_nodes, output_nodes, blocks),
                   emb_ids=input_nodes["author"].tolist(), edges=_typed_edges(blocks))
    return out


def _typed_edges(blocks) -> list[dict]:
    """Per block, per edge type: its edges' (source, destination, edge id), per-type ids."""
    import dgl

    out = []
    for b in blocks:
        per = {}
        for (st, rel, dt) in b.canonical_etypes:
            u, v = b.edges(etype=(st, rel, dt))
            per[rel] = [b.srcnodes[st].data[dgl.NID][u].tolist(),
                        b.dstnodes[dt].data[dgl.NID][v].tolist(),
                        b.edges[(st, rel, dt)].data[dgl.EID].tolist()]
        out.append(per)
    return out


def rgcn_step(g, emb, model, input_nodes, output_nodes, blocks, name=lambda k: k) -> dict:
    """One forward and backward of :func:`rgcn_job`'s model on a batch: what the feature reads
    gave (their classes' names), the outputs, logits, parameter gradients (keyed by ``name``
    of the parameter's name), the embedding's gradient rows and where the authors' rows live."""
    x = {t: g.nodes[t].data["feat"][ids] for t, ids in input_nodes.items() if t != "author"}
    handles = sorted(type(v).__name__ for v in x.values())
    x["author"] = emb(input_nodes["author"])
    out = model(blocks, x)  # the seeds' type alone, as on DGL's distributed blocks
    assert list(out) == ["paper"], {t: tuple(v.shape) for t, v in out.items()}
    logits = out["paper"]
    F.cross_entropy(logits, g.nodes["paper"].data["label"][output_nodes["paper"]]).backward()
    ids, grads = emb.inner.gradients()
    return {"handles": handles, "outputs": output_nodes["paper"].tolist(),
            "logits": logits.tolist(),
            "grads": {name(k): _grad(v) for k, v in model.module.named_parameters()},
            "emb_rows": ids.tolist(), "emb_grads": grads.tolist(),
            "authors": g.get_node_partition_policy("author").to_rows.tolist()}


def _reference(outputs, norm="right"):
    """Single-process DGL on the whole graph: each rank's logits and loss; the gradient of
    every rank's loss (DDP averages the model's; the embedding's rows get each rank's);
    ``norm``: the relation GraphConvs'."""
    import dgl

    g = typed_graph()
    model = RGCN(g.etypes, DIMS, norm)
    authors = torch.full((g.num_nodes("author"), HID), 0.5, requires_grad=True)
    x = {"paper": g.nodes["paper"].data["feat"], "field": g.nodes["field"].data["feat"],
         "author": authors}
    out = []
    for ids in outputs:
        model.zero_grad()
        authors.grad = None
        logits = model([g, g], x)["paper"][ids]
        F.cross_entropy(logits, g.nodes["paper"].data["label"][ids]).backward()
        out.append((logits.detach(), {k: torch.tensor(_grad(v)) for k, v in model.named_parameters()},
                    authors.grad.clone()))
    del dgl
    return out


@pytest.mark.parametrize("ranks, servers, lib", [(2, 2, "dgl.nn"), (4, 2, "dgl.nn"),
                                                (2, 2, "dglx_dist.nn")])
def test_one_rgcn_step_matches_single_process_dgl(tmp_path, ranks, servers, lib):
    """(``lib``: the model's convs, dgl.nn's or dglx_dist.nn's; the reference's are
    dgl.nn's.)"""
    res = run_workers(_one_step, ranks, tmp_path / "run", str(tmp_path / "cache"), lib,
                      env={"DGLX_VIRTUAL_SERVERS": str(servers)})
    g = typed_graph()
    assert res[0]["ntypes"] == ["author", "field", "paper"]
    assert [tuple(e) for e in res[0]["etypes"]] == g.canonical_etypes
    every = sorted(i for r in range(ranks) for i in res[r]["train"])
    assert every == list(range(24))  # node_split by type: each training paper once
    ref = _reference([torch.tensor(res[r]["outputs"]) for r in range(ranks)])
    for r in range(ranks):
        assert sorted(res[r]["outputs"]) == sorted(res[r]["train"])
        for block in res[r]["edges"]:  # each edge type's blocks carry its edge ids
            for rel, (src, dst, eid) in block.items():
                u, v = g.find_edges(torch.tensor(eid, dtype=torch.int64), etype=rel)
                assert (u.tolist(), v.tolist()) == (src, dst), rel
        assert sum(len(e[2]) for e in res[r]["edges"][0].values()) > 0
        logits, grads, author_grad = ref[r]
        np.testing.assert_allclose(res[r]["logits"], logits.numpy(), rtol=1e-4, atol=1e-5)
        for name, grad in res[r]["grads"].items():  # DDP: the mean over ranks
            mean = torch.stack([ref[q][1][name] for q in range(ranks)]).mean(0)
            np.testing.assert_allclose(grad, mean.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
        to_rows = torch.tensor(res[r]["authors"])
        rows = torch.tensor(res[r]["emb_rows"])
        got = torch.zeros_like(author_grad).index_add_(
            0, torch.argsort(to_rows)[rows], torch.tensor(res[r]["emb_grads"]))
        np.testing.assert_allclose(got.numpy(), author_grad.numpy(), rtol=1e-4, atol=1e-6)


def _refused(fn) -> str:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the test reads the message
        return f"{type(exc).__name__}: {exc}"
    return "not refused"


def _surface(session, cache):
    import dglx_dist.dgl as dgl

    g = dglx_dist.distribute(typed_graph(), "distdgl", cache_dir=cache, session=session)
    ids = torch.tensor([39, 0, 17, 17])
    out = {"feat": g.nodes["paper"].data["feat"][ids].tolist(),
           "field": g.nodes["field"].data["feat"][torch.tensor([7, 1])].tolist(),
           "label": g.nodes["paper"].data["label"][ids].tolist(),
           "mask": g.nodes["paper"].data["train_mask"][ids].tolist(),
           "counts": [g.num_nodes(t) for t in g.ntypes] + [g.num_nodes()],
           "edges": [g.num_edges("cites"), g.num_edges(("paper", "has_topic", "field")),
                     g.num_edges()],
           "keys": {t: sorted(g.nodes[t].data.keys()) for t in g.ntypes}}
    year = dgl.distributed.DistTensor((g.num_nodes("author"), 2), torch.float32, "year",
                                      part_policy=g.get_node_partition_policy("author"))
    mine = torch.tensor([session.rank, 29 - session.rank])
    year[mine] = torch.stack([mine.float(), -mine.float()], 1)
    g.barrier()
    out["year"] = g.nodes["author"].data["year"][torch.arange(4)].tolist()
    pb = g.get_partition_book()
    mine = pb.partid2nids(pb.partid, "paper")
    homo = pb.map_to_homo_nid(mine, "paper")
    out["book"] = {"partid": pb.partid, "papers": mine.tolist(),
                   "owners": pb.nid2partid(mine, "paper").tolist(),
                   "back": [t.tolist() for t in pb.map_to_per_ntype(homo)]}
    eids = torch.tensor([69, 3, 3])
    out["edata"] = {"cites": g.edges["cites"].data["w"][eids].tolist(),
                    "topic": g.edges[("paper", "has_topic", "field")].data["w"][:4].tolist(),
                    "keys": {r: sorted(g.edges[r].data.keys()) for r in g.etypes},
                    "shape": list(g.edges["writes"].data["year"].shape)}
    g.edges["writes"].data["year"][torch.tensor([session.rank])] = torch.tensor([[1, -1]])
    g.barrier()
    out["edata"]["year"] = g.edges["writes"].data["year"][torch.arange(3)].tolist()
    sampler = dgl.dataloading.NeighborSampler([{"cites": 2}, 3])
    out["refused"] = [
        _refused(lambda: g.nodes["author"].data["feat"]),
        _refused(lambda: g.ndata["feat"]),
        _refused(lambda: dglx_dist.DataLoader(g, {"venue": torch.arange(3)},
                                              dgl.dataloading.NeighborSampler([2, 2]))),
        _refused(lambda: dglx_dist.DataLoader(g, {"paper": torch.arange(3)}, sampler)),
        _refused(lambda: dglx_dist.DataLoader(g, torch.arange(3),
                                              dgl.dataloading.NeighborSampler([2, 2]))),
        _refused(lambda: year[torch.tensor([30])]),
        _refused(lambda: year[g.nodes["paper"].data["train_mask"]]),
        _refused(lambda: dglx_dist.node_split(torch.ones(40, dtype=torch.bool), g)),
        _refused(lambda: dgl.distributed.DistTensor((50, 1), torch.float32, "x")),
        _refused(lambda: g.local_nodes()),
        _refused(lambda: g.edata["w"]),
        _refused(lambda: g.edges["rev-writes"].data["w"]),
        _refused(lambda: g.edges["venue"]),
        _refused(lambda: g.edges["cites"].data["w"][torch.tensor([70])]),
        _refused(lambda: dglx_dist.DataLoader(g, {"paper": torch.arange(3)},
                                              dgl.dataloading.NeighborSampler(
                                                  [2, 2], prefetch_node_feats=["fet"]))),
    ]
    return out


def _weighted_graph():
    """:func:`typed_graph` with a third of the cites edges weighing 0 (never drawn)."""
    g = typed_graph()
    w = g.edges["cites"].data["w"]
    w[::3] = 0.0
    g.edges["cites"].data["w"] = w
    return g


def _typed_draws(session, cache):
    """Under distdgl and p3, each step's blocks (per relation: sources, destinations, edge
    ids) of a ``prob="w"`` and a ``replace=True`` loader over the papers; and under distdgl
    the same loaders' steps drawn by a sampler process (DGL's ``num_workers``)."""
    out, processes = [], []
    for name in ("distdgl", "p3"):
        g = dglx_dist.distribute(_weighted_graph(), name, cache_dir=cache, session=session)
        for kind, kw in (("prob", {"prob": "w", "prefetch_edge_feats": ["w"]}),
                         ("replace", {"replace": True})):
            for workers in (0, 1) if name == "distdgl" else (0,):
                loader = dglx_dist.DataLoader(
                    g, {"paper": torch.arange(session.rank, 40, 2)},
                    dglx_dist.NeighborSampler([2], **kw), batch_size=10, num_workers=workers)
                steps = [(kind, _typed_edges(blocks)[0], blocks[0].edges["cites"].data[
                    "w"].tolist() if kind == "prob" else None) for _, _, blocks in loader]
                (processes if workers else out).append(steps)
        g.close()
    return {"steps": [step for steps in out for step in steps], "in turn": out[:2],
            "processes": processes}


def test_typed_prob_and_replace_draw_as_dgl_defines_them(tmp_path):
    """``prob`` weighs the edge types that have it (cites: its zero-weight edges are never
    drawn) and leaves the others uniform, as DGL's heterograph sampling does; ``replace``
    draws exactly the fanout of every edge type with in-edges; ``prefetch_edge_feats``
    fills the blocks' edges of the types that have the name."""
    res = run_workers(_typed_draws, 2, tmp_path / "run", str(tmp_path / "cache"),
                      env={"DGLX_VIRTUAL_SERVERS": "2"})
    g = _weighted_graph()
    drawn = 0
    for out in res.values():  # a sampler process draws what the rank draws (typed, weighed)
        assert out["processes"] == out["in turn"] and out["processes"][0]
        for kind, block, cites_w in out["steps"]:
            if cites_w is not None:  # prefetch_edge_feats: the edge type that has it
                assert cites_w == g.edges["cites"].data["w"][block["cites"][2]].tolist()
            for rel, (src, dst, eid) in block.items():
                u, v = g.find_edges(torch.tensor(eid, dtype=torch.int64), etype=rel)
                assert (u.tolist(), v.tolist()) == (src, dst)
                dst_all = g.edges(etype=rel)[1]
                weights = g.edges[rel].data.get("w") if kind == "prob" else None
                candidates = torch.bincount(
                    dst_all if weights is None else dst_all[weights > 0], minlength=40)
                for d in set(dst):
                    got = [e for e, x in zip(eid, dst) if x == d]
                    want = 2 if kind == "replace" else min(2, int(candidates[d]))
                    assert len(got) == want, (kind, rel, d)
                if weights is not None:
                    assert bool((weights[eid] > 0).all()), rel
                    drawn += len(eid)
    assert drawn > 0


def test_typed_data_reads_by_type_and_bad_input_is_one_line(tmp_path):
    res = run_workers(_surface, 2, tmp_path / "run", str(tmp_path / "cache"),
                      env={"DGLX_VIRTUAL_SERVERS": "2"})
    g = typed_graph()
    ids = [39, 0, 17, 17]
    papers = sorted(p for r in range(2) for p in res[r]["book"]["papers"])
    assert papers == list(range(40))  # every paper held by exactly one part
    for r in range(2):
        out = res[r]
        np.testing.assert_array_equal(out["feat"], g.nodes["paper"].data["feat"][ids].numpy())
        np.testing.assert_array_equal(out["field"], g.nodes["field"].data["feat"][[7, 1]].numpy())
        assert out["label"] == g.nodes["paper"].data["label"][ids].tolist()
        assert out["mask"] == [False, True, True, True]
        assert out["counts"] == [30, 8, 40, 78]
        assert out["edges"] == [70, 50, 90 * 2 + 70 + 50 * 2]
        assert out["keys"] == {"author": [], "field": ["feat"],
                               "paper": ["feat", "label", "test_mask", "train_mask", "val_mask"]}
        assert out["year"] == [[0, 0], [1, -1], [0, 0], [0, 0]]  # rank 1 wrote author 1
        edata = out["edata"]
        np.testing.assert_array_equal(edata["cites"], g.edges["cites"].data["w"][[69, 3, 3]])
        np.testing.assert_array_equal(edata["topic"], g.edges["has_topic"].data["w"][:4])
        assert edata["keys"] == {r: sorted(g.edges[r].data.keys()) for r in g.etypes}
        assert edata["shape"] == [90, 2]
        assert edata["year"] == [[1, -1], [1, -1], g.edges["writes"].data["year"][2].tolist()]
        book = out["book"]
        assert book["partid"] == r and set(book["owners"]) <= {r}
        assert book["back"] == [[2] * len(book["papers"]), book["papers"]]  # paper: type 2
        expected = [
            r"UnknownNameError: g.nodes\['author'\].data\['feat'\]: node type 'author' has no "
            r"such data",
            r"UnknownNameError: g.ndata\['feat'\]: this graph has node types \['author', "
            r"'field', 'paper'\]; use g.nodes\[ntype\].data\['feat'\]",
            r"node type 'venue' is not one of this graph's node types",
            r"NeighborSampler fanouts\[0\]: no fanout for edge types \[\('author', 'writes'",
            r"InvalidTypeError: DataLoader: this graph has node types .*; pass the ids as a "
            r"dict \{node type: ids\}",
            r"ids \[30\] out of range; the graph has nodes 0..29",
            r"a mask of node type 'paper' used on type 'author'",
            r"node_split: this graph has node types .*; pass ntype= naming the type",
            r"DistTensor \(50, 1\): 50 rows; tensors here have one row per node of a type",
            r"has no full-graph form yet; iterate a dglx_dist.DataLoader",
            r"g.edata\['w'\]: this graph has edge types .*; use g.edges\[etype\].data\['w'\]",
            r"g.edges\[\('paper', 'rev-writes', 'author'\)\].data\['w'\]: edge type .* has "
            r"no such edge data; it has \[\]",
            r"edge type 'venue' is not a relation of the canonical edge types",
            r"g.edges\[\('paper', 'cites', 'paper'\)\].data\['w'\]\[...\]: ids \[70\] out of "
            r"range; the graph has edges 0..69",
            r"UnknownNameError: the sampler's prefetch names 'fet', which no node type of the "
            r"graph has",
        ]
        assert len(out["refused"]) == len(expected)
        for got, pattern in zip(out["refused"], expected):
            assert re.search(pattern, got), (pattern, got)


def _train_embeddings(session, cache, take):
    """Two epochs of SparseAdam on two embeddings (authors, papers) through the loader, the
    fields' features and the papers' labels read in the loop: with copies of the loader's
    input and output nodes (``take``: the rows the loader pulled for the step are taken, as
    reads are matched by the ids' values) or with the ids as lists (each read pulls alone);
    the rows at the end."""
    import dgl

    import dglx_dist.dgl as ddgl

    dgl.seed(0)
    torch.manual_seed(0)
    g = dglx_dist.distribute(typed_graph(), "distdgl", cache_dir=cache, session=session)
    embs = {t: ddgl.distributed.DistEmbedding(g.num_nodes(t), HID, f"{t}_emb", _emb_init,
                                              g.get_node_partition_policy(t))
            for t in ("author", "paper")}
    opt = ddgl.distributed.optim.SparseAdam(list(embs.values()), lr=0.1)
    train = dglx_dist.node_split(g.nodes["paper"].data["train_mask"], g.get_partition_book(),
                                 ntype="paper")
    loader = dglx_dist.DataLoader(g, {"paper": train}, dgl.dataloading.NeighborSampler([3, 3]),
                                  batch_size=4, shuffle=True, seed=1)
    model = dglx_dist.parallelize(RGCN(g.etypes, {"field": 4}), g)
    taken = []
    for _ in range(2):
        for input_nodes, output_nodes, blocks in loader:
            given = torch.clone if take else torch.Tensor.tolist
            x = {"field": g.nodes["field"].data["feat"][given(input_nodes["field"])]}
            for t, emb in embs.items():
                ids = given(input_nodes[t])
                taken.append(emb.inner._offer is not None and same_ids(emb.inner._offer[0], ids))
                x[t] = emb(ids)
            labels = g.nodes["paper"].data["label"][given(output_nodes["paper"])]
            F.cross_entropy(model(blocks, x)["paper"], labels).backward()
            opt.step()
    with torch.no_grad():
        rows = {t: emb(torch.arange(g.num_nodes(t))).tolist() for t, emb in embs.items()}
    return {"rows": rows, "taken": taken, "wanted": sorted(n for n, _ in g.step_rows.wanted)}


def test_embedding_rows_pulled_by_the_loader_train_as_pulled_alone(tmp_path):
    """The rows a loader step pulls at once (every embedding's, the node data the loop read
    with the loader's ids before) are the rows each read would pull alone at that point
    (after the last step's SparseAdam writes), in the right places: two epochs end with the
    same rows either way."""
    runs = {take: run_workers(_train_embeddings, 2, tmp_path / f"run{take}",
                              str(tmp_path / "cache"), take,
                              env={"DGLX_VIRTUAL_SERVERS": "2"}) for take in (True, False)}
    for r in range(2):
        assert all(runs[True][r]["taken"]) and not any(runs[False][r]["taken"])
        assert len(runs[True][r]["wanted"]) == 2 and runs[False][r]["wanted"] == []
        for t in ("author", "paper"):
            got, alone = (np.array(runs[k][r]["rows"][t]) for k in (True, False))
            np.testing.assert_array_equal(got, alone, err_msg=t)
            assert (got != 0.5).any(), t  # trained
