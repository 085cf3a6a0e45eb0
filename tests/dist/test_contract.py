"""The contract every registered strategy keeps (a new plug-in is covered automatically): with
its exact options, the logits a rank computes for its batch's seeds are single-process
full-graph DGL's for those nodes, and the batch's labels are theirs."""
import dgl.nn as dglnn
import numpy as np
import pytest
import torch
from torch import nn

from dglx_dist.data import builtin_path, read_dataset, to_dgl
from dglx_dist.models import GCN, SAGE
from dglx_dist.partition import PartitionDir, partition_dataset
from dglx_dist.runtime.topology import Topology
from dglx_dist.strategies import STRATEGIES
from dglx_dist.strategies.abilities import exact_options
from dglx_dist.testing import run_workers
from dglx_dist.trainer import Trainer

pytestmark = pytest.mark.dist


class GIN(nn.Module):
    """Two GINConv layers with linear apply functions: the tests' conv plug-in
    (tests/plugins/dglx_test_plugins/conv.py) splits the first one."""

    def __init__(self, feat_dim, hidden, classes):
        super().__init__()
        self.layers = nn.ModuleList(dglnn.GINConv(nn.Linear(a, b), "mean", init_eps=0.5)
                                    for a, b in ((feat_dim, hidden), (hidden, classes)))

    def forward(self, blocks, x):
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            x = layer(block, x)
            x = torch.relu(x) if i == 0 else x
        return x


def _model(feat_dim, classes, name, gin=False):
    """GraphSAGE, or GCN for a strategy that cannot run SAGEConv; GIN when asked."""
    torch.manual_seed(0)
    if gin:
        return GIN(feat_dim, 8, classes)
    convs = getattr(STRATEGIES.get(name), "conv_types", None)
    if convs is None or "SAGEConv" in convs:
        return SAGE(feat_dim, 8, classes, 2, dropout=0.0)
    return GCN(feat_dim, 8, classes, 2, dropout=0.0)


def _first_batch(session, pdir_path, name, gin=False):
    pdir = PartitionDir(pdir_path)
    options = exact_options(STRATEGIES.get(name), 2)
    trainer = Trainer(_model(pdir.feat_dim, pdir.num_classes, name, gin), pdir, name,
                      session=session, progress=False, **options)
    try:
        batch = next(iter(trainer.batches(0)))
        with torch.no_grad():
            logits = trainer.forward(batch)
        return {"seeds": batch.seeds.tolist(),
                "y": batch.y.tolist(), "logits": logits.numpy().tolist()}
    finally:
        trainer.close()


def _first_batches(session, runs):
    """:func:`_first_batch` for each (partition directory, strategy, gin) of ``runs`` in
    turn, on the same ranks; a run that raised gives its traceback instead (its test fails
    with it, the others still run)."""
    import traceback

    out = []
    for pdir_path, name, gin in runs:
        try:
            out.append(_first_batch(session, pdir_path, name, gin))
        except Exception:  # noqa: BLE001  (reported by the run's own test)
            out.append({"error": traceback.format_exc()})
    return out


RUNS = [(name, False) for name in STRATEGIES.names()] + [("p3", True)]


@pytest.fixture(scope="module")
def first_batches(tmp_path_factory):
    """{(strategy, gin): {rank: its first batch}}: every run of RUNS on its strategy's own
    partitions, all on the same 4 ranks (one launch)."""
    runs = []
    for name, gin in RUNS:
        spec = STRATEGIES.build(name).partition_spec(Topology(2, 2))
        parts = tmp_path_factory.mktemp("parts")
        partition_dataset(builtin_path("cora"), parts, spec.method, spec.num_parts,
                          spec.options)
        runs.append((str(parts), name, gin))
    res = run_workers(_first_batches, 4, tmp_path_factory.mktemp("run"), runs,
                      env={"DGLX_VIRTUAL_SERVERS": "2"}, timeout=300)
    return {run: {r: res[r][i] for r in res} for i, run in enumerate(RUNS)}


@pytest.mark.parametrize("name", STRATEGIES.names())
def test_strategy_matches_full_graph_dgl(first_batches, name):
    _check_first_batches(first_batches, name)


def test_a_conv_plugin_splits_under_p3(first_batches):
    """p3 cuts its first layer by feature columns through the layer adapter; GINConv's comes
    from an entry point outside the package."""
    _check_first_batches(first_batches, "p3", gin=True)


def _check_first_batches(first_batches, name, gin=False):
    res = first_batches[name, gin]
    for r in range(4):
        assert "error" not in res[r], f"{name} on rank {r}:\n{res[r].get('error')}"
    ds = read_dataset(builtin_path("cora"))
    g = to_dgl(ds)
    with torch.no_grad():
        want = _model(ds.feat_dim, ds.num_classes, name, gin)([g, g], g.ndata["feat"]).numpy()
    seen = 0
    for r in range(4):
        seeds = np.array(res[r]["seeds"], dtype=np.int64)
        seen += seeds.size
        assert np.array_equal(res[r]["y"], ds.label[seeds]), (name, r)
        np.testing.assert_allclose(np.array(res[r]["logits"]).reshape(-1, ds.num_classes),
                                   want[seeds], rtol=1e-4, atol=1e-5, err_msg=f"{name} {r}")
    assert seen > 0
