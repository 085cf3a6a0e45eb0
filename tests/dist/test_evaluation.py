"""The Trainer's evaluation scores a GCN as it computes on the whole graph: under the sampled
strategies (distdgl, p3) its full-neighbour blocks carry their sources' out-degrees in the
whole graph, so GraphConv's logits and the accuracy equal single-process DGL's on the whole
graph, where blocks that count a source's edges within the block (DGL's, the default of a
DataLoader) give other logits."""
import dgl
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dglx_dist.errors import NotSupportedError
from dglx_dist.data import builtin_path, read_dataset, to_dgl
from dglx_dist.models import GCN
from dglx_dist.partition import PartitionDir, partition_dataset
from dglx_dist.testing import run_workers
from dglx_dist.trainer import Trainer
import dglx_dist

pytestmark = pytest.mark.dist
BATCH = 64  # evaluation batch per rank: blocks far smaller than the graph


def _trained(feat_dim: int, classes: int) -> dict:
    """A GCN trained for a few full-graph steps on Cora in one process (its weights)."""
    ds = read_dataset(builtin_path("cora"))
    g = to_dgl(ds)
    model = _model(feat_dim, classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    train = g.ndata["train_mask"].bool()
    for _ in range(20):
        loss = F.cross_entropy(model([g, g], g.ndata["feat"])[train], g.ndata["label"][train])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.state_dict()


def _model(feat_dim: int, classes: int, state: dict | None = None) -> GCN:
    torch.manual_seed(0)
    model = GCN(feat_dim, 16, classes, 2, dropout=0.0)
    if state is not None:
        model.load_state_dict(state)
    return model


def _scores(session, paths: dict, state: dict) -> dict:
    """Per strategy: the Trainer's validation accuracy, and the logits of this rank's
    validation nodes from loaders with and without ``whole_degrees``."""
    out = {}
    for strategy, path in paths.items():
        pdir = PartitionDir(path)
        trainer = Trainer(_model(pdir.feat_dim, pdir.num_classes, state), pdir, strategy,
                          session=session, progress=False, fanouts=(5, 5), batch_size=32,
                          eval_batch_size=BATCH)
        out[strategy] = {"acc": trainer.evaluate("val")}
        g, model = trainer.graph, trainer.model
        model.eval()
        for whole in (True, False):
            loader = dglx_dist.DataLoader(g, g.ndata["val_mask"],
                                          dgl.dataloading.MultiLayerFullNeighborSampler(2),
                                          batch_size=BATCH, whole_degrees=whole)
            ids, logits = [], []
            with torch.no_grad():
                for input_nodes, seeds, blocks in loader:
                    logits.append(model(blocks, g.ndata["feat"][input_nodes]))
                    ids.append(seeds)
            out[strategy][str(whole)] = [torch.cat(ids).tolist(), torch.cat(logits).tolist()]
        try:  # a subgraph sampler's graph is not blocks of full layers
            dglx_dist.DataLoader(g, g.ndata["val_mask"], dgl.dataloading.ShaDowKHopSampler([5]),
                                 batch_size=BATCH, whole_degrees=True)
        except NotSupportedError as exc:
            out[strategy]["refused"] = str(exc)
        trainer.close()
    return out


@pytest.fixture(scope="module")
def scores(tmp_path_factory, cora_parts):
    p3 = tmp_path_factory.mktemp("parts") / "cora-p3-2"
    partition_dataset(builtin_path("cora"), p3, "feature_dim", 2, {"structure": "hash"})
    ds = read_dataset(builtin_path("cora"))
    state = _trained(ds.feat_dim, ds.num_classes)
    res = run_workers(_scores, 2, tmp_path_factory.mktemp("run"),
                      {"distdgl": str(cora_parts), "p3": str(p3)}, state,
                      env={"DGLX_VIRTUAL_SERVERS": "2"})
    g = to_dgl(ds)
    model = _model(ds.feat_dim, ds.num_classes, state).eval()
    with torch.no_grad():
        whole = model([g, g], g.ndata["feat"])
    return res, whole, g


@pytest.mark.parametrize("strategy", ["distdgl", "p3"])
def test_evaluation_gives_the_whole_graph_logits_and_accuracy(scores, strategy):
    res, whole, g = scores
    val = torch.nonzero(g.ndata["val_mask"]).flatten()
    expected = float((whole[val].argmax(1) == g.ndata["label"][val]).float().mean())
    seen = []
    for rank in (0, 1):
        assert abs(res[rank][strategy]["acc"] - expected) < 1e-6, (rank, expected)
        ids, logits = res[rank][strategy]["True"]
        np.testing.assert_allclose(logits, whole[ids].numpy(), rtol=1e-4, atol=1e-5)
        blockwise = np.asarray(res[rank][strategy]["False"][1])
        assert np.abs(blockwise - whole[ids].numpy()).max() > 1e-2  # DGL's blocks differ
        seen += ids
    assert sorted(seen) == val.tolist()  # the ranks together scored every validation node


def test_whole_degrees_with_a_subgraph_sampler_is_refused(scores):
    res, _, _ = scores
    for rank in (0, 1):
        assert res[rank]["distdgl"]["refused"] == (
            "DataLoader(whole_degrees=True): blocks of DGL's neighbour samplers on a graph "
            "without types only; got ShaDowKHopSampler")
