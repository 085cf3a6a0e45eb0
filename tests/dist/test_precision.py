"""bfloat16 models and torch.autocast under every strategy whose math allows them: one step of
the user's own loop with full neighbourhoods gives the parameters single-process DGL gives for
the same math in the same precision; dorylus (float32 tensor tasks) refuses both in one line.

bfloat16 keeps 8 bits of mantissa (a relative step of 2**-8 = 0.0039), and the ranks sum
their partials in another order than one process does, so parameters are compared to within
a few bfloat16 steps of their size: far below what a missing or doubled partial would change.
"""
import pytest
import torch
import torch.nn.functional as F

import dglx_dist
from dglx_dist.data import CoraGraphDataset
from dglx_dist.models import SAGE
from dglx_dist.strategies import STRATEGIES
from dglx_dist.strategies.abilities import exact_options
from dglx_dist.testing import WorkerError, run_workers
from dglx_dist.testing.models import assert_same_params, seeded_model

pytestmark = pytest.mark.dist
LR = 0.5
MODES = ("bfloat16", "autocast")
TOLERANCE = {"bfloat16": dict(rtol=2e-2, atol=1e-2), "autocast": dict(rtol=1e-2, atol=5e-3)}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))


def _model(mode):
    model = seeded_model(lambda: SAGE(1433, 8, 7, 2, dropout=0.0))
    return model.to(torch.bfloat16) if mode == "bfloat16" else model


def _step(model, forward, labels_of, batches):
    """One SGD step on the mean over ``batches`` of each batch's mean loss."""
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # a no-op for a bfloat16 model
        losses = [F.cross_entropy(forward(b).float(), labels_of(b)) for b in batches]
    opt.zero_grad()
    torch.stack(losses).mean().backward()
    opt.step()


def _one_step(session, name, cache, mode):
    g = dglx_dist.distribute(CoraGraphDataset()[0], STRATEGIES.build(
        name, **exact_options(STRATEGIES.get(name), 2)), cache_dir=cache, session=session)
    loader = dglx_dist.DataLoader(g, g.ndata["train_mask"],
                                  dglx_dist.MultiLayerFullNeighborSampler(2), batch_size=1000)
    try:
        model = dglx_dist.parallelize(_model(mode), g)
        dtype = next(model.parameters()).dtype
        (step,) = list(loader)
        # the user casts the features to the model's dtype, as in single-process DGL
        _step(model, lambda s: model(s[2], g.ndata["feat"][s[0]].to(dtype)),
              lambda s: g.ndata["label"][s[1]], [step])
        cols = g.strategy.cols.tolist() if hasattr(g.strategy, "cols") else None
        return {"outputs": step[1].tolist(), "cols": cols, "dtype": str(dtype),
                "params": {k: v.float().tolist() for k, v in model.module.state_dict().items()}}
    finally:
        g.close()


def _steps(session, names, cache):
    """{name: {mode: one step}} for each strategy of ``names`` in turn, on the same ranks."""
    return {name: {mode: _one_step(session, name, cache, mode) for mode in MODES}
            for name in names}


NAMES = ["distdgl", "p3", "granndis", "fullgraph"]


@pytest.fixture(scope="module")
def steps(tmp_path_factory, cache):
    """{name: {rank: {mode: one step}}}: every strategy of NAMES in one launch of 2 ranks."""
    res = run_workers(_steps, 2, tmp_path_factory.mktemp("run"), NAMES, cache,
                      env={"DGLX_VIRTUAL_SERVERS": "2"}, timeout=300)
    return {name: {r: res[r][name] for r in res} for name in NAMES}


def _reference(mode, outputs_per_rank):
    g = CoraGraphDataset()[0]
    model = _model(mode)
    dtype = next(model.parameters()).dtype
    feat, labels = g.ndata["feat"].to(dtype), g.ndata["label"]
    logits = {}
    _step(model, lambda ids: logits.setdefault("all", model([g, g], feat))[ids],
          lambda ids: labels[ids], [torch.tensor(o) for o in outputs_per_rank])
    return model


@pytest.mark.parametrize("name", NAMES)
def test_bfloat16_and_autocast_match_single_process_dgl(steps, name):
    res = steps[name]
    for mode in MODES:
        outputs = [res[r][mode]["outputs"] for r in range(2)]
        reference = _reference(mode, outputs)
        for r in range(2):
            got = res[r][mode]
            assert got["dtype"] == ("torch.bfloat16" if mode == "bfloat16" else "torch.float32")
            assert_same_params(f"{name} {mode}", reference, got["params"], got["cols"],
                               **TOLERANCE[mode])


def _dorylus(session, cache, mode):
    g = dglx_dist.distribute(CoraGraphDataset()[0], "dorylus", cache_dir=cache, session=session)
    model = dglx_dist.parallelize(_model(mode), g)  # refuses a bfloat16 model
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(g, g.ndata["feat"])  # refuses autocast


FIRST = next(SAGE(1433, 8, 7, 2).named_parameters())[0]


@pytest.mark.parametrize("mode, line", [
    ("bfloat16", f"parallelize: strategy 'dorylus' trains float32 models only; the model's "
                 f"{FIRST} is torch.bfloat16: expected model.float()"),
    ("autocast", "strategy 'dorylus' runs float32 alone (its tensor tasks are float32 arrays); "
                 "expected its forward outside torch.autocast")])
def test_dorylus_refuses_other_precisions_in_one_line(tmp_path, cache, mode, line):
    with pytest.raises(WorkerError) as info:
        run_workers(_dorylus, 2, tmp_path / "run", cache, mode)
    assert str(info.value).count(line) == 2, str(info.value)[-3000:]
