"""Every strategy trains a model of ``dglx_dist.nn``'s convs as it trains the same model of
``dgl.nn``'s (issue 59): two real processes per job, each strategy's own loader, forward,
backward, gradient exchange and an optimizer step, the strategy driven as ``parallelize``
and the ``DataLoader`` drive it. Three runs of the same steps: ``dglx_dist.nn``'s convs where
DGL cannot be imported (the package's blocks reach the model), the same where DGL is
installed (DGL's blocks reach it), and ``dgl.nn``'s convs of the same parameters (these two
in one job, one after the other); the losses and every parameter's gradients agree, step by
step. The first conv is P3's split layer, GraNNDis's halo conv (GCN's degree rescaling
included), one of Dorylus's stage kinds."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from dglx_dist.partition import partition_dataset
from dglx_dist.runtime.env import free_local_port
from dglx_dist.runtime.topology import Topology
from dglx_dist.strategies import STRATEGIES
from dglx_dist.testing import tiny_dataset
from tests.unit.test_import_boundary import _BLOCK

pytestmark = pytest.mark.dist
ROOT = Path(__file__).resolve().parents[2]

_RANK = textwrap.dedent("""
    import importlib, json, sys
    from pathlib import Path
    import torch
    from torch import nn
    import dglx_dist
    from dglx_dist.partition import PartitionDir
    from dglx_dist.strategies import STRATEGIES
    from dglx_dist.strategies.abilities import HoldsRows, OverlapsBackward
    from dglx_dist.strategies.base import SetupRequest, split_ids
    from dglx_dist.convs import at_the_edge
    from dglx_dist.strategies.steps import LoaderSpec
    from dglx_dist.testing import seeded_model

    ours = importlib.import_module("dglx_dist.nn")

    class Net(nn.Module):
        def __init__(self, lib, kind, f, c):
            super().__init__()
            self.layers = nn.ModuleList(
                [lib.SAGEConv(f, 8, "mean"), lib.SAGEConv(8, c, "mean")] if kind == "sage" else
                [lib.GraphConv(f, 8, allow_zero_in_degree=True),
                 lib.GraphConv(8, c, allow_zero_in_degree=True)] if kind == "gcn" else
                [lib.GATConv(f, 4, 2, allow_zero_in_degree=True),
                 lib.GATConv(8, c, 1, allow_zero_in_degree=True)])

        def forward(self, blocks, x):
            h = torch.relu(self.layers[0](blocks[0], x).flatten(1))
            out = self.layers[1](blocks[1], h)
            return out.mean(1) if out.dim() == 3 else out

    def model_of(lib, kind, f, c):  # the same parameters from either library
        made = seeded_model(lambda: Net(ours, kind, f, c))
        twin = Net(lib, kind, f, c)
        twin.load_state_dict(made.state_dict())
        return twin

    def train(session, lib, strategy, pdir, kind):
        strategy.setup(session, pdir, None, SetupRequest(2))
        model = model_of(lib, kind, pdir.feat_dim, pdir.num_classes)
        wrapped = strategy.wrap_model(model)
        at_the_edge(model)  # as parallelize: a dgl.nn model gets DGL's blocks at its edge
        opt = torch.optim.SGD(wrapped.parameters(), lr=0.1)
        ids = split_ids(strategy, torch.arange(pdir.num_nodes), pdir, session)
        spec = LoaderSpec((3, 5), 40, shuffle=True, seed=3)
        steps = []
        for step in strategy.loader_epoch(strategy.loader_plan(ids, spec), spec, 0):
            blocks = step.blocks  # the package's, as the DataLoader hands them
            x = strategy.local_rows("feat", step.input_nodes) \\
                if isinstance(strategy, HoldsRows) else \\
                strategy._input_rows(step.input_nodes) if hasattr(strategy, "_input_rows") \\
                else None
            out = strategy.step_forward(wrapped, blocks, x)
            if isinstance(strategy, OverlapsBackward):  # as parallelize's output hook
                out.register_hook(lambda g: strategy.before_backward())
            loss = (out - torch.linspace(-1, 1, out.shape[1])).square().mean()
            loss.backward()
            strategy.after_backward([blocks.state])
            steps.append({"loss": loss.item(), "grads": {
                n: p.grad.reshape(-1).tolist() for n, p in wrapped.named_parameters()
                if p.grad is not None}})
            opt.step()
            opt.zero_grad()
        strategy.close()
        return steps

    session = dglx_dist.init(backend="gloo", device="cpu")
    out = {}
    for lib_name in sys.argv[3].split(","):  # each library's runs in turn, on the same ranks
        lib, out[lib_name] = importlib.import_module(lib_name), {}
        for name, options, kinds in json.loads(sys.argv[4]):
            for kind in kinds:
                pdir = PartitionDir(Path(sys.argv[1]) / name)
                out[lib_name][f"{name}{options}/{kind}"] = train(
                    session, lib, STRATEGIES.build(name, **options), pdir, kind)
    assert ("dgl" in sys.modules) != (sys.argv[5] == "blocked"), "DGL imported (or not)"
    with open(sys.argv[2] + f".{session.rank}", "w") as f:
        json.dump(out, f)
    session.shutdown()
""")

# (strategy, options, models): P3 splits each adapter's first conv (and pipelines one),
# Dorylus runs each stage kind, GraNNDis's halo conv rescales GCN's source degrees
RUNS = [("distdgl", {}, ["sage", "gat"]), ("p3", {}, ["sage", "gcn", "gat"]),
        ("p3", {"pipeline": True}, ["gcn"]), ("granndis", {"co_batches": 2}, ["gcn", "gat"]),
        ("fullgraph", {}, ["sage"]), ("dorylus", {}, ["sage", "gcn", "gat"])]


def _run(parts: Path, libs: list[str], blocked: bool) -> dict[str, list[dict]]:
    """{library: each rank's steps of every run of :data:`RUNS`}, the libraries' runs one
    after another in one job of 2 ranks (the results written to a file: a pipe that fills
    would stall a rank, and with it its peer's collectives)."""
    port, procs, out = free_local_port(), [], f"{parts}.{'+'.join(libs)}.{blocked}"
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
               "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "OMP_NUM_THREADS": "1"}
        code = (_BLOCK if blocked else "") + _RANK
        procs.append(subprocess.Popen(
            [sys.executable, "-c", code, str(parts), out, ",".join(libs), json.dumps(RUNS),
             "blocked" if blocked else "dgl"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True))
    for proc in procs:
        _, stderr = proc.communicate(timeout=400)
        assert proc.returncode == 0, stderr[-3000:]
    ranks = [json.loads(Path(f"{out}.{rank}").read_text()) for rank in range(2)]
    return {lib: [rank[lib] for rank in ranks] for lib in libs}


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    root = tmp_path_factory.mktemp("nn") / "parts"
    ds = tiny_dataset(num_nodes=300, avg_degree=6, feat_dim=12, num_classes=4)
    for name in dict.fromkeys(name for name, _, _ in RUNS):
        spec = STRATEGIES.build(name).partition_spec(Topology(1, 2))
        partition_dataset(ds, root / name, spec.method, spec.num_parts, spec.options)
    return root


def _same(got: list[dict], want: list[dict], what: str) -> None:
    for rank, (mine, theirs) in enumerate(zip(got, want)):
        assert mine.keys() == theirs.keys()
        for run, steps in mine.items():
            assert len(steps) == len(theirs[run]) > 1, (what, run)
            for i, (a, b) in enumerate(zip(steps, theirs[run])):
                where = f"{what}: {run} rank {rank} step {i}"
                assert abs(a["loss"] - b["loss"]) <= 1e-5 * max(1.0, abs(b["loss"])), where
                assert a["grads"].keys() == b["grads"].keys() and a["grads"], where
                for name, grad in a["grads"].items():
                    # (the kernels sum in other orders: float32 rounding, grown by the steps)
                    np.testing.assert_allclose(grad, b["grads"][name], rtol=1e-4, atol=1e-6,
                                               err_msg=f"{where} {name}")


def test_dglx_nn_models_train_through_every_strategy_as_dgl_nn_models(parts):
    """Where DGL is installed, dgl.nn's runs and then dglx_dist.nn's share one job (two jobs
    in all instead of three: the suite's time); each run builds its strategy and model anew."""
    installed = _run(parts, ["dgl.nn", "dglx_dist.nn"], blocked=False)
    stock = installed["dgl.nn"]
    _same(_run(parts, ["dglx_dist.nn"], blocked=True)["dglx_dist.nn"], stock,
          "dglx_dist.nn without DGL")
    _same(installed["dglx_dist.nn"], stock, "dglx_dist.nn with DGL")
