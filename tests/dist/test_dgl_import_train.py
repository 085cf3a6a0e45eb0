"""distdgl on partitions made by DGL's own partition_graph and imported (not repartitioned):
one training step on 2 ranks matches single-process full-graph DGL."""
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
           "label": g.nodes["paper"].data["label"][ids].tolist()}
    train = dglx_dist.node_split(g.nodes["paper"].data["train_mask"], g.get_partition_book(),
                                 ntype="paper")
    loader = dglx_dist.DataLoader(g, {"paper": train},
                                  dgl.dataloading.MultiLayerFullNeighborSampler(2),
                                  batch_size=batch_size)
    input_nodes, output_nodes, blocks = next(iter(loader))
    out.update(train=train.tolist(), seeds=output_nodes["paper"].tolist(),
               inputs={t: sorted(v.tolist()) for t, v in input_nodes.items()},
               edges=[{":".join(e): b.num_edges(e) for e in b.canonical_etypes} for b in blocks])
    return out


def test_typed_dgl_partitions_open_as_a_typed_dist_graph(tmp_path):
    """DGL's partitions of a heterograph, imported: DistGraph reads the features by original
    per-type id, and one full-neighbour step samples what DGL samples on the whole graph."""
    from test_hetero import typed_graph

    g = typed_graph()
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
        seeds = torch.tensor(out["seeds"])
        assert 0 < seeds.numel() <= 5 and set(out["seeds"]) <= set(out["train"])
        _, _, blocks = sampler.sample_blocks(g, {"paper": seeds})
        want = {t: sorted(blocks[0].srcnodes[t].data[dgl.NID].tolist()) for t in g.ntypes}
        assert {t: out["inputs"].get(t, []) for t in g.ntypes} == want, r
        assert out["edges"] == [{":".join(e): b.num_edges(e) for e in b.canonical_etypes}
                                for b in blocks], r
