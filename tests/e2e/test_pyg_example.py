"""examples/pyg_sage.py (a GraphSAGE of PyG's convs on the package's blocks) under torchrun,
2 ranks, distdgl: it trains with DGL blocked (every process starts with the ``sitecustomize``
of tests/unit/test_import_boundary.py's ``_BLOCK``), and where DGL is installed the same
seed learns the same with DGL importable (``package_blocks=True``: the model gets the
package's blocks either way). The conv's math against dglx_dist.nn's: tests/unit/test_pyg.py."""
import importlib.util
import json
import os
import re
import sys
from pathlib import Path

import pytest

from tests.launches import run_together
from tests.unit.test_import_boundary import _BLOCK

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
HAVE_DGL = importlib.util.find_spec("dgl") is not None
EPOCHS = 6
CORA_CHANCE = 0.319  # the largest class's share of Cora's test nodes


def _job(cwd: Path, block_dir: Path | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DGLX_")}
    env.update({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "DGLX_TIMEOUT": "120"})
    path = [str(block_dir)] if block_dir is not None else []
    env["PYTHONPATH"] = os.pathsep.join(path + [str(ROOT), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", str(ROOT / "examples" / "pyg_sage.py"), "--strategy", "distdgl", "--epochs",
           str(EPOCHS)]
    return {"args": cmd, "cwd": cwd, "env": env, "timeout": 300}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """{blocked: the JSON records the job printed} (both ranks'), once each exited 0."""
    pytest.importorskip("torch_geometric")
    block_dir = tmp_path_factory.mktemp("nodgl")
    (block_dir / "sitecustomize.py").write_text(_BLOCK)
    keys = [True, False] if HAVE_DGL else [True]
    jobs = [_job(tmp_path_factory.mktemp("pyg"), block_dir if blocked else None)
            for blocked in keys]
    out = {}
    for blocked, r in zip(keys, run_together(jobs)):
        assert r.returncode == 0, (blocked, r.stderr[-4000:])
        # the ranks' lines may interleave: each record on its own
        out[blocked] = [json.loads(m) for m in re.findall(r'\{"[^{}]*\}', r.stdout)]
    return out


def test_a_pyg_model_trains_where_dgl_cannot_be_imported(runs):
    records = runs[True]
    loss = {e: [r["loss"] for r in records if r.get("epoch") == e] for e in (0, EPOCHS - 1)}
    assert len(loss[0]) == 2 and sum(loss[EPOCHS - 1]) < 0.8 * sum(loss[0]), loss
    test_acc = [r["test_acc"] for r in records if "test_acc" in r]
    assert len(test_acc) == 2 and min(test_acc) > CORA_CHANCE + 0.15, test_acc


@pytest.mark.skipif(not HAVE_DGL, reason="DGL is not installed")
def test_with_dgl_importable_it_learns_the_same(runs):
    def key(r):
        return json.dumps(r, sort_keys=True)

    assert sorted(runs[False], key=key) == sorted(runs[True], key=key)
