"""``benchmarks.ours_profile`` (``python -m benchmarks.bench_train --profile``'s instrumented
trainer) under torchrun on Cora in 2 parts: it runs to its end and prints the epoch's phases,
each timed, with the cProfile top of rank 0. It wraps the package's methods by name, so a
rename in the package breaks it at start; nothing else runs it."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dglx_dist.bench.dgl_distdgl_worker import PHASES
from dglx_dist.data import builtin_path
from dglx_dist.partition import partition_dataset

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def test_the_instrumented_trainer_times_every_phase(tmp_path):
    parts = tmp_path / "cora-metis-2"
    partition_dataset(builtin_path("cora"), parts, "metis", 2)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DGLX_", "RANK", "WORLD", "LOCAL_", "MASTER_", "TORCHELASTIC"))}
    path = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)  # this tree's
    env.update({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "PYTHONPATH": path,
                "DGLX_VIRTUAL_SERVERS": "2", "DGLX_TIMEOUT": "60"})
    stats = tmp_path / "ours.pstats"
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node", "2", "-m", "benchmarks.ours_profile",
                        "--partitions", str(parts), "--cprofile", str(stats), "--epochs", "2",
                        "--batch-size", "64", "--fanouts", "5,5", "--hidden", "8"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(next(line for line in r.stdout.splitlines() if line.startswith("{")))
    phases = out["phases"]
    assert set(PHASES) <= set(phases) and phases["input_rows"] > 0, phases
    for phase in ("sample", "pull", "forward", "backward+allreduce", "optimizer"):
        assert phases[phase] > 0, (phase, phases)
    # the timed phases are parts of the epoch (each the largest over the ranks)
    assert 0 < out["epoch_time"] and phases["sample"] + phases["forward"] < out["epoch_time"]
    assert stats.stat().st_size > 0 and out["cprofile_top"], out.get("cprofile_top")
