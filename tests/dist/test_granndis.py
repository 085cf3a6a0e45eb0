"""granndis and fullgraph against single-process full-graph DGL, EAS's preloaded set, traffic."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dglx_dist.data import builtin_path, read_dataset, to_dgl
from dglx_dist.models import GCN, ResGCN
from dglx_dist.partition import PartitionDir, partition_dataset
from dglx_dist.registry import RegistryError
from dglx_dist.strategies import STRATEGIES
from dglx_dist.strategies.base import SetupRequest
from dglx_dist.testing import WorkerError, run_workers, seeded_model
from dglx_dist.trainer import Trainer

pytestmark = pytest.mark.dist
VS = {"DGLX_VIRTUAL_SERVERS": "2"}


def _model(kind, feat_dim, classes):
    return seeded_model(lambda: GCN(feat_dim, 8, classes, 2, dropout=0.0) if kind == "gcn"
                        else ResGCN(feat_dim, 8, classes, 4, dropout=0.0))


@pytest.fixture(scope="module")
def cora_parts(tmp_path_factory):
    """METIS parts with the default balance constraints, the same in every run (the METIS
    library, seeded; with DGL's call they moved from process to process, and R=4's accuracy
    below with them: 0.77 to 0.795 seen). Two groups per part: 2 virtual servers x 2
    ranks."""
    out = tmp_path_factory.mktemp("parts") / "cora-metis-4-2"
    partition_dataset(builtin_path("cora"), out, "metis", 4, {"groups": 2})
    return out


EXACT = [(strategy, kind) for strategy in ("granndis", "fullgraph") for kind in ("gcn", "resgcn")]
PRELOADS = [(2, -1), (1, 1), (2, 3)]


def _steps_and_preloads(session, pdir_path):
    """Every exact step and every preloaded set the tests below check, on the same 4 ranks
    (one process start for all): {"exact": [per EXACT], "preloaded": [per PRELOADS]}."""
    return {"exact": [_exact_step(session, pdir_path, strategy, kind)
                      for strategy, kind in EXACT],
            "preloaded": [_preloaded(session, pdir_path, hops, fanout)
                          for hops, fanout in PRELOADS]}


@pytest.fixture(scope="module")
def steps_and_preloads(tmp_path_factory, cora_parts):
    """{rank: _steps_and_preloads's result}."""
    return run_workers(_steps_and_preloads, 4, tmp_path_factory.mktemp("run"), str(cora_parts),
                       env=VS, timeout=300)


def _exact_step(session, pdir_path, strategy, kind):
    pdir = PartitionDir(pdir_path)
    layers = 2 if kind == "gcn" else 4
    trainer = Trainer(_model(kind, pdir.feat_dim, pdir.num_classes), pdir, strategy,
                      session=session, progress=False, num_layers=layers,
                      external_max_hop=-1, external_fanout=-1,
                      optimizer=lambda p: torch.optim.SGD(p, lr=0.0))
    try:
        batch = next(iter(trainer.batches(0)))
        logits = trainer.forward(batch)
        trainer.step(F.cross_entropy(logits, batch.y))
        grads = {n.replace(".conv.", "."): p.grad.numpy().tolist()
                 for n, p in trainer.model.module.named_parameters()}
        return {"seeds": batch.seeds.tolist(), "out": logits.detach().numpy().tolist(),
                "grads": grads, "bytes": trainer.session.counter.snapshot()}
    finally:
        trainer.close()


@pytest.mark.parametrize("strategy", ["granndis", "fullgraph"])
@pytest.mark.parametrize("kind", ["gcn", "resgcn"])
def test_full_graph_step_matches_single_process_dgl(steps_and_preloads, strategy, kind):
    """Exact shared preloading (m = L, k = -1), R = 1, 2 virtual servers x 2 ranks: every
    training node's output (each on the rank that owns it) and every parameter gradient (of
    the mean over ranks of each rank's mean loss, as under DDP) equal full-graph DGL's."""
    i = EXACT.index((strategy, kind))
    res = {r: steps_and_preloads[r]["exact"][i] for r in range(4)}
    ds = read_dataset(builtin_path("cora"))
    g = to_dgl(ds)
    model = _model(kind, ds.feat_dim, ds.num_classes)
    layers = 2 if kind == "gcn" else 4
    out = model([g] * layers, g.ndata["feat"])
    seen = np.zeros(ds.num_nodes, dtype=int)
    loss = 0.0
    for r in range(4):
        seeds = np.array(res[r]["seeds"])
        seen[seeds] += 1
        np.testing.assert_allclose(res[r]["out"], out[seeds].detach().numpy(), rtol=1e-4,
                                   atol=1e-5, err_msg=f"outputs on rank {r}")
        loss = loss + F.cross_entropy(out[seeds], g.ndata["label"][seeds]) / 4
    loss.backward()
    assert (seen == ds.train).all(), "every training node is the seed of exactly one rank"
    for name, p in model.named_parameters():
        for r in range(4):
            np.testing.assert_allclose(res[r]["grads"][name], p.grad.numpy(), rtol=1e-4,
                                       atol=1e-6, err_msg=f"{kind}: {name} on rank {r}")


def _preloaded(session, pdir_path, hops, fanout):
    pdir = PartitionDir(pdir_path)
    strategy = STRATEGIES.build("granndis", external_max_hop=hops, external_fanout=fanout)
    strategy.setup(session, pdir, None, SetupRequest(2, by="the test"))
    try:
        return {"core": pdir.core_ids(session.rank).tolist(),
                "external": strategy.preloaded.tolist()}
    finally:
        strategy.close()


def _in_neighbours(edges, nodes, exclude):
    src, dst = edges
    mask = np.zeros(src.max() + 1, dtype=bool)
    mask[list(nodes)] = True
    found = set(src[mask[dst]].tolist())
    return found - set(exclude)


@pytest.mark.parametrize("hops,fanout", PRELOADS)
def test_eas_preloads_the_set_m_and_k_allow(cora_parts, steps_and_preloads, hops, fanout):
    """Per server: k = -1 gives exactly the external nodes within m hops of the inner ones
    (in-edges); with k, each admitted node is among them, every frontier node with external
    in-neighbours got min(k, their number) of them, and no rank holds a node twice."""
    i = PRELOADS.index((hops, fanout))
    res = {r: steps_and_preloads[r]["preloaded"][i] for r in range(4)}
    pdir = PartitionDir(cora_parts)
    ds = read_dataset(builtin_path("cora"))
    new_ids = np.empty(ds.num_nodes, dtype=np.int64)
    new_ids[pdir.to_original(np.arange(ds.num_nodes))] = np.arange(ds.num_nodes)
    edges = new_ids[ds.src], new_ids[ds.dst]  # in the partitioned graph's ids
    for server in (0, 1):
        ranks = (2 * server, 2 * server + 1)
        inner = set().union(*(res[r]["core"] for r in ranks))
        lists = [res[r]["external"] for r in ranks]
        got = set().union(*lists)
        assert sum(map(len, lists)) == len(got) and not got & inner
        frontier, reach = inner, set()
        for _ in range(hops):
            frontier = _in_neighbours(edges, frontier, inner | reach)
            reach |= frontier
        if fanout == -1:
            assert got == reach, (server, len(got), len(reach))
            continue
        assert got <= reach and got
        for v in inner:  # the first step starts from every inner node
            external = _in_neighbours(edges, {v}, inner)
            assert len(external & got) >= min(fanout, len(external)), v


def _cora_runs(session, pdir_path):
    pdir = PartitionDir(pdir_path)
    out = {}
    for name, opts, epochs in [("eas", {}, 120),
                               ("exact", {"external_max_hop": -1, "external_fanout": -1}, 120),
                               ("r4", {"co_batches": 4}, 50)]:
        torch.manual_seed(0)
        model = GCN(pdir.feat_dim, 16, pdir.num_classes, 2, dropout=0.5, row_normalize=True)
        trainer = Trainer(model, pdir, "granndis", session=session, progress=False, lr=0.01,
                          weight_decay=5e-4, measure_saved_bytes=True, **opts)
        records = trainer.fit(epochs, eval_every=0)
        out[name] = {"acc": records[-1]["test_acc"], "saved": records[-1]["peak_saved_mb"],
                     "steps": records[-1]["steps"], "rows": [p.num_rows() for b in
                                                             trainer.strategy.batchings.values()
                                                             for p in b.plans]}
        trainer.close()
    return out


def test_cora_accuracy_eas_and_cooperative_batches(tmp_path, cora_parts):
    """GCN on Cora, 2 servers x 2 ranks, 120 epochs: EAS (m=1, k=15) within 1.5 points of
    exact shared preloading; R=4 co-batches lose at most 2.5 points against it (the paper's
    claim: cooperative batching costs no accuracy), in 4 steps per epoch with less activation
    memory per rank than R=1 (R=4's co-batches: each rank's nodes dealt at random from the
    strategy's seed; scoring above exact is no failure). R=4 takes 4 updates per epoch and
    runs 50 epochs (200 updates). On these parts the numbers are the same every run; at
    a545801: EAS 0.770, 0.788, 0.788, 0.792 and exact 0.769, 0.782, 0.789, 0.798 after 80,
    100, 120 and 150 epochs; R=4 0.800, 0.811, 0.801, 0.809 after 40, 50, 60 and 80.
    120/50 instead of 150/80 (the suite's time) leaves EAS and exact 0.8-0.9 points above
    their floor. Up to ~100 s on a loaded 2-core machine, so the time limit is 300 s."""
    res = run_workers(_cora_runs, 4, tmp_path, str(cora_parts), env=VS, timeout=300)[0]
    assert res["exact"]["acc"] >= 0.78 and res["eas"]["acc"] >= 0.78, res
    assert abs(res["eas"]["acc"] - res["exact"]["acc"]) <= 0.015, res
    assert res["r4"]["acc"] >= res["exact"]["acc"] - 0.025, res
    assert res["r4"]["acc"] >= 0.77 and res["r4"]["steps"] == 4, res
    assert res["r4"]["saved"] < res["eas"]["saved"], res
    assert max(res["r4"]["rows"]) < res["eas"]["rows"][0], res


def test_bad_options_and_models_are_named(tmp_path, cora_parts):
    with pytest.raises(RegistryError, match="co_batches"):
        STRATEGIES.build("granndis", co_batches=0)
    with pytest.raises(RegistryError, match="scope"):
        STRATEGIES.build("granndis", scope="rack")
    with pytest.raises(WorkerError, match="num_layers=4"):
        run_workers(_wrong_depth, 4, tmp_path, str(cora_parts), env=VS)


def _wrong_depth(session, pdir_path):
    pdir = PartitionDir(pdir_path)
    Trainer(ResGCN(pdir.feat_dim, 8, pdir.num_classes, 4), pdir, "fullgraph", session=session,
            progress=False, num_layers=3)
