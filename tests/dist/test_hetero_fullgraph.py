"""``granndis`` and ``fullgraph`` on a graph with node and edge types: one R-GCN step through
DataLoader + parallelize, under the strategies' exact options, gives single-process DGL's
logits and the gradients of the mean loss over every rank's outputs (the parameters' on every
rank; the featureless type's embedding rows summed over the ranks that hold them), at 2 ranks
and at 4 ranks as 2 servers; a validation loader after it, of several batches where training
made one (DGL's R-GCN example's shape), gives DGL's logits too. One launch per shape runs both strategies, and the refusals."""
import numpy as np
import pytest
import torch

import dglx_dist
from dglx_dist.strategies.granndis import GraNNDisStrategy
from dglx_dist.testing import run_workers
from tests.dist.test_hetero import (HID, _reference, _refused, rgcn_job, rgcn_step,
                                    typed_graph)

pytestmark = pytest.mark.dist
# (strategy, the relation convs' norm, their library: the reference's are dgl.nn's)
RUNS = tuple((name, norm, "dgl.nn") for name in ("fullgraph", "granndis")
             for norm in ("right", "both")) + (("granndis", "both", "dglx_dist.nn"),
                                               ("fullgraph", "right", "dglx_dist.nn"))


def _step(session, cache, name, norm, lib):
    import dgl.nn as dglnn

    import dglx_dist.dgl as dgl

    g = dglx_dist.distribute(typed_graph(), name, cache_dir=cache, session=session,
                             **GraNNDisStrategy.exact_options(2))
    emb, train, loader, model = rgcn_job(g, f"author_{name}_{norm}_{lib}", norm, lib)
    out = {"train": train.tolist()}
    for input_nodes, output_nodes, blocks in loader:
        b = blocks[0]
        out["block"] = {"srctypes": b.srctypes, "dst_prefix": all(
            torch.equal(b.srcnodes[t].data[dgl.NID][:b.num_dst_nodes(t)],
                        b.dstnodes[t].data[dgl.NID]) for t in b.srctypes),
            "inputs_prefix": all(torch.equal(b.srcnodes[t].data[dgl.NID][:len(ids)], ids)
                                 for t, ids in input_nodes.items())}
        views = {t: g.nodes[t].data["feat"] for t in ("paper", "field")}
        out["preloaded"] = all(g.strategy.local_rows(v.name, v.space.rows(input_nodes[t]))
                               is not None for t, v in views.items())
        out.update(rgcn_step(g, emb, model, input_nodes, output_nodes, blocks,
                             name=lambda k: k.replace(".conv.", ".")))
    out["val"] = _validate(g, emb, model)
    bad = torch.nn.ModuleList([dglnn.GraphConv(HID, HID), dglnn.GraphConv(HID, HID)])
    out["refused"] = [
        _refused(lambda: dglx_dist.parallelize(bad, g)),
        _refused(lambda: dglx_dist.DataLoader(g, {"paper": train, "author": torch.arange(2)},
                                              dgl.dataloading.MultiLayerFullNeighborSampler(2),
                                              batch_size=100)),
    ]
    g.close()
    return out


def _validate(g, emb, model) -> dict:
    """A validation loader after the training one (which made one batch per rank): the
    papers outside training in batches of 2, several per rank; its outputs and logits."""
    import dglx_dist.dgl as dgl

    val = dglx_dist.node_split(torch.arange(40) >= 24, g.get_partition_book(), ntype="paper")
    loader = dglx_dist.DataLoader(g, {"paper": val},
                                  dgl.dataloading.MultiLayerFullNeighborSampler(2), batch_size=2)
    out = {"ids": val.tolist(), "asked": len(loader), "outputs": [], "logits": []}
    with torch.no_grad():
        for input_nodes, output_nodes, blocks in loader:
            x = {t: g.nodes[t].data["feat"][ids] for t, ids in input_nodes.items()
                 if t != "author"}
            x["author"] = emb(input_nodes["author"])
            out["logits"] += model(blocks, x)["paper"].tolist()
            out["outputs"].append(output_nodes["paper"].tolist())
    return out


def _both(session, cache):
    """Each strategy with right-normalised relation convs, and with convs that normalise by
    their sources' out-degrees too (``norm="both"``)."""
    return {f"{name}/{norm}/{lib}": _step(session, cache, name, norm, lib)
            for name, norm, lib in RUNS}


def _check(res, ranks, name, norm, lib):
    outs = [res[r][f"{name}/{norm}/{lib}"] for r in range(ranks)]
    assert sorted(i for o in outs for i in o["train"]) == list(range(24))
    ref = _reference([torch.tensor(o["outputs"]) for o in outs], norm)
    total = sum(len(o["outputs"]) for o in outs)
    for r, out in enumerate(outs):
        assert sorted(out["outputs"]) == sorted(out["train"])
        assert out["block"]["dst_prefix"] and out["block"]["inputs_prefix"], out["block"]
        assert out["preloaded"]  # the featured types' rows: read once, served from there
        np.testing.assert_allclose(out["logits"], ref[r][0].numpy(), rtol=1e-4, atol=1e-5)
        for key, grad in out["grads"].items():  # the mean of the ranks' mean losses
            mean = torch.stack([ref[q][1][key] for q in range(ranks)]).mean(0)
            np.testing.assert_allclose(grad, mean.numpy(), rtol=1e-4, atol=1e-6,
                                       err_msg=f"{name} rank {r} {key}")
    # every rank's embedding rows: the gradient of the same mean loss, summed over holders
    got = torch.zeros_like(ref[0][2])
    for out in outs:
        to_rows = torch.tensor(out["authors"])
        got.index_add_(0, torch.argsort(to_rows)[torch.tensor(out["emb_rows"], dtype=torch.long)],
                       torch.tensor(out["emb_grads"]).reshape(-1, HID))
    mean = torch.stack([ref[q][2] for q in range(ranks)]).mean(0)
    np.testing.assert_allclose(got.numpy(), mean.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
    assert total == 24
    _check_validation([o["val"] for o in outs], norm)
    expected = ["every graph conv must be a HeteroGraphConv",
                "a DataLoader over node types ['author', 'paper']"]
    for got_msg, pattern in zip(outs[0]["refused"], expected):
        assert pattern in got_msg and "\n" not in got_msg, (pattern, got_msg)


def _check_validation(vals, norm):
    """Each rank's validation loader took the steps it asked for (more than the training
    loader's one at 2 ranks), covered its papers once, and gave single-process DGL's logits
    (the model unchanged since: no optimizer step)."""
    assert sorted(i for v in vals for i in v["ids"]) == list(range(24, 40))
    assert len(vals) == 4 or min(v["asked"] for v in vals) >= 3, [v["asked"] for v in vals]
    for v in vals:
        assert len(v["outputs"]) == v["asked"] == -(-max(len(w["ids"]) for w in vals) // 2)
        outputs = [i for step in v["outputs"] for i in step]
        assert sorted(outputs) == sorted(v["ids"])
        ref = _reference([torch.tensor(outputs)], norm)[0][0]
        np.testing.assert_allclose(v["logits"], ref.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("ranks, servers", [(2, 2), (4, 2)])
def test_one_rgcn_step_matches_single_process_dgl(tmp_path, ranks, servers):
    res = run_workers(_both, ranks, tmp_path / "run", str(tmp_path / "cache"),
                      env={"DGLX_VIRTUAL_SERVERS": str(servers)})
    for name, norm, lib in RUNS:
        _check(res, ranks, name, norm, lib)
