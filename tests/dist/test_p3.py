"""The p3 strategy against single-process DGL doing the same math, and its traffic."""
import dgl
import dgl.nn as dglnn
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dglx_dist.convs import adapter_for
from dglx_dist.data import builtin_path, read_dataset, to_dgl
from dglx_dist.models import SAGE
from dglx_dist.partition import PartitionDir, partition_dataset
from dglx_dist.testing import run_workers, seeded_model
from dglx_dist.trainer import Trainer

pytestmark = pytest.mark.dist


class GCN(nn.Module):
    def __init__(self, in_feats, hidden, classes):
        super().__init__()
        self.layers = nn.ModuleList([dglnn.GraphConv(in_feats, hidden, allow_zero_in_degree=True),
                                     dglnn.GraphConv(hidden, classes, allow_zero_in_degree=True)])

    def forward(self, blocks, x):
        h = torch.relu(self.layers[0](blocks[0], x))
        return self.layers[1](blocks[1], h)


class GAT(nn.Module):
    def __init__(self, in_feats, hidden, classes, heads=2):
        super().__init__()
        self.layers = nn.ModuleList([
            dglnn.GATConv(in_feats, hidden, heads, allow_zero_in_degree=True),
            dglnn.GATConv(hidden * heads, classes, 1, allow_zero_in_degree=True)])

    def forward(self, blocks, x):
        h = F.elu(self.layers[0](blocks[0], x).flatten(1))
        return self.layers[1](blocks[1], h).mean(1)


MODELS = {"sage": lambda f, c: SAGE(f, 8, c, dropout=0.0),
          "sage-pool": lambda f, c: SAGE(f, 8, c, aggregator="pool", dropout=0.0),
          "gcn": lambda f, c: GCN(f, 8, c), "gat": lambda f, c: GAT(f, 4, c)}


def _model(kind, feat_dim, classes):
    return seeded_model(lambda: MODELS[kind](feat_dim, classes))


@pytest.fixture(scope="module")
def cora_p3(tmp_path_factory):
    out = {}
    for parts in (2, 4):
        out[parts] = tmp_path_factory.mktemp("parts") / f"cora-p3-{parts}"
        partition_dataset(builtin_path("cora"), out[parts], "feature_dim", parts,
                          {"structure": "hash"})
    return out


def _one_step(session, pdir_path, kind, cache_mb=0.0):
    pdir = PartitionDir(pdir_path)
    trainer = Trainer(_model(kind, pdir.feat_dim, pdir.num_classes), pdir, "p3",
                      session=session, progress=False, fanouts=(-1, -1), batch_size=12,
                      cache_mb=cache_mb, optimizer=lambda p: torch.optim.SGD(p, lr=0.0))
    try:
        batch = next(iter(trainer.batches(0)))
        loss = F.cross_entropy(trainer.forward(batch), batch.y)
        trainer.step(loss)
        grads = {n: p.grad.numpy().tolist() for n, p in trainer.model.module.named_parameters()}
        return {"seeds": batch.seeds.tolist(), "loss": loss.item(),
                "grads": grads, "cols": trainer.strategy.cols.tolist()}
    finally:
        trainer.close()


def _one_step_each(session, pdir_path, kinds, cache_mb):
    """:func:`_one_step` for each model of ``kinds`` in turn, on the same ranks."""
    return [_one_step(session, pdir_path, kind, cache_mb) for kind in kinds]


@pytest.fixture(scope="module")
def one_steps(tmp_path_factory, cora_p3):
    """``one_steps(world, cache_mb)``: {kind: {rank: _one_step's result}} for every model
    of MODELS, run on the same ranks in one launch, the first time it is asked for."""
    done = {}

    def get(world, cache_mb):
        if (world, cache_mb) not in done:
            kinds = sorted(MODELS)
            res = run_workers(_one_step_each, world, tmp_path_factory.mktemp("run"),
                              str(cora_p3[world]), kinds, cache_mb,
                              env={"DGLX_VIRTUAL_SERVERS": "2"}, timeout=300)
            done[world, cache_mb] = {k: {r: res[r][i] for r in res}
                                     for i, k in enumerate(kinds)}
        return done[world, cache_mb]
    return get


@pytest.mark.parametrize("world,cache_mb", [(2, 0.0), (4, 0.0), (4, 1e4)],
                         ids=["2-ranks", "4-ranks", "4-ranks-cached"])
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_one_step_matches_single_process_dgl(one_steps, world, cache_mb, kind):
    """4-ranks-cached: structure and features replicated on both servers (P3's caching)."""
    res = one_steps(world, cache_mb)[kind]
    ds = read_dataset(builtin_path("cora"))
    g = to_dgl(ds)
    model = _model(kind, ds.feat_dim, ds.num_classes)
    sampler = dgl.dataloading.MultiLayerFullNeighborSampler(2)
    total = 0.0
    for r in range(world):
        seeds = torch.tensor(res[r]["seeds"])
        assert 0 < seeds.numel() <= 12 and bool(ds.train[seeds.numpy()].all())
        _, _, blocks = sampler.sample_blocks(g, seeds)
        loss = F.cross_entropy(model(blocks, g.ndata["feat"][blocks[0].srcdata[dgl.NID]]),
                               g.ndata["label"][seeds])
        assert abs(loss.item() - res[r]["loss"]) < 1e-5, (r, loss.item(), res[r]["loss"])
        total = total + loss / world  # the gradient of the ranks' mean loss
    total.backward()
    conv = model.layers[0]
    split = {f"layers.0.weights.{i}": lin for i, lin in
             enumerate(adapter_for(conv).input_linears(conv))}
    want = {name: p.grad for name, p in model.named_parameters()}
    for r in range(world):
        cols = torch.tensor(res[r]["cols"])
        for name, grad in res[r]["grads"].items():
            if name in split:  # this rank's column slice of a layer-1 input weight
                lin = split[name]
                ref = lin.columns(want[f"layers.0.{lin.path}"], cols)
            else:
                ref = want[name.replace("layers.0.conv.", "layers.0.")]
            np.testing.assert_allclose(grad, ref.numpy(), rtol=1e-4, atol=1e-6,
                                       err_msg=f"{kind}: {name} on rank {r}")


def _traffic(session, pdir_path, cache_mb=0.0):
    pdir = PartitionDir(pdir_path)
    trainer = Trainer(_model("sage", pdir.feat_dim, pdir.num_classes), pdir, "p3",
                      session=session, progress=False, fanouts=(-1, -1), batch_size=10,
                      cache_mb=cache_mb)
    # the steps in turn: a pipelined loader draws the next steps (and counts their bytes)
    # while this one is measured
    trainer.loader.lookahead, trainer.loader._threaded = False, None
    counter = session.counter
    s0 = counter.snapshot()
    batch = next(iter(trainer.batches(0)))
    s1 = counter.snapshot()
    trainer.step(F.cross_entropy(trainer.forward(batch), batch.y))
    s2 = counter.snapshot()
    b0 = batch.blocks[0]
    return {"sample": {k: s1[k] - s0[k] for k in s0}, "step": {k: s2[k] - s1[k] for k in s0},
            "frontiers": [b.dstdata[dgl.NID].tolist() for b in batch.blocks],
            "block0": [b0.num_src_nodes(), b0.num_dst_nodes(), b0.num_edges()],
            "grad_bytes": trainer.strategy._grad_bytes,
            "slice_bytes": sum(p.nbytes for p in trainer.strategy._slices)}


def _add(totals, kind, sent, recv):
    totals[f"sent_{kind}"] += sent
    totals[f"recv_{kind}"] += recv


def _expected_step(res, me, hidden, per=2, servers=2):
    """Bytes of one step of rank ``me`` after sampling (2 virtual servers x 2 ranks)."""
    world, out = per * servers, dict.fromkeys(KEYS, 0)
    rank = lambda s, l: s * per + l  # noqa: E731
    s_me, l_me = divmod(me, per)
    n = [res[r]["block0"][1] * hidden * 4 for r in range(world)]  # a batch's partial, bytes
    packed = [3 + sum(res[r]["block0"][:2]) + 1 + res[r]["block0"][2] for r in range(world)]
    # push of the blocks: across servers (sizes, then padded int32), then within the server
    col = lambda l: max(packed[rank(s, l)] for s in range(servers))  # noqa: E731
    _add(out, "inter", (servers - 1) * (8 + 4 * col(l_me)), (servers - 1) * (8 + 4 * col(l_me)))
    msg = max(servers + sum(packed[rank(s, l)] for s in range(servers)) for l in range(per))
    _add(out, "intra", (per - 1) * (8 + 4 * msg), (per - 1) * (8 + 4 * msg))
    # partials: summed within the server on the owner's local index, then sent across
    for l in range(per):
        if l != l_me:
            to_l = sum(n[rank(s, l)] for s in range(servers))
            from_l = sum(n[rank(s, l_me)] for s in range(servers))
            # forward: my partials for l's owners out, theirs for mine in; backward: the reverse
            _add(out, "intra", to_l + from_l, from_l + to_l)
    for s in range(servers):
        if s != s_me:
            _add(out, "inter", n[rank(s, l_me)] + n[me], n[me] + n[rank(s, l_me)])
    for peer in range(world):  # DDP's all-reduce of the dense gradients
        if peer != me:
            share = 2 * res[me]["grad_bytes"] // world
            _add(out, "intra" if peer // per == s_me else "inter", share, share)
    return out


KEYS = ("sent_intra", "recv_intra", "sent_inter", "recv_inter")


def _label_bytes(pdir, res, me, per=2):
    """Inter-server bytes (sent, received) of rank ``me`` for its batch's labels, pulled by
    every rank at once: for the seeds owned on the other server, a request of the name's
    index and the ids (int64) and the labels back; the cross peer asks the same of it."""
    def remote(r):
        owners = np.asarray(pdir.owner(np.unique(res[r]["frontiers"][-1])))
        return int((owners // per != r // per).sum())

    asked, asked_me = remote(me), remote((me + per) % (2 * per))
    return (8 * (asked + (asked > 0)) + 8 * asked_me,
            8 * asked + 8 * (asked_me + (asked_me > 0)))


def test_traffic_is_structure_partials_and_gradients_only(tmp_path, cora_p3):
    """Two virtual servers x 2 ranks: every byte of a step is accounted for by the sampled
    structure, the pushed blocks, the layer-1 partials and their gradients, and DDP; no
    feature row moves."""
    world, hidden = 4, 8
    res = run_workers(_traffic, world, tmp_path, str(cora_p3[world]),
                      env={"DGLX_VIRTUAL_SERVERS": "2"})
    pdir = PartitionDir(cora_p3[world])
    indeg = to_dgl(read_dataset(builtin_path("cora"))).in_degrees().numpy()
    for me in range(world):
        sample = dict.fromkeys(KEYS, 0)
        for peer in range(world):
            if peer == me:
                continue
            kind = "intra" if peer // 2 == me // 2 else "inter"
            for layer in range(2):  # my requests to peer and its answers, and the reverse
                mine = np.asarray(res[me]["frontiers"][layer])
                theirs = np.asarray(res[peer]["frontiers"][layer])
                asked = mine[np.asarray(pdir.owner(mine)) == peer]
                asked_me = theirs[np.asarray(pdir.owner(theirs)) == me]
                # int32 ids; an answer is a count per asked node, then the sources, then
                # the edges' ids
                _add(sample, kind, 4 * asked.size + 4 * (asked_me.size
                                                         + 2 * int(indeg[asked_me].sum())),
                     4 * asked_me.size + 4 * (asked.size + 2 * int(indeg[asked].sum())))
        sent, recv = _label_bytes(pdir, res, me)
        sample["sent_inter"] += sent
        sample["recv_inter"] += recv
        step = _expected_step(res, me, hidden)
        for k in KEYS:
            assert res[me]["sample"][k] == sample[k], (me, k, res[me]["sample"], sample)
            assert res[me]["step"][k] == step[k], (me, k, res[me]["step"], step)
        assert step["sent_inter"] > 0 and sample["sent_inter"] > 0


def _slice_grads_per_step(session, pdir_path, pipeline):
    """Slice gradients applied at each step of one epoch, with weights that never change."""
    pdir = PartitionDir(pdir_path)
    trainer = Trainer(_model("sage", pdir.feat_dim, pdir.num_classes), pdir, "p3",
                      session=session, progress=False, fanouts=(4, 4), batch_size=16,
                      pipeline=pipeline, optimizer=lambda p: torch.optim.SGD(p, lr=0.0))
    steps = []
    for batch in trainer.batches(0):
        trainer.step(F.cross_entropy(trainer.forward(batch), batch.y))
        layer = trainer.model.module.layers[0]
        steps.append({"slices": [None if w.grad is None else w.grad.numpy().tolist()
                                 for w in layer.weights],
                      "dense": layer.conv.fc_self.bias.grad.numpy().tolist()})
    return steps


def _both_modes(session, pdir_path):
    return {"sync": _slice_grads_per_step(session, pdir_path, False),
            "pipe": _slice_grads_per_step(session, pdir_path, True)}


def test_pipeline_applies_each_batch_slice_gradient_one_step_later(tmp_path, cora_p3):
    """With lr = 0 staleness cannot change values, so the plumbing shows exactly: the dense
    gradient of step t is the synchronous one; the slice gradient applied at step t + 1 is
    batch t's (stashed weights, pushed back while step t + 1 ran); step 0 applies none."""
    res = run_workers(_both_modes, 4, tmp_path, str(cora_p3[4]),
                      env={"DGLX_VIRTUAL_SERVERS": "2"})
    for r, out in res.items():
        sync, pipe = out["sync"], out["pipe"]
        assert len(sync) == len(pipe) >= 3, r
        assert pipe[0]["slices"] == [None, None], r
        for t in range(len(sync)):
            np.testing.assert_allclose(pipe[t]["dense"], sync[t]["dense"], rtol=1e-5, atol=1e-7)
            if t + 1 < len(sync):
                for got, want in zip(pipe[t + 1]["slices"], sync[t]["slices"]):
                    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_caching_keeps_layer_one_and_sampling_off_the_inter_server_links(tmp_path, cora_p3):
    """With structure and features replicated on both servers, sampling sends nothing (the
    batch's labels alone cross servers) and a step's inter-server bytes are DDP's all-reduce
    plus the weight slices' all-reduce."""
    res = run_workers(_traffic, 4, tmp_path, str(cora_p3[4]), 1e4,
                      env={"DGLX_VIRTUAL_SERVERS": "2"})
    pdir = PartitionDir(cora_p3[4])
    for r, out in res.items():
        sent, recv = _label_bytes(pdir, res, r)
        assert out["sample"] == {**dict.fromkeys(KEYS, 0), "sent_inter": sent,
                                 "recv_inter": recv} | {k: v for k, v in out["sample"].items()
                                                        if k not in KEYS}, (r, out["sample"])
        ddp = 2 * out["grad_bytes"] // 4 * 2  # to the two ranks of the other server
        slices = 2 * out["slice_bytes"] // 2  # all-reduce over the cross pair
        assert out["step"]["sent_inter"] == ddp + slices, (r, out["step"])
        assert out["step"]["sent_intra"] > 0  # layer 1 now runs within each server


def test_plan_cache_is_greedy_smallest_first():
    from types import SimpleNamespace

    from dglx_dist.runtime.topology import Topology
    from dglx_dist.strategies.p3 import plan_cache

    pdir = SimpleNamespace(num_nodes=1000, num_edges=10_000, feat_dim=100)
    topo = Topology(2, 2)
    struct = 2 * (24 * 10_000 + 16 * 1000)  # every rank of a server holds it
    feat = 4 * 1000 * 100 // 2  # the half of the columns a server does not hold
    assert struct > feat
    plans = [plan_cache(b, pdir, topo) for b in (0, feat, struct, struct + feat)]
    assert [(p.structure, p.features) for p in plans] == [
        (False, False), (False, True), (False, True), (True, True)]
    assert (plans[0].structure_bytes, plans[0].feature_bytes) == (struct, feat)
    assert not plan_cache(1e12, pdir, Topology(1, 4)).features  # one server holds all anyway


def _resgcn(session, pdir_path):
    from dglx_dist.models import ResGCN

    pdir = PartitionDir(pdir_path)
    Trainer(ResGCN(pdir.feat_dim, 8, pdir.num_classes, 2), pdir, "p3", session=session,
            progress=False)


def test_a_model_whose_features_pass_a_linear_first_is_refused_in_one_line(tmp_path, cora_p3):
    """ResGCN+ sends the features through its input Linear before the first conv, whose
    input p3 splits by the features' columns: refused on every rank alike, naming the conv,
    both widths and what to use instead (an IndexError from a slice before)."""
    from dglx_dist.testing import WorkerError

    with pytest.raises(WorkerError, match=r"p3: ResGCN's first graph conv \(convs.0\) takes 8 "
                                          r"input columns, but the features have 1433"):
        run_workers(_resgcn, 2, tmp_path, str(cora_p3[2]), env={"DGLX_VIRTUAL_SERVERS": "2"})
