"""``dglx bench`` end to end: the tiny preset restricted to two systems, on virtual servers."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def test_bench_tiny_two_systems(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DGLX_")}
    path = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)  # this tree's
    env.update({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "PYTHONPATH": path})
    cmd = [sys.executable, "-m", "dglx_dist", "bench", "--preset", "tiny", "--systems",
           "dgl,distdgl", "--network", "virtual", "--epochs", "2", "--timeout", "120",
           "--out", str(out)]
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    by = {row["system"]: row for row in rows}
    assert set(by) == {"dgl", "distdgl"} and not any("error" in row for row in rows)
    assert by["distdgl"]["network"] == "virtual" and by["distdgl"]["strategy"] == "distdgl"
    assert by["distdgl"]["bytes_inter"] > 0  # two servers: features and gradients cross
    assert by["dgl"]["bytes_inter"] == 0
    for row in rows:
        assert row["epoch_time"] > 0 and row["peak_mem_mb"] > 0 and row["epochs"] == 2
        assert len(row["val_acc_per_epoch"]) == 2 and row["target_acc"] > 0
        # 16 classes: well above chance after two epochs of this easy graph, and at most 1
        assert 0.3 <= row["val_acc"] <= 1 and 0.3 <= row["test_acc"] <= 1, row
    assert (out / "bench.png").stat().st_size > 10_000
    assert "| distdgl | virtual |" in (out / "results.md").read_text()
    assert "| distdgl | virtual |" in r.stdout
