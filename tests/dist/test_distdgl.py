"""The distdgl strategy against single-process DGL doing the same math."""
import dgl
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import dglx_dist

from dglx_dist.data import builtin_path, read_dataset, to_dgl
from dglx_dist.models import SAGE
from dglx_dist.partition import PartitionDir
from dglx_dist.testing import run_workers
from dglx_dist.trainer import Trainer

pytestmark = pytest.mark.dist
LR = 0.5


def _model(ds_feat_dim, classes):
    torch.manual_seed(0)
    return SAGE(ds_feat_dim, 8, classes, num_layers=2, dropout=0.0)


def _one_step(session, pdir_path, batch_size):
    pdir = PartitionDir(pdir_path)
    model = _model(pdir.feat_dim, pdir.num_classes)
    trainer = Trainer(model, pdir, "distdgl", session=session, progress=False,
                      optimizer=lambda p: torch.optim.SGD(p, lr=LR), fanouts=(-1, -1),
                      batch_size=batch_size)
    batch = next(iter(trainer.batches(0)))
    loss = F.cross_entropy(trainer.forward(batch), batch.y)
    trainer.step(loss)
    params = {k: v.detach().numpy().ravel().tolist()
              for k, v in trainer.model.module.state_dict().items()}
    return {"seeds": batch.seeds.tolist(), "loss": loss.item(),
            "params": params}


@pytest.mark.parametrize("world", [2, 4])
def test_one_step_matches_single_process_dgl(tmp_path, cora_parts, world):
    res = run_workers(_one_step, world, tmp_path, str(cora_parts), 16,
                      env={"DGLX_VIRTUAL_SERVERS": "2"})
    ds = read_dataset(builtin_path("cora"))
    g = to_dgl(ds)
    model = _model(ds.feat_dim, ds.num_classes)
    sampler = dgl.dataloading.MultiLayerFullNeighborSampler(2)
    total = 0.0
    for r in range(world):
        seeds = torch.tensor(res[r]["seeds"])
        assert 0 < seeds.numel() <= 16 and bool(ds.train[seeds.numpy()].all())
        _, _, blocks = sampler.sample_blocks(g, seeds)
        logits = model(blocks, g.ndata["feat"][blocks[0].srcdata[dgl.NID]])
        loss = F.cross_entropy(logits, g.ndata["label"][seeds])
        assert abs(loss.item() - res[r]["loss"]) < 1e-5
        total = total + loss / world  # DDP averages the gradients of the ranks
    torch.optim.SGD(model.parameters(), lr=LR).zero_grad()
    total.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= LR * p.grad
    for name, value in model.state_dict().items():
        for r in range(world):
            np.testing.assert_allclose(res[r]["params"][name], value.numpy().ravel(),
                                       rtol=1e-5, atol=1e-6, err_msg=f"{name} on rank {r}")


def _pull_bytes(session, pdir_path):
    pdir = PartitionDir(pdir_path)
    g = dglx_dist.DistGraph(pdir, "distdgl", session=session)
    loader = dglx_dist.DataLoader(g, g.ndata["train_mask"], dglx_dist.NeighborSampler([5, 5]),
                                  batch_size=20)
    _, _, blocks = next(iter(loader))
    ids = blocks[0].srcdata[dgl.NID]
    before = session.counter.snapshot()
    g.store.pull("feat", ids)
    after = session.counter.snapshot()
    owner = np.asarray(pdir.owner(ids.numpy()))
    remote = int(np.unique(ids.numpy()[owner != session.server_id]).size)
    return {"remote": remote, "row": pdir.feat_dim * 4,
            "delta": {k: after[k] - before[k] for k in after}}


def test_feature_pull_bytes_on_two_virtual_servers(tmp_path, cora_parts):
    res = run_workers(_pull_bytes, 4, tmp_path, str(cora_parts),
                      env={"DGLX_VIRTUAL_SERVERS": "2"})
    for r, out in res.items():
        d, row = out["delta"], out["row"]
        peer = res[(r + 2) % 4]  # the same local rank on the other server answers and asks
        assert out["remote"] > 0
        # each remote row crosses the network once: a request is the name's index and the
        # ids (int64), the answer the rows; own-server rows come from shared memory, free
        assert d["recv_inter"] == out["remote"] * row + (peer["remote"] + 1) * 8, (r, out)
        assert d["sent_inter"] == (out["remote"] + 1) * 8 + peer["remote"] * row, (r, out)
        assert d["recv_intra"] == 0 and d["sent_intra"] == 0
