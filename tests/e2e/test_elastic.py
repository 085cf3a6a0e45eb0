"""A rank killed mid-training under torchrun --max-restarts: the job restarts, resumes from its
newest checkpoint and ends with the fault-free run's model (benchmarks/chaos.py's one-run mode);
the CLI refuses to start a fresh run into a directory holding another run's checkpoints."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dglx_dist.testing.procs import live_children

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def _env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DGLX_", "RANK", "WORLD"))}
    env.update({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"})
    return env


def test_killed_rank_resumes_to_the_same_model(tmp_path):
    r = subprocess.run([sys.executable, "-m", "benchmarks.chaos", "--runs", "1",
                        "--epochs", "8", "--kill-after-checkpoint", "2", "--workdir",
                        str(tmp_path)], capture_output=True, text=True, timeout=300, env=_env(),
                       cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    report = json.loads(next(line for line in r.stdout.splitlines() if line.startswith("{")))
    summary, run = report["summary"], report["rows"][1]
    assert summary["completed"] == 1 and summary["differing_models"] == 0
    assert run["victim"].startswith("rank ") and run["resumed"] and run["model_equal"]
    log = (tmp_path / "run-1.log").read_text()
    assert "resumed from" in log and "epoch-00000" in log
    assert live_children() == []

    # a fresh run (no --resume, not restarted) into that directory is refused up front
    fresh = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                            "--nproc-per-node", "2", "-m", "dglx_dist", "train", "--data", "cora",
                            "--epochs", "1", "--no-progress", "--cache-dir", str(tmp_path / "parts"),
                            "--checkpoint-dir", str(tmp_path / "ckpt-1")],
                           capture_output=True, text=True, timeout=240, env=_env())
    assert fresh.returncode != 0
    assert "holds checkpoints of an earlier run (up to epoch 8)" in fresh.stderr
