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
