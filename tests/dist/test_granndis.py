"""granndis and fullgraph against single-process full-graph DGL, EAS's preloaded set, traffic."""
import dgl
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dglx_dist.data import builtin_path, read_dataset, to_dgl
from dglx_dist.models import GCN, ResGCN
from dglx_dist.partition import PartitionDir, partition_dataset
from dglx_dist.testing import run_workers
from dglx_dist.trainer import Trainer

pytestmark = pytest.mark.dist
VS = {"DGLX_VIRTUAL_SERVERS": "2"}


def _model(kind, feat_dim, classes):
    torch.manual_seed(0)
    model = (GCN(feat_dim, 8, classes, 2, dropout=0.0) if kind == "gcn" else
             ResGCN(feat_dim, 8, classes, 4, dropout=0.0))
    for name, p in model.named_parameters():  # non-zero biases, so their paths are checked
        if "bias" in name:
            nn.init.normal_(p, std=0.1)
    return model


@pytest.fixture(scope="module")
def cora_parts(tmp_path_factory):
    out = {}
    for groups in (1, 2):
        out[groups] = tmp_path_factory.mktemp("parts") / f"cora-metis-4-{groups}"
        partition_dataset(builtin_path("cora"), out[groups], "metis", 4, {"groups": groups})
    return out


def _exact_step(session, pdir_path, strategy, kind):
    pdir = PartitionDir(pdir_path)
    layers = 2 if kind == "gcn" else 4
    trainer = Trainer(_model(kind, pdir.feat_dim, pdir.num_classes), pdir, strategy,
                      session=session, progress=False, num_layers=layers,
                      external_max_hop=-1, external_fanout=-1,
                      optimizer=lambda p: torch.optim.SGD(p, lr=0.0))
    batch = next(iter(trainer.batches(0)))
    logits = trainer.forward(batch)
    trainer.step(F.cross_entropy(logits, batch.y))
    targets = trainer.strategy.plans[0]
    with torch.no_grad():
        out = trainer.model(batch.blocks, batch.x)
    grads = {n.replace(".conv.", "."): p.grad.numpy().tolist()
             for n, p in trainer.model.named_parameters()}
    return {"targets": pdir.to_original(targets.nodes[:targets.num_targets].numpy()).tolist(),
            "out": out.numpy().tolist(), "grads": grads,
            "bytes": trainer.session.counter.snapshot()}


@pytest.mark.parametrize("strategy", ["granndis", "fullgraph"])
@pytest.mark.parametrize("kind", ["gcn", "resgcn"])
def test_full_graph_step_matches_single_process_dgl(tmp_path, cora_parts, strategy, kind):
    """Exact shared preloading (m = L, k = -1), R = 1, 2 virtual servers x 2 ranks: every
    target's output and every parameter gradient equal full-graph DGL's."""
    res = run_workers(_exact_step, 4, tmp_path, str(cora_parts[2]), strategy, kind, env=VS)
    ds = read_dataset(builtin_path("cora"))
    g = to_dgl(ds)
    model = _model(kind, ds.feat_dim, ds.num_classes)
    layers = 2 if kind == "gcn" else 4
    out = model([g] * layers, g.ndata["feat"])
    train = torch.from_numpy(ds.train)
    F.cross_entropy(out[train], g.ndata["label"][train]).backward()
    seen = np.zeros(ds.num_nodes, dtype=int)
    for r in range(4):
        targets = np.array(res[r]["targets"])
        seen[targets] += 1
        np.testing.assert_allclose(res[r]["out"], out[targets].detach().numpy(), rtol=1e-4,
                                   atol=1e-5, err_msg=f"outputs on rank {r}")
    assert (seen == 1).all(), "every node is the target of exactly one rank"
    for name, p in model.named_parameters():
        for r in range(4):
            np.testing.assert_allclose(res[r]["grads"][name], p.grad.numpy(), rtol=1e-4,
                                       atol=1e-6, err_msg=f"{kind}: {name} on rank {r}")
