"""Training end to end under torchrun: the example script and `dglx train`."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dglx_dist.runtime.env import free_local_port

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DGLX_")}
    env.update({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "DGLX_TIMEOUT": "120",
                "DGLX_VIRTUAL_SERVERS": "2"}, **extra)
    return env


def _json_lines(stdout):
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_dglx_train_writes_metrics_records(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-port", str(free_local_port()), "-m", "dglx_dist", "train", "--strategy", "distdgl",
           "--data", "cora", "--epochs", "3", "--eval-every", "2", "--no-progress",
           "--strategy-opt", "fanouts=5,5", "--cache-dir", str(tmp_path / "cache")]
    r = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    records = _json_lines(r.stdout)
    assert [rec["epoch"] for rec in records] == [0, 1, 2]
    for rec in records:
        assert rec["strategy"] == "distdgl" and rec["world_size"] == 2 and rec["servers"] == 2
        assert rec["steps"] == 1 and rec["samples"] == 140
        assert rec["bytes_sent_inter"] > 0 and rec["peak_mem_mb"] > 0
    assert "val_acc" in records[1] and "test_acc" in records[2]
    assert len(list((tmp_path / "cache").iterdir())) == 1  # partitioned once, cached


def test_dglx_train_granndis_gcn_on_two_servers(tmp_path):
    """GraNNDis with its defaults (EAS m=1, k=15, R=1) and a GCN on 2 servers x 2 ranks: the
    accuracy of a full-graph GCN, and after the first epoch (the preloading) only gradients
    cross servers."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
           "--master-port", str(free_local_port()), "-m", "dglx_dist", "train",
           "--strategy", "granndis", "--model", "gcn", "--data", "cora", "--epochs", "200",
           "--eval-every", "0", "--no-progress", "--row-normalize",
           "--cache-dir", str(tmp_path / "cache")]
    r = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    records = _json_lines(r.stdout)
    assert len(records) == 200 and records[-1]["test_acc"] >= 0.78, records[-1]
    params = 1433 * 16 + 16 + 16 * 7 + 7  # GCN(1433 -> 16 -> 7)
    # every rank all-reduces its half of the gradients with its peer on the other server
    assert {rec["bytes_sent_inter"] for rec in records} == {4 * 4 * -(-params // 2)}
    assert all(rec["steps"] == 1 and rec["samples"] == 140 for rec in records)


def test_dglx_train_dorylus_records_executor_cost(tmp_path):
    """dorylus from the command line, async S=1, local executor: every epoch's record carries
    the executor's invocations, bytes and cost (accuracy is tests/dist/test_dorylus.py's)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-port", str(free_local_port()), "-m", "dglx_dist", "train",
           "--strategy", "dorylus", "--model", "gcn", "--data", "cora", "--epochs", "40",
           "--eval-every", "10", "--no-progress", "--row-normalize",
           "--strategy-opt", "staleness=1", "--strategy-opt", "intervals=4",
           "--cache-dir", str(tmp_path / "cache")]
    r = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    records = _json_lines(r.stdout)
    assert [rec["epoch"] for rec in records] == list(range(40))
    assert records[-1]["test_acc"] >= 0.6, records[-1]  # it learns (chance is 0.14-0.3)
    # epochs overlap under S=1, so a record counts what ran since the previous update
    assert sum(rec["invocations"] for rec in records) == 40 * 2 * 4 * 3
    assert sum(rec["bytes_to_executor"] for rec in records) > 0
    for rec in records:
        assert rec["relaunches"] == 0 and rec["cost_usd"] > 0 and rec["value"] > 0
        assert rec["samples"] == 140 and rec["world_size"] == 2
    assert sum("val_acc" in rec for rec in records) == 4
