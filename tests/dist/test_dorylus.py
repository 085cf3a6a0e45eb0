"""dorylus against single-process full-graph DGL (GCN, GraphSAGE, GAT): loss curves (sync,
local and aws executors), logits and gradients of a loop of one's own, accuracy under bounded
asynchrony, relaunched faults, the weight stash."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dglx_dist.data import builtin_path, read_dataset, to_dgl
from dglx_dist.models import GAT, GCN, SAGE
from dglx_dist.partition import PartitionDir, partition_dataset
from dglx_dist.testing import run_workers, seeded_model
from dglx_dist.trainer import Trainer
from tests.doubles.invoke_api import serve_in_subprocess

pytestmark = pytest.mark.dist
EPOCHS = 5


def _model(feat_dim, classes, dropout=0.0, row_normalize=False, kind="gcn"):
    """The exactness tests' GCN, GraphSAGE (mean) or GAT (3 heads of 8; biases drawn
    non-zero), or with dropout the stock one. ``-relu`` after the kind: every conv built with
    ``activation=F.relu`` (the logits too, then)."""
    kind, _, act = kind.partition("-")
    act = F.relu if act == "relu" else None
    if kind == "gat":
        build = lambda: GAT(feat_dim, 8, classes, 2, dropout=dropout,  # noqa: E731
                            row_normalize=row_normalize, heads=3)
    elif kind == "sage":
        build = lambda: SAGE(feat_dim, 16, classes, 2, dropout=dropout,  # noqa: E731
                             row_normalize=row_normalize)
    else:
        build = lambda: GCN(feat_dim, 16, classes, 2, dropout=dropout,  # noqa: E731
                            row_normalize=row_normalize)
    if dropout:
        torch.manual_seed(0)
        model = build()
    else:
        model = seeded_model(build)
    for conv in model.layers if act else ():
        conv.activation = conv._activation = act  # SAGEConv's and GraphConv's attribute
    return model


@pytest.fixture(scope="module")
def cora_raw_parts(tmp_path_factory):
    """Cora with its raw 0/1 bag-of-words features (the shipped copy is row-normalised)."""
    from dglx_dist.data import CoraGraphDataset, from_dgl, write_dataset

    root = tmp_path_factory.mktemp("raw")
    write_dataset(from_dgl(CoraGraphDataset(raw_features=True)[0]), root / "cora-raw")
    partition_dataset(root / "cora-raw", root / "parts", "metis", 2,
                      {"balance": ["train", "edges"]})
    return root / "parts"


def _fit(session, pdir_path, epochs, options, weight_decay=0.0):
    pdir = PartitionDir(pdir_path)
    model = _model(pdir.feat_dim, pdir.num_classes, options.pop("model_dropout", 0.0),
                   options.pop("row_normalize", False), options.pop("model", "gcn"))
    if "model_attn_drop" in options:
        for conv in model.layers:
            conv.attn_drop.p = options["model_attn_drop"]
        options.pop("model_attn_drop")
    eps = options.pop("adam_eps", 1e-8)
    trainer = Trainer(model, pdir, "dorylus", session=session, progress=False,
                      optimizer=lambda p: torch.optim.Adam(p, lr=0.01, eps=eps,
                                                           weight_decay=weight_decay),
                      **options)
    try:
        history = trainer.fit(epochs, eval_every=0)
        params = {n: p.detach().numpy().tolist() for n, p in trainer.model.module.named_parameters()}
        return {"history": history, "params": params}
    finally:
        trainer.close()


def _test_accs(session, pdir_path, epochs, runs, weight_decay):
    """:func:`_fit` with each options dict of ``runs`` in turn, on the same ranks (one process
    start for all); the test accuracy each ended with."""
    return [_fit(session, pdir_path, epochs, dict(options), weight_decay)["history"][-1]
            ["test_acc"] for options in runs]


def _each(session, calls):
    """``[fn(session, *args) for fn, args in calls]`` (``fn`` a name in this module) on the
    same ranks: one process start for several runs."""
    return [globals()[fn](session, *args) for fn, args in calls]


# The exactness runs of the sync-mode and own-loop tests below, all in one launch of 2 ranks
# (one trainer after another, each closed before the next; each seeds its own model):
# {key: (worker function, its arguments after the partition directory)}.
SYNC = {"gcn": ("_fit", EPOCHS, {"mode": "sync", "intervals": 4, "param_servers": 2}),
        "gat": ("_fit", EPOCHS, {"mode": "sync", "intervals": 4, "model": "gat",
                                 "adam_eps": 1e-4}),
        **{("sage", kind): ("_fit", epochs, {"mode": "sync", "intervals": 4,
                                             "param_servers": 2, "model": kind})
           for kind, epochs in [("sage", EPOCHS), ("sage-relu", 3), ("gcn-relu", 3)]},
        "gat-dropout": ("_fit_with_ids", 3, {"mode": "sync", "intervals": 3, "model": "gat",
                                             "dropout": 0.3, "model_attn_drop": 0.4}),
        **{("own", kind, bias): ("_user_loop_step", bias, kind)
           for kind, bias in [("gcn", True), ("gcn", False), ("gat", True), ("gat", False),
                              ("sage", True), ("sage", False), ("gcn-relu", True),
                              ("sage-relu", True)]}}


@pytest.fixture(scope="module")
def sync_runs(tmp_path_factory, cora_parts):
    """{key of SYNC: {rank: its result}}."""
    calls = [(fn, (str(cora_parts), *args)) for fn, *args in SYNC.values()]
    res = run_workers(_each, 2, tmp_path_factory.mktemp("sync"), calls, timeout=400)
    return {key: {r: res[r][i] for r in res} for i, key in enumerate(SYNC)}


def _reference(epochs, kind="gcn", eps=1e-8):
    """Single-process full-graph DGL: the loss before each Adam step, and the final weights."""
    ds = read_dataset(builtin_path("cora"))
    g = to_dgl(ds)
    model = _model(ds.feat_dim, ds.num_classes, kind=kind)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, eps=eps)
    train = torch.from_numpy(ds.train)
    losses = []
    for _ in range(epochs):
        loss = F.cross_entropy(model([g, g], g.ndata["feat"])[train], g.ndata["label"][train])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses, {n: p.detach().numpy() for n, p in model.named_parameters()}


def _check_exact(res, epochs, kind="gcn", atol=1e-5, eps=1e-8):
    want_losses, want_params = _reference(epochs, kind, eps)
    for r in range(2):
        got = [rec["loss"] for rec in res[r]["history"]]
        np.testing.assert_allclose(got, want_losses, rtol=2e-4, err_msg=f"losses on rank {r}")
        for name, p in want_params.items():
            np.testing.assert_allclose(res[r]["params"][name], p, rtol=1e-3, atol=atol,
                                       err_msg=f"{name} on rank {r}")


def test_sync_loss_curve_matches_single_process_dgl(sync_runs):
    """mode=sync, local executor (separate worker processes), 2 graph servers, 4 intervals
    each, 2 parameter-server replicas: the loss of every epoch and the final weights equal
    full-graph DGL GCN with the same init and Adam."""
    res = sync_runs["gcn"]
    _check_exact(res, EPOCHS)
    rec = res[0]["history"][-1]
    # per epoch and graph server: AV0 + fused AVL + ∇AV0 per interval
    assert rec["invocations"] == 2 * 4 * 3
    assert rec["bytes_to_executor"] > 0 and rec["bytes_from_executor"] > 0
    assert rec["cost_usd"] > 0 and rec["value"] > 0
    assert rec["bytes_sent_intra"] + rec["bytes_sent_inter"] > 0  # scatters crossed ranks


def test_sync_gat_matches_single_process_dgl(sync_runs):
    """GAT (2 GATConv layers: 3 heads of 8, ELU, then 1 head), mode=sync, local executor, 2
    graph servers, 4 intervals each: the loss of every epoch and the final weights equal
    full-graph DGL GAT with the same init and Adam.

    Adam with eps = 1e-4 on both sides, weights to 1e-4 absolute (lr is 0.01): the
    intervals' gradients are summed in the order their tasks finish, and Adam's first steps
    turn a float-rounding difference in a near-zero gradient (a rare Cora word's weight row,
    smaller still with row-normalised features) into a weight difference up to lr when eps is
    tiny (seen with eps = 1e-8: 2.2e-3 on 3 entries of 34392; with 1e-6: 1.5e-3 on 2). The gradients themselves are
    checked to 1e-4 relative by the own-loop test below."""
    res = sync_runs["gat"]
    _check_exact(res, EPOCHS, "gat", atol=1e-4, eps=1e-4)
    rec = res[0]["history"][-1]
    # per epoch and graph server and interval: AV AE per layer, AVL, ∇AE ∇AV per layer
    assert rec["invocations"] == 2 * 4 * 9
    assert rec["bytes_sent_intra"] + rec["bytes_sent_inter"] > 0


@pytest.mark.parametrize("kind, epochs", [("sage", EPOCHS), ("sage-relu", 3), ("gcn-relu", 3)])
def test_sync_sage_matches_single_process_dgl(sync_runs, kind, epochs):
    """GraphSAGE (2 SAGEConv mean layers, hidden 16), mode=sync, local executor, 2 graph
    servers, 4 intervals each, 2 parameter-server replicas: the loss of every epoch and the
    final weights equal full-graph DGL with the same init and Adam. Also with every conv
    built with ``activation=F.relu`` (the fused last layer applies it to the logits), and
    so for GCN."""
    assert SYNC["sage", kind][1] == epochs
    res = sync_runs["sage", kind]
    _check_exact(res, epochs, kind)
    rec = res[0]["history"][-1]
    assert rec["invocations"] == 2 * 4 * 3  # AV0 + fused AVL + ∇AV0 per interval, as GCN
    assert rec["bytes_sent_intra"] + rec["bytes_sent_inter"] > 0


class _Scale(torch.nn.Module):
    """Multiplies by a fixed tensor: a dropout whose mask is given."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x * self.scale


def _fit_with_ids(session, pdir_path, epochs, options):
    out = _fit(session, pdir_path, epochs, options)
    pdir = PartitionDir(pdir_path)
    out["original"] = pdir.to_original(np.arange(pdir.num_nodes)).tolist()
    return out


def test_sync_gat_with_dropout_matches_dgl_with_the_same_masks(sync_runs):
    """Feature dropout 0.3 and attention dropout 0.4 in sync mode: the losses and weights of
    3 epochs equal DGL's GATConv whose feat_drop / attn_drop apply the tasks' hash masks
    (node id and column; edge key and head; per epoch and layer)."""
    from dglx_dist.convs.ops_base import dropout_mask
    from dglx_dist.convs.dorylus_base import task_seed

    epochs, pf, pa = 3, 0.3, 0.4
    assert SYNC["gat-dropout"][1:] == (epochs, {"mode": "sync", "intervals": 3, "model": "gat",
                                                "dropout": pf, "model_attn_drop": pa})
    res = sync_runs["gat-dropout"]
    ds = read_dataset(builtin_path("cora"))
    g = to_dgl(ds)
    pid = np.empty(ds.num_nodes, dtype=np.int64)
    pid[np.array(res[0]["original"])] = np.arange(ds.num_nodes)  # dataset id -> partition id
    u, v = (pid[t.numpy()] for t in g.edges())
    keys = u * ds.num_nodes + v
    model = _model(ds.feat_dim, ds.num_classes, kind="gat")
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    train = torch.from_numpy(ds.train)
    losses = []
    for epoch in range(epochs):
        for l, conv in enumerate(model.layers):
            cols = conv.fc.weight.shape[1]
            keep = dropout_mask(task_seed(0, epoch, l), pid, cols, pf) / (1 - pf)
            conv.feat_drop = _Scale(torch.from_numpy(keep.astype(np.float32)))
            keep = dropout_mask(task_seed(0, epoch, 2 + l), keys, conv._num_heads, pa) / (1 - pa)
            conv.attn_drop = _Scale(torch.from_numpy(keep.astype(np.float32))[:, :, None])
        loss = F.cross_entropy(model([g, g], g.ndata["feat"])[train], g.ndata["label"][train])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    for r in range(2):
        got = [rec["loss"] for rec in res[r]["history"]]
        np.testing.assert_allclose(got, losses, rtol=2e-4, err_msg=f"losses on rank {r}")
        for name, p in model.named_parameters():
            np.testing.assert_allclose(res[r]["params"][name], p.detach().numpy(), rtol=1e-3,
                                       atol=3e-4, err_msg=f"{name} on rank {r}")


def _no_bias(model, bias):
    if not bias:
        for conv in model.layers:
            if hasattr(conv, "fc_self"):  # SAGEConv (mean): the bias is fc_self's
                conv.fc_self.bias = None
                continue
            conv.bias = None
            conv.has_explicit_bias = False  # GATConv's forward reads this flag
    return model


def _user_loop_step(session, pdir_path, bias, kind="gcn"):
    pdir = PartitionDir(pdir_path)
    model = _no_bias(_model(pdir.feat_dim, pdir.num_classes, kind=kind), bias)
    trainer = Trainer(model, pdir, "dorylus", session=session,
                      progress=False, intervals=3, optimizer=lambda p: torch.optim.SGD(p, lr=0.0))
    try:
        batch = next(iter(trainer.batches(0)))
        logits = trainer.forward(batch)
        trainer.step(F.cross_entropy(logits, batch.y))
        return {"seeds": batch.seeds.tolist(),
                "logits": logits.detach().numpy().tolist(),
                "grads": {n: p.grad.numpy().tolist() for n, p in trainer.model.module.named_parameters()}}
    finally:
        trainer.close()


@pytest.mark.parametrize("kind, bias", [("gcn", True), ("gcn", False), ("gat", True),
                                         ("gat", False), ("sage", True), ("sage", False),
                                         ("gcn-relu", True), ("sage-relu", True)],
                         ids=["gcn-bias", "gcn-no-bias", "gat-bias", "gat-no-bias", "sage-bias",
                              "sage-no-bias", "gcn-relu-inside", "sage-relu-inside"])
def test_own_loop_step_matches_single_process_dgl(sync_runs, kind, bias):
    """A loop of one's own: one batch per epoch (the rank's labelled nodes); its forward and
    backward run the tasks layer-synchronously; the logits equal DGL's and the gradients
    DGL's average over the ranks of each rank's mean loss (what DDP computes). GCN, GAT and
    GraphSAGE, convs without a bias too, and convs built with ``activation=F.relu`` (the
    last one's ReLU on the logits)."""
    res = sync_runs["own", kind, bias]
    ds = read_dataset(builtin_path("cora"))
    g = to_dgl(ds)
    model = _no_bias(_model(ds.feat_dim, ds.num_classes, kind=kind), bias)
    out = model([g, g], g.ndata["feat"])
    for r in range(2):
        np.testing.assert_allclose(np.array(res[r]["logits"]),
                                   out[res[r]["seeds"]].detach().numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=f"logits on rank {r}")
    if kind.endswith("-relu"):  # the last conv's own ReLU did cut some logits
        assert (out[res[0]["seeds"]] == 0).any() and (out[res[0]["seeds"]] > 0).any()
    loss = sum(F.cross_entropy(out[res[r]["seeds"]], g.ndata["label"][res[r]["seeds"]])
               for r in range(2)) / 2
    loss.backward()
    assert sorted(res[0]["seeds"] + res[1]["seeds"]) == np.flatnonzero(ds.train).tolist()
    for name, p in model.named_parameters():
        for r in range(2):
            np.testing.assert_allclose(res[r]["grads"][name], p.grad.numpy(), rtol=1e-4,
                                       atol=1e-6, err_msg=f"{name} on rank {r}")


def test_relaunched_faults_give_the_same_result(tmp_path, cora_parts):
    """A worker killed mid-invocation and an invocation that hangs past its timeout are
    relaunched; the sync run's losses and weights are the fault-free ones (the faults: the
    test plug-ins' faulty-local executor)."""
    opts = {"mode": "sync", "intervals": 4, "invocation_timeout": 2.0,
            "executor": "faulty-local",
            "executor_options": ("crash_on=3,17", "hang_on=9", "hang_s=30")}
    res = run_workers(_fit, 2, tmp_path, str(cora_parts), 3, opts)
    _check_exact(res, 3)
    total = sum(rec["relaunches"] for rec in res[0]["history"])
    assert total == 2 * 3  # two crashes and one hang on each graph server
    assert sum(rec["timeouts"] for rec in res[0]["history"]) == 2


AWS_KINDS = ("gcn", "gat", "sage")


@pytest.fixture(scope="module")
def aws_runs(tmp_path_factory, cora_parts):
    """{kind: {rank: _fit's result}} for each of AWS_KINDS through one endpoint, in one launch
    of 2 ranks (the endpoint is stopped before the first test using this starts)."""
    with serve_in_subprocess("dglx-tensor-fn") as url:
        calls = []
        for kind in AWS_KINDS:
            opts = {"mode": "sync", "intervals": 2, "executor": "aws", "model": kind,
                    "executor_options": (f"endpoint_url={url}", "max_payload_bytes=400000",
                                         "concurrency=4"), "adam_eps": _aws_eps(kind)}
            calls.append(("_fit", (str(cora_parts), 3, opts)))
        res = run_workers(_each, 2, tmp_path_factory.mktemp("aws"), calls, timeout=400)
    return {kind: {r: res[r][i] for r in res} for i, kind in enumerate(AWS_KINDS)}


def _aws_eps(kind):
    return 1e-8 if kind == "gcn" else 1e-4


@pytest.mark.parametrize("kind", AWS_KINDS)
def test_aws_executor_through_boto3_matches(aws_runs, kind):
    """The aws executor (boto3 lambda.invoke) against a local endpoint speaking Lambda's Invoke
    API, with requests chunked under a small payload limit: the same exact loss curve (GAT:
    its vertex tasks chunked, its per-edge tasks sent whole; GraphSAGE: rows and neighbour
    means chunked together). Adam's eps as in the GAT test above."""
    eps = _aws_eps(kind)
    _check_exact(aws_runs[kind], 3, kind, atol=1e-5 if kind == "gcn" else 1e-4, eps=eps)


def test_async_reaches_sync_accuracy_on_cora(tmp_path, cora_parts):
    """Bounded asynchrony with S=0 and S=1, 200 epochs of the standard Cora GCN recipe (dropout
    0.5, weight decay 5e-4, row-normalised features): within 2 points of the synchronous
    pipeline, and at least 78% (S=0) / 77% (S=1) test accuracy. The tensor tasks run inline on
    the graph servers here (the same handler and pipeline; worker processes are exercised by
    the exactness and fault tests and the example's end-to-end run), which makes 200 epochs
    cheap. S=1 trains on one-update-stale weights most of the time and converges more slowly.
    On the fixture's fixed parts: at 300 epochs (four runs) sync 0.792 every time, S=0 0.788
    to 0.792, S=1 0.782 to 0.785; at 200 (two runs, a third less time) sync 0.792, S=0 0.790
    and 0.793, S=1 0.779 and 0.790 (which update a step sees stale depends on timing)."""
    modes = (("sync", 0), ("async", 0), ("async", 1))
    runs = [{"mode": mode, "staleness": staleness, "intervals": 4, "model_dropout": 0.5,
             "row_normalize": True, "executor": "inline"} for mode, staleness in modes]
    res = run_workers(_test_accs, 2, tmp_path, str(cora_parts), 200, runs, 5e-4, timeout=300)
    acc = dict(zip(modes, res[0]))
    sync = acc[("sync", 0)]
    for key, floor in ((("async", 0), 0.78), (("async", 1), 0.77)):
        assert acc[key] >= floor, acc
        assert abs(acc[key] - sync) <= 0.02, acc


def test_async_gat_reaches_sync_accuracy_on_cora(tmp_path, cora_raw_parts):
    """GAT (3 heads of 8, feature and attention dropout 0.6, weight decay 5e-4, raw features),
    30 epochs in sync mode and with bounded asynchrony S=0 and S=1, tasks inline: >= 77% test
    accuracy and within 3 points of sync. Measured over 5 runs (3 METIS partitions): sync
    0.798, S=0 0.794-0.802, S=1 0.805-0.811. (With row-normalised features 30 epochs are too
    few: sync ended between 0.759 and 0.792 depending on the partition, whose node ids seed
    the dropout masks.)"""
    modes = (("sync", 0), ("async", 0), ("async", 1))
    runs = [{"mode": mode, "staleness": staleness, "intervals": 4, "model": "gat",
             "model_dropout": 0.6, "executor": "inline"} for mode, staleness in modes]
    res = run_workers(_test_accs, 2, tmp_path, str(cora_raw_parts), 30, runs, 5e-4,
                      timeout=300)
    acc = dict(zip(modes, res[0]))
    sync = acc[("sync", 0)]
    assert sync >= 0.77, acc
    for key in (("async", 0), ("async", 1)):
        assert acc[key] >= 0.77, acc
        assert abs(acc[key] - sync) <= 0.03, acc


def test_async_sage_reaches_sync_accuracy_on_cora(tmp_path, cora_parts):
    """GraphSAGE (mean, hidden 16, dropout 0.5, weight decay 5e-4, row-normalised features),
    100 epochs in sync mode and with bounded asynchrony S=0, tasks inline: >= 78% test
    accuracy and within 2 points of sync. Measured over 3 runs (2+ METIS partitions): sync
    0.795-0.798, S=0 0.793-0.796 (S=1, not tested here: 0.776-0.787)."""
    modes = ("sync", "async")
    runs = [{"mode": mode, "staleness": 0, "intervals": 4, "model": "sage",
             "model_dropout": 0.5, "row_normalize": True, "executor": "inline"}
            for mode in modes]
    res = run_workers(_test_accs, 2, tmp_path, str(cora_parts), 100, runs, 5e-4, timeout=300)
    acc = dict(zip(modes, res[0]))
    assert acc["sync"] >= 0.78 and acc["async"] >= 0.78, acc
    assert abs(acc["async"] - acc["sync"]) <= 0.02, acc


def _graph_server_dies(session, pdir_path):
    import os
    import threading
    import time

    from dglx_dist.runtime.comm import PeerError

    pdir = PartitionDir(pdir_path)
    trainer = Trainer(_model(pdir.feat_dim, pdir.num_classes), pdir, "dorylus", session=session,
                      progress=False, mode="async", intervals=4)
    if session.rank == 1:  # dies in the middle of training, its workers with it
        threading.Timer(1.5, lambda: os._exit(3)).start()
    t0 = time.monotonic()
    try:
        trainer.fit(100000, eval_every=0)
    except PeerError as exc:
        return {"ranks": exc.ranks, "message": str(exc), "seconds": time.monotonic() - t0}
    finally:
        trainer.close()
    return {"ranks": None}


def test_dead_graph_server_is_named(tmp_path, cora_parts):
    """A graph server killed mid-epoch: the survivor's pipeline (waiting on its scatters or
    the weight update) fails within the timeout with an error naming it."""
    res = run_workers(_graph_server_dies, 2, tmp_path, str(cora_parts),
                      env={"DGLX_TIMEOUT": "5"}, expect_failure=[1], timeout=60)
    assert res[0]["ranks"] == [1] and "rank 1" in res[0]["message"], res[0]
    assert res[0]["seconds"] < 1.5 + 5 + 5, res[0]
