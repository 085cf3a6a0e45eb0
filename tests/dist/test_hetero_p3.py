"""``p3`` on a graph with node and edge types: one R-GCN step through DataLoader + parallelize
gives single-process DGL's logits and gradients (the featureless type's embedding rows
included) while each featured type's input projection runs split by feature columns, at 2
ranks and at 4 ranks as 2 servers; the split projection also runs on a rank with no rows of
its type, under no_grad, and refuses ranks that project different types at once.

The graph, the model and the single-process reference are tests/dist/test_hetero.py's."""
import re
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import dglx_dist
from dglx_dist.testing import run_workers
from tests.dist.test_hetero import HID, _reference, _refused, rgcn_job, rgcn_step, typed_graph

pytestmark = pytest.mark.dist


def _graph(session, cache):
    return dglx_dist.distribute(typed_graph(), "p3", cache_dir=cache, session=session)


def _step(g, session, lib="dgl.nn"):
    """One R-GCN step (full neighbourhoods) on this rank's training papers (the model's
    convs ``lib``'s)."""
    emb, train, loader, model = rgcn_job(g, lib=lib)
    out = {"train": train.tolist(), "keys": {t: sorted(g.nodes[t].data.keys()) for t in g.ntypes},
           "shape": list(g.nodes["paper"].data["feat"].shape)}
    for input_nodes, output_nodes, blocks in loader:
        out.update(rgcn_step(g, emb, model, input_nodes, output_nodes, blocks))
    return out, model


def _one_step(session, cache, lib):
    return _step(_graph(session, cache), session, lib)[0]


def _projections(session, cache):
    """The exact step, then the split projection alone: no rows on rank 0, under no_grad
    and with gradients; a handle used otherwise; ranks projecting different types."""
    g = _graph(session, cache)
    out, model = _step(g, session)
    proj = model.module.proj["field"]
    ids = torch.tensor([] if session.rank == 0 else [7, 1, 3], dtype=torch.int64)
    with torch.no_grad():
        out["eval"] = proj(g.nodes["field"].data["feat"][ids]).tolist()
    proj.zero_grad()
    y = proj(g.nodes["field"].data["feat"][ids])
    (y * torch.arange(1.0, 1.0 + y.numel()).view_as(y)).sum().backward()
    out["proj_grad"] = [proj.weight.grad.tolist(), proj.bias.grad.tolist()]
    out["weights"] = [proj.weight.tolist(), proj.bias.tolist()]
    # rank 0 leaves the field projection out of its loss: the token chain still runs its
    # backward exchange there, in the same order as on rank 1 (else rank 1 would wait)
    typed, paper = g.strategy.projections, model.module.proj["paper"]
    proj.zero_grad()
    typed.begin()
    y_paper = paper(g.nodes["paper"].data["feat"][torch.tensor([session.rank, 9])])
    y_field = proj(g.nodes["field"].data["feat"][torch.tensor([2, 5])])  # the last one
    loss = y_paper.sum() + (y_field.sum() if session.rank == 1 else 0)
    tied = typed.tie(None, None, loss)  # the forward hook's part (None: unchanged)
    (loss if tied is None else tied).backward()
    out["unused_grad"] = proj.weight.grad.tolist()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out["times_one"] = (g.nodes["field"].data["feat"][torch.tensor([7, 1])] * 1.0).tolist()
    out["warned"] = [str(w.message) for w in caught]
    first = ["paper", "field"][session.rank]
    out["mismatch"] = _refused(lambda: model.module.proj[first](
        g.nodes[first].data["feat"][torch.tensor([0])]))
    return out


def _check_step(res, ranks):
    every = sorted(i for r in range(ranks) for i in res[r]["train"])
    assert every == list(range(24))  # node_split by type: each training paper once
    ref = _reference([torch.tensor(res[r]["outputs"]) for r in range(ranks)])
    for r in range(ranks):
        assert res[r]["handles"] == ["ColumnSlice", "ColumnSlice"]  # columns, not rows
        assert res[r]["keys"]["field"] == ["feat"] and res[r]["shape"] == [40, 6]
        assert sorted(res[r]["outputs"]) == sorted(res[r]["train"])
        logits, grads, author_grad = ref[r]
        np.testing.assert_allclose(res[r]["logits"], logits.numpy(), rtol=1e-4, atol=1e-5)
        for name, grad in res[r]["grads"].items():  # DDP's mean: the mean loss's gradient
            mean = torch.stack([ref[q][1][name] for q in range(ranks)]).mean(0)
            np.testing.assert_allclose(grad, mean.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
        rows = torch.argsort(torch.tensor(res[r]["authors"]))[torch.tensor(res[r]["emb_rows"])]
        got = torch.zeros_like(author_grad).index_add_(0, rows, torch.tensor(res[r]["emb_grads"]))
        np.testing.assert_allclose(got.numpy(), author_grad.numpy(), rtol=1e-4, atol=1e-6)


def test_p3_rgcn_step_and_split_projections_at_2_ranks(tmp_path):
    res = run_workers(_projections, 2, tmp_path / "run", str(tmp_path / "cache"),
                      env={"DGLX_VIRTUAL_SERVERS": "2"})
    _check_step(res, 2)
    feat = typed_graph().nodes["field"].data["feat"]
    w, b = (torch.tensor(t) for t in res[0]["weights"])
    assert res[0]["weights"] == res[1]["weights"]
    assert res[0]["eval"] == []  # rank 0 had no rows and still took part
    np.testing.assert_allclose(res[1]["eval"], F.linear(feat[[7, 1, 3]], w, b).numpy(),
                               rtol=1e-5, atol=1e-6)
    # rank r's gradient is its columns' share of every rank's loss: the ranks' sum is the
    # gradient of rank 1's loss (rank 0 had no rows)
    w.requires_grad_(True)
    b.requires_grad_(True)
    y = F.linear(feat[[7, 1, 3]], w, b)
    (y * torch.arange(1.0, 1.0 + y.numel()).view_as(y)).sum().backward()
    for i, ref in enumerate((w.grad, b.grad)):
        got = sum(torch.tensor(res[r]["proj_grad"][i]) for r in range(2))
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
    got = sum(torch.tensor(res[r]["unused_grad"]) for r in range(2))  # rank 1's loss only
    np.testing.assert_allclose(got.numpy(), feat[[2, 5]].sum(0).expand(HID, 4).numpy(),
                               rtol=1e-5, atol=1e-6)
    cols = [[0, 2], [2, 4]]  # field's 4 columns: rank r's weight gradient only in its own
    for r, (lo, hi) in enumerate(cols):
        wg = torch.tensor(res[r]["proj_grad"][0])
        assert not wg[:, :lo].any() and not wg[:, hi:].any()
    for r in range(2):
        np.testing.assert_allclose(res[r]["times_one"], feat[[7, 1]].numpy())
        assert any("needs the whole feature rows" in m for m in res[r]["warned"])
        assert re.fullmatch(r"StateError: p3: the ranks apply input projections of node types "
                            r"\['paper', 'field'\] \(by rank\) at the same point; every rank "
                            r"must project the same node types in the same order.*",
                            res[r]["mismatch"]), res[r]["mismatch"]


@pytest.mark.parametrize("lib", ["dgl.nn", "dglx_dist.nn"])
def test_p3_rgcn_step_at_4_ranks_as_2_servers(tmp_path, lib):
    res = run_workers(_one_step, 4, tmp_path / "run", str(tmp_path / "cache"), lib,
                      env={"DGLX_VIRTUAL_SERVERS": "2"})
    _check_step(res, 4)
