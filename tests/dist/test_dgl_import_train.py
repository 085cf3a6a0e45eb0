"""distdgl on partitions made by DGL's own partition_graph and imported (not repartitioned):
one training step on 2 ranks matches single-process full-graph DGL."""
from pathlib import Path

import dgl
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dglx_dist.data import builtin_path, read_dataset, to_dgl
from dglx_dist.partition import import_dgl_partitions
from dglx_dist.testing import run_workers
from test_distdgl import LR, _model, _one_step  # the same step as on our own partitions

pytestmark = pytest.mark.dist
BATCH = 16


def test_one_step_on_imported_dgl_partitions_matches_dgl(tmp_path):
    ds = read_dataset(builtin_path("cora"))
    g = to_dgl(ds)
    nids, eids = dgl.distributed.partition_graph(
        g, "cora", 2, str(tmp_path / "dgl"), part_method="metis", return_mapping=True,
        balance_ntypes=g.ndata["train_mask"], balance_edges=True)
    parts = import_dgl_partitions(tmp_path / "dgl" / "cora.json", tmp_path / "parts",
                                  orig_nids=nids, orig_eids=eids)
    res = run_workers(_one_step, 2, tmp_path / "run", str(parts), BATCH,
                      env={"DGLX_VIRTUAL_SERVERS": "2"})
    model = _model(ds.feat_dim, ds.num_classes)
    sampler = dgl.dataloading.MultiLayerFullNeighborSampler(2)
    total = 0.0
    for r in range(2):
        seeds = torch.tensor(res[r]["seeds"])
        assert 0 < seeds.numel() <= BATCH and bool(ds.train[seeds.numpy()].all())
        _, _, blocks = sampler.sample_blocks(g, seeds)
        logits = model(blocks, g.ndata["feat"][blocks[0].srcdata[dgl.NID]])
        loss = F.cross_entropy(logits, g.ndata["label"][seeds])
        assert abs(loss.item() - res[r]["loss"]) < 1e-5, r
        total = total + loss / 2  # DDP averages the ranks' gradients
    total.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= LR * p.grad
    for name, value in model.state_dict().items():
        for r in range(2):
            np.testing.assert_allclose(res[r]["params"][name], value.numpy().ravel(),
                                       rtol=1e-5, atol=1e-6, err_msg=f"{name} on rank {r}")


def _typed_read_and_step(session, parts, batch_size):
    import dglx_dist

    g = dglx_dist.DistGraph(parts, "distdgl", session=session)
    ids = torch.tensor([39, 0, 17, 17, 5])
    out = {"ntypes": g.ntypes, "etypes": [list(e) for e in g.canonical_etypes],
           "feat": g.nodes["paper"].data["feat"][ids].tolist(),
           "field": g.nodes["field"].data["feat"][torch.tensor([7, 1])].tolist(),
           "year": g.nodes["field"].data["year"][torch.tensor([7, 1])].tolist(),
           "names": {t: sorted(g.nodes[t].data) for t in g.ntypes},
           "label": g.nodes["paper"].data["label"][ids].tolist()}
    train = dglx_dist.node_split(g.nodes["paper"].data["train_mask"], g.get_partition_book(),
                                 ntype="paper")
    loader = dglx_dist.DataLoader(g, {"paper": train},
                                  dgl.dataloading.MultiLayerFullNeighborSampler(2),
                                  batch_size=batch_size)
    input_nodes, output_nodes, blocks = next(iter(loader))
    out.update(train=train.tolist(), seeds=output_nodes["paper"].tolist(),
               inputs={t: sorted(v.tolist()) for t, v in input_nodes.items()},
               edges=[{":".join(e): b.num_edges(e) for e in b.canonical_etypes if b.num_edges(e)}
                      for b in blocks])
    sub = g.edge_subgraph({g.canonical_etypes[0]: torch.tensor([0, 3, 2])}, relabel_nodes=False)
    local = g.local_partition()
    inner = local.ndata["inner_node"].bool()
    pb, first = g.get_partition_book(), g.canonical_etypes[0]
    eids, nids = pb.partid2eids(pb.partid, first)[::3], pb.partid2nids(pb.partid, "paper")[::3]
    out.update(sub={":".join(e): sorted(zip(*(t.tolist() for t in sub.edges(etype=e))))
                    for e in sub.canonical_etypes if sub.num_edges(e)},
               local=(local.ndata[dgl.NID][inner].tolist(),
                      local.ndata[dgl.NTYPE][inner].tolist()),
               localeid=(eids.tolist(), pb.eid2localeid(eids, pb.partid, first).tolist()),
               localnid=(nids.tolist(), pb.nid2localnid(nids, pb.partid, "paper").tolist()))
    return out


def test_typed_dgl_partitions_open_as_a_typed_dist_graph(tmp_path):
    """DGL's partitions of a heterograph, imported: DistGraph reads the features by original
    per-type id, and one full-neighbour step samples what DGL samples on the whole graph."""
    from test_hetero import typed_graph

    g = typed_graph()
    g.nodes["field"].data["year"] = torch.arange(g.num_nodes("field")) + 1900  # the user's
    nids, eids = dgl.distributed.partition_graph(g, "het", 2, str(tmp_path / "dgl"),
                                                 part_method="metis", return_mapping=True)
    parts = import_dgl_partitions(tmp_path / "dgl" / "het.json", tmp_path / "parts",
                                  orig_nids=nids, orig_eids=eids)
    res = run_workers(_typed_read_and_step, 2, tmp_path / "run", str(parts), 5,
                      env={"DGLX_VIRTUAL_SERVERS": "2"})
    ids, sampler = [39, 0, 17, 17, 5], dgl.dataloading.MultiLayerFullNeighborSampler(2)
    assert sorted(i for r in range(2) for i in res[r]["train"]) == list(range(24))
    for r in range(2):
        out = res[r]
        assert out["ntypes"] == g.ntypes and [tuple(e) for e in out["etypes"]] == \
            g.canonical_etypes
        np.testing.assert_array_equal(out["feat"], g.nodes["paper"].data["feat"][ids].numpy())
        np.testing.assert_array_equal(out["field"], g.nodes["field"].data["feat"][[7, 1]].numpy())
        assert out["label"] == g.nodes["paper"].data["label"][ids].tolist()
        assert out["year"] == g.nodes["field"].data["year"][[7, 1]].tolist()
        assert out["names"]["field"] == sorted(g.nodes["field"].data) == ["feat", "year"]
        seeds = torch.tensor(out["seeds"])
        assert 0 < seeds.numel() <= 5 and set(out["seeds"]) <= set(out["train"])
        _, _, blocks = sampler.sample_blocks(g, {"paper": seeds})
        want = {t: sorted(blocks[0].srcnodes[t].data[dgl.NID].tolist()) for t in g.ntypes}
        assert {t: out["inputs"].get(t, []) for t in g.ntypes} == want, r
        # (the edge types with edges: DGL's distributed blocks leave the others out)
        assert out["edges"] == [{":".join(e): b.num_edges(e) for e in b.canonical_etypes
                                 if b.num_edges(e)} for b in blocks], r
        first = g.canonical_etypes[0]
        u, v = g.find_edges(torch.tensor([0, 3, 2]), etype=first)
        assert out["sub"] == {":".join(first): sorted(map(list, zip(u.tolist(), v.tolist())))}
        part = dgl.distributed.load_partition(str(tmp_path / "dgl" / "het.json"), r)[0]
        inner = part.ndata["inner_node"].bool()
        assert out["local"] == [part.ndata[dgl.NID][inner].tolist(),
                                part.ndata[dgl.NTYPE][inner].tolist()]
        book = dgl.distributed.load_partition_book(str(tmp_path / "dgl" / "het.json"), r)[0]
        ours, local = out["localeid"]
        dgls = torch.argsort(eids[first])[torch.tensor(ours)]  # DGL's ids of the graph's
        assert local == book.eid2localeid(dgls, r, first).tolist()
        ours, local = out["localnid"]
        dgls = torch.argsort(nids["paper"])[torch.tensor(ours)]
        assert local == book.nid2localnid(dgls, r, "paper").tolist()


def _dgl_surface(session, json_path, cache):
    """What DGL's distributed example scripts read of a graph, through dgl.distributed."""
    from dglx_dist.dgl import distributed as dist

    g = dist.DistGraph("cora", part_config=json_path, cache_dir=cache)
    pb, keys = g.get_partition_book(), sorted(g.ndata)
    ids = torch.tensor([2707, 0, 5, 5, 1500])
    h = dist.DistTensor((g.num_nodes(), 2), torch.float32, "h", persistent=True)
    if session.rank == 0:
        h[ids] = torch.ones(5, 2)
    g.barrier()
    again = dist.DistTensor((g.num_nodes(), 2), torch.float32, "h", persistent=True)
    try:
        dist.DistTensor((g.num_nodes(), 3), torch.float32, "h")
        other = "no error"
    except Exception as exc:  # noqa: BLE001 (the message is the result)
        other = str(exc)
    schemes = {n: (tuple(v.shape), str(v.dtype)) for n, v in g.node_attr_schemes().items()}
    out = {**_more_surface(session, g, dist), "schemes": schemes}
    moved = g.ndata["features"].to("cpu")  # a script's line: a view again, nothing read
    double = moved.to(torch.float64)
    return {**out, "json": str(json_path), "moved": (type(moved).__name__, str(moved.device), tuple(moved.shape)),
            "double": (type(double).__name__, str(double.dtype), str(double[ids].dtype),
                       double[ids].tolist()),
"keys": keys, "schemes": schemes, "features": g.ndata["features"][ids].tolist(),
            "labels": g.ndata["labels"][ids].tolist(), "dtype": str(g.ndata["features"].dtype),
            "stored_name": g.ndata["feat"][ids].tolist(),  # the role's name reaches it too
            "partid": pb.partid, "nids": pb.partid2nids(pb.partid).tolist(),
            "eids": pb.partid2eids(pb.partid).tolist(),
            "nid2partid": pb.nid2partid(ids).tolist(), "eid2partid":
            pb.eid2partid(torch.tensor([0, 10555, 77])).tolist(), "metadata": pb.metadata(),
            "attached": again[ids].tolist(), "other_shape": other,
            "trainer_id": g.ndata["trainer_id"][ids].tolist(), "year": g.ndata["year"][ids].tolist(),
            "by_trainer": dist.node_split(g.ndata["train_mask"], pb, force_even=True,
                                          node_trainer_ids=g.ndata["trainer_id"]).tolist()}


def _more_surface(session, g, dist) -> dict:
    """DistDataLoader over ids of different counts per rank, its collate_fn sampling (a
    collective call); edge_subgraph, local_partition, the book's local ids, a DistTensor over
    edges."""
    pb = g.get_partition_book()
    seeds = torch.arange(10 + 3 * session.rank) * 7  # 10, 13, 16, 19 ids: 3 to 5 batches

    def collate(items):  # as DistDGL's first examples sample
        frontier = dist.sample_neighbors(g, torch.tensor(items, dtype=torch.int64), -1)
        return items, frontier.num_edges()

    loader = dist.DistDataLoader(seeds, batch_size=4, shuffle=True, collate_fn=collate)
    batches = list(loader)
    policy = g.get_edge_partition_policy("_E")
    et = dist.DistTensor((g.num_edges(), 2), torch.float32, "ew", part_policy=policy)
    if session.rank == 0:
        et[torch.tensor([0, 77, 10555])] = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    g.barrier()
    sub = g.edge_subgraph(torch.tensor([5, 77, 3000, 10000]))
    local = g.local_partition()
    nids, eids = pb.partid2nids(pb.partid)[::97], pb.partid2eids(pb.partid)[::331]
    try:
        pb.shared_memory("cora")
        shm = "no error"
    except Exception as exc:  # noqa: BLE001 (the message is the result)
        shm = str(exc)
    return {"loader": (len(loader), [b[0] for b in batches], [b[1] for b in batches]),
            "edge_tensor": (g.edata["ew"][torch.tensor([77, 0, 5])].tolist(),
                            policy.policy_str, policy.get_size()),
            "sub": (sub.edges()[0].tolist(), sub.edges()[1].tolist(),
                    sub.ndata[dgl.NID].tolist(), sub.edata[dgl.EID].tolist()),
            "local": (local.ndata[dgl.NID][local.ndata["inner_node"].bool()].tolist(),
                      sorted(local.edata[dgl.EID].tolist())),
            "localnid": (nids.tolist(), pb.nid2localnid(nids, pb.partid).tolist()),
            "localeid": (eids.tolist(), pb.eid2localeid(eids, pb.partid).tolist()),
            "shm": shm}


def _check_more_surface(g, out, nmap, emap, r):
    """``out`` (a rank's :func:`_more_surface`) against DGL's answers on the same partitions
    (``nmap`` / ``emap``: the original id of each of DGL's node and edge ids)."""
    js = Path(out["json"])
    steps, items, counts = out["loader"]
    assert steps == 5 and len(items) == 5  # the most batches of any rank (19 ids / 4)
    assert sorted(i for b in items for i in b) == list(range(0, 7 * (10 + 3 * r), 7))
    for batch, count in zip(items, counts):  # every in-edge: DGL's in-degrees
        assert count == int(g.in_degrees(nmap[torch.tensor(batch, dtype=torch.int64)]).sum())
    rows, policy, size = out["edge_tensor"]
    assert rows == [[3.0, 4.0], [1.0, 2.0], [0.0, 0.0]]
    assert (policy, size) == ("edge~_N:_E:_N", g.num_edges())
    src, dst, nid, eid = (torch.tensor(x) for x in out["sub"])
    assert eid.tolist() == [5, 77, 3000, 10000]
    u, v = g.find_edges(emap[eid])  # the same edges of the original graph
    assert torch.equal(nmap[nid[src]], u) and torch.equal(nmap[nid[dst]], v)
    book = dgl.distributed.load_partition_book(str(js), r // 2)[0]
    part = dgl.distributed.load_partition(str(js), r // 2)[0]
    assert out["local"][0] == part.ndata[dgl.NID][part.ndata["inner_node"].bool()].tolist()
    inner = part.edata["inner_edge"].bool()  # DGL's part graph holds HALO nodes' edges too
    assert out["local"][1] == sorted(part.edata[dgl.EID][inner].tolist())
    for key, fn in (("localnid", book.nid2localnid), ("localeid", book.eid2localeid)):
        ids, local = out[key]
        assert local == fn(torch.tensor(ids), r // 2).tolist(), key
    assert out["shm"].startswith("GraphPartitionBook.shared_memory: dglx_dist runs no servers")


def _dgls_trainer_split(js: Path) -> list[list[int]]:
    """Each of 4 trainers' (2 per machine) node_split of the training nodes with
    node_trainer_ids, by DGL's own functions (its node_split needs its servers running)."""
    from dgl.distributed.dist_graph import _split_by_trainer_id, _split_even_to_part

    feats = [dgl.distributed.load_partition(str(js), p)[1] for p in range(2)]
    train, tid = (torch.cat([f[f"_N/{k}"] for f in feats]) for k in ("train_mask", "trainer_id"))
    out = []
    for r in range(4):
        book = dgl.distributed.load_partition_book(str(js), r // 2)[0]
        out.append(_split_by_trainer_id(book, _split_even_to_part(book, train), tid, 2,
                                        r % 2).tolist())
    return out


def test_dgl_example_partitions_keep_their_names_and_dgls_book(tmp_path):
    """Partitions made as DGL's distributed examples make them (ndata "features" and
    "labels", 2 trainers per machine), opened through dgl.distributed by 2 servers x 2 ranks:
    the names are the graph's and every other node data is there, the partition book answers
    as DGL's book of the same partitions, node_split with the trainer ids gives each rank
    what DGL gives its trainer, a DistTensor of an existing name attaches."""
    ds = read_dataset(builtin_path("cora"))
    g = to_dgl(ds)
    g.ndata["features"], g.ndata["labels"] = g.ndata.pop("feat"), g.ndata.pop("label")
    g.ndata["year"] = torch.arange(g.num_nodes()) % 7 + 2000  # the user's own node data
    nmap, emap = dgl.distributed.partition_graph(
        g, "cora", 2, str(tmp_path / "dgl"), part_method="metis", return_mapping=True,
        balance_ntypes=g.ndata["train_mask"], balance_edges=True, num_trainers_per_machine=2)
    js = tmp_path / "dgl" / "cora.json"
    res = run_workers(_dgl_surface, 4, tmp_path / "run", str(js), str(tmp_path / "cache"),
                      env={"DGLX_VIRTUAL_SERVERS": "2"})
    gpb = dgl.distributed.load_partition_book(str(js), 0)[0]
    ids = [2707, 0, 5, 5, 1500]  # DGL's ids: the partitions' own, as the script knows them
    local = dgl.distributed.load_partition(str(js), 0)[1]  # DGL's node_feats of part 0
    by_trainer = _dgls_trainer_split(js)
    for r in range(4):
        out = res[r]
        assert out["keys"] == ["features", "labels", "test_mask", "train_mask", "trainer_id",
                               "val_mask", "year"]
        assert out["by_trainer"] == by_trainer[r], r
        _check_more_surface(g, out, nmap, emap, r)
        assert out["dtype"] == "torch.float32" and out["partid"] == r // 2
        assert out["schemes"]["features"] == [[1433], "torch.float32"]
        assert out["schemes"]["labels"] == [[], "torch.int64"]
        assert out["features"] == out["stored_name"]
        assert out["moved"] == ["NodeDataView", "cpu", [2708, 1433]]
        assert out["double"][:3] == ["NodeDataView", "torch.float64", "torch.float64"]
        assert out["double"][3] == out["features"]
        assert out["nids"] == gpb.partid2nids(r // 2).tolist()
        assert out["eids"] == gpb.partid2eids(r // 2).tolist()
        assert out["nid2partid"] == gpb.nid2partid(torch.tensor(ids)).tolist()
        assert out["eid2partid"] == gpb.eid2partid(torch.tensor([0, 10555, 77])).tolist()
        assert out["metadata"] == [{k: m[k] for k in ("machine_id", "num_nodes", "num_edges")}
                                   for m in gpb.metadata()]
        assert out["attached"] == [[1.0, 1.0]] * 5
        assert "exists with shape (2708, 2)" in out["other_shape"]
    lo, hi = (int(x) for x in gpb.partid2nids(0)[[0, -1]])  # part 0's DGL ids, in order
    in_part0 = [i for i in ids if lo <= i <= hi]
    np.testing.assert_array_equal(
        [res[0]["features"][ids.index(i)] for i in in_part0],
        local["_N/features"][torch.tensor(in_part0) - lo].numpy())
    for name in ("labels", "trainer_id", "year"):
        assert [res[0][name][ids.index(i)] for i in in_part0] == \
            local[f"_N/{name}"][torch.tensor(in_part0) - lo].tolist(), name
