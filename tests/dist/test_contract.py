"""The contract every registered strategy keeps (a new plug-in is covered automatically): with
its exact options, the logits a rank computes for its batch's seeds are single-process
full-graph DGL's for those nodes, and the batch's labels are theirs."""
import numpy as np
import pytest
import torch

from dglx_dist.data import builtin_path, read_dataset, to_dgl
from dglx_dist.models import GCN, SAGE
from dglx_dist.partition import PartitionDir, partition_dataset
from dglx_dist.runtime.topology import Topology
from dglx_dist.strategies import STRATEGIES
from dglx_dist.testing import run_workers
from dglx_dist.trainer import Trainer

pytestmark = pytest.mark.dist


def _model(feat_dim, classes, name):
    """GraphSAGE, or GCN for a strategy that cannot run SAGEConv."""
    torch.manual_seed(0)
    convs = STRATEGIES.get(name).conv_types
    if convs is None or "SAGEConv" in convs:
        return SAGE(feat_dim, 8, classes, 2, dropout=0.0)
    return GCN(feat_dim, 8, classes, 2, dropout=0.0)


def _first_batch(session, pdir_path, name):
    pdir = PartitionDir(pdir_path)
    options = STRATEGIES.get(name).exact_options(2)
    trainer = Trainer(_model(pdir.feat_dim, pdir.num_classes, name), pdir, name, session=session,
                      progress=False, **options)
    batch = next(iter(trainer.batches(0)))
    with torch.no_grad():
        logits = trainer.forward(batch)
    return {"seeds": batch.seeds.tolist(),
            "y": batch.y.tolist(), "logits": logits.numpy().tolist()}


@pytest.mark.parametrize("name", STRATEGIES.names())
def test_strategy_matches_full_graph_dgl(tmp_path, name):
    spec = STRATEGIES.build(name).partition_spec(Topology(2, 2))
    parts = tmp_path / "parts"
    partition_dataset(builtin_path("cora"), parts, spec.method, spec.num_parts, spec.options)
    res = run_workers(_first_batch, 4, tmp_path / "run", str(parts), name,
                      env={"DGLX_VIRTUAL_SERVERS": "2"})
    ds = read_dataset(builtin_path("cora"))
    g = to_dgl(ds)
    with torch.no_grad():
        want = _model(ds.feat_dim, ds.num_classes, name)([g, g], g.ndata["feat"]).numpy()
    seen = 0
    for r in range(4):
        seeds = np.array(res[r]["seeds"], dtype=np.int64)
        seen += seeds.size
        assert np.array_equal(res[r]["y"], ds.label[seeds]), (name, r)
        np.testing.assert_allclose(np.array(res[r]["logits"]).reshape(-1, ds.num_classes),
                                   want[seeds], rtol=1e-4, atol=1e-5, err_msg=f"{name} {r}")
    assert seen > 0
