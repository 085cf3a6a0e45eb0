"""examples/pyg_sage.py (a GraphSAGE of PyG's convs on the package's blocks) under torchrun,
2 ranks, distdgl: it trains with DGL blocked (every process starts with the ``sitecustomize``
of tests/unit/test_import_boundary.py's ``_BLOCK``; the model gets the package's blocks
whether or not DGL is importable, so one run covers both). The
conv's math against dglx_dist.nn's: tests/unit/test_pyg.py."""
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
def records(tmp_path_factory) -> list[dict]:
    """The JSON records the job printed (both ranks'), once it exited 0."""
    block_dir = tmp_path_factory.mktemp("nodgl")
    (block_dir / "sitecustomize.py").write_text(_BLOCK)
    (r,) = run_together([_job(tmp_path_factory.mktemp("pyg"), block_dir)])
    assert r.returncode == 0, r.stderr[-4000:]
    # the ranks' lines may interleave: each record on its own
    return [json.loads(m) for m in re.findall(r'\{"[^{}]*\}', r.stdout)]


def test_a_pyg_model_trains_where_dgl_cannot_be_imported(records):
    loss = {e: [r["loss"] for r in records if r.get("epoch") == e] for e in (0, EPOCHS - 1)}
    assert len(loss[0]) == 2 and sum(loss[EPOCHS - 1]) < 0.8 * sum(loss[0]), loss
    test_acc = [r["test_acc"] for r in records if "test_acc" in r]
    assert len(test_acc) == 2 and min(test_acc) > CORA_CHANCE + 0.15, test_acc
