"""Training end to end under torchrun: the example script and `dglx train`."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dglx_dist.cache import entries
from tests.launches import distinct_ports, run_together

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DGLX_")}
    env.update({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "DGLX_TIMEOUT": "120",
                "DGLX_VIRTUAL_SERVERS": "2"}, **extra)
    return env


def _json_lines(stdout):
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _train_job(tmp_path, port, *args, ranks=2) -> dict:
    """``torchrun --nproc-per-node ranks --master-port port -m dglx_dist train ARGS
    --no-progress`` (partitions cached in tmp_path/cache), a job for
    :func:`~tests.launches.run_together`."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
           "--master-port", str(port), "-m", "dglx_dist", "train", *args,
           "--no-progress", "--cache-dir", str(tmp_path / "cache")]
    return {"args": cmd, "cwd": tmp_path, "env": _env(), "timeout": 600}


def _typed_dataset(tmp_path):
    """A directory of dglx datagen --preset mag-small; its papers' majority class share."""
    import numpy as np

    from dglx_dist.data import write_dataset
    from dglx_dist.data.mag import MAG_PRESETS, mag_dataset

    ds = mag_dataset(MAG_PRESETS["mag-small"])
    write_dataset(ds, tmp_path / "mag")
    paper = ds.nodes["paper"]
    return np.bincount(paper.label[paper.test]).max() / paper.test.sum(), int(paper.train.sum())


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The `dglx train` runs below, two at a time (their records do not depend on timing;
    tests/launches.py): {name: (records, its directory)}, once each exited 0."""
    dirs = {name: tmp_path_factory.mktemp(name)
            for name in ("metrics", "granndis", "rgcn", "dorylus", "link")}
    cora = ("--data", "cora")
    jobs = {
        "metrics": ("--strategy", "distdgl", *cora, "--epochs", "3", "--eval-every", "2",
                    "--strategy-opt", "fanouts=5,5", "--device", "cpu", "--backend", "gloo"),
        "granndis": ("--strategy", "granndis", "--model", "gcn", *cora, "--epochs", "200",
                     "--eval-every", "0", "--row-normalize"),
        "rgcn": ("--strategy", "distdgl", "--data", str(dirs["rgcn"] / "mag"), "--epochs", "5",
                 "--strategy-opt", "batch_size=256", "--hidden", "32", "--eval-every", "0",
                 "--fail-on-collapse"),
        "dorylus": ("--strategy", "dorylus", "--model", "gcn", *cora, "--epochs", "40",
                    "--eval-every", "10", "--row-normalize", "--strategy-opt", "staleness=1",
                    "--strategy-opt", "intervals=4"),
        "link": ("--task", "link", "--strategy", "distdgl", "--epochs", "4", "--eval-every",
                 "2", "--hidden", "64", "--dropout", "0", "--weight-decay", "0",
                 "--edge-batch-size", "512", "--device", "cpu", "--eval-pairs", "300",
                 "--strategy-opt", "eval_fanouts=10,10")}
    jobs = {name: _train_job(dirs[name], port, *args, ranks=4 if name == "granndis" else 2)
            for (name, args), port in zip(jobs.items(), distinct_ports(len(jobs)))}
    typed = _typed_dataset(dirs["rgcn"])
    out = {}
    for name, r in zip(jobs, run_together(list(jobs.values()))):
        assert r.returncode == 0, (name, r.stderr[-4000:])
        out[name] = (_json_lines(r.stdout), dirs[name])
    return out, typed


def test_dglx_train_writes_metrics_records(trained):
    records, tmp_path = trained[0]["metrics"]  # the device path given explicitly
    assert [rec["epoch"] for rec in records] == [0, 1, 2]
    for rec in records:
        assert rec["strategy"] == "distdgl" and rec["world_size"] == 2 and rec["servers"] == 2
        assert rec["steps"] == 1 and rec["samples"] == 140
        assert rec["bytes_sent_inter"] > 0 and rec["peak_mem_mb"] > 0
    assert "val_acc" in records[1] and "test_acc" in records[2]
    assert len(entries(tmp_path / "cache")) == 1  # partitioned once, cached


def test_dglx_train_granndis_gcn_on_two_servers(trained):
    """GraNNDis with its defaults (EAS m=1, k=15, R=1) and a GCN on 2 servers x 2 ranks: the
    accuracy of a full-graph GCN, and after the first epoch (the preloading) only gradients
    cross servers."""
    records, _ = trained[0]["granndis"]
    assert len(records) == 200 and records[-1]["test_acc"] >= 0.78, records[-1]
    params = 1433 * 16 + 16 + 16 * 7 + 7  # GCN(1433 -> 16 -> 7)
    # every rank all-reduces its half of the gradients with its peer on the other server
    assert {rec["bytes_sent_inter"] for rec in records} == {4 * 4 * -(-params // 2)}
    assert all(rec["steps"] == 1 and rec["samples"] == 140 for rec in records)


def test_dglx_train_an_rgcn_on_a_typed_dataset(trained):
    """A directory of dglx datagen --preset mag-small: dglx train partitions it with its types
    and trains an R-GCN (learned rows for the featureless types) that beats the majority
    class by far; the run checks itself for collapse on the category's labels."""
    (records, _), (majority, train) = trained[0]["rgcn"], trained[1]
    assert [rec["epoch"] for rec in records] == list(range(5))
    assert records[-1]["loss"] < records[0]["loss"]
    assert records[-1]["test_acc"] > 3 * majority, (records[-1], majority)
    assert all(rec["samples"] == train for rec in records)


def test_dglx_train_dorylus_records_executor_cost(trained):
    """dorylus from the command line, async S=1, local executor: every epoch's record carries
    the executor's invocations, bytes and cost (accuracy is tests/dist/test_dorylus.py's)."""
    records, _ = trained[0]["dorylus"]
    assert [rec["epoch"] for rec in records] == list(range(40))
    assert records[-1]["test_acc"] >= 0.6, records[-1]  # it learns (chance is 0.14-0.3)
    # epochs overlap under S=1, so a record counts what ran since the previous update
    assert sum(rec["invocations"] for rec in records) == 40 * 2 * 4 * 3
    assert sum(rec["bytes_to_executor"] for rec in records) > 0
    for rec in records:
        assert rec["relaunches"] == 0 and rec["cost_usd"] > 0 and rec["value"] > 0
        assert rec["samples"] == 140 and rec["world_size"] == 2
    assert sum("val_acc" in rec for rec in records) == 4


def test_dglx_train_task_link(trained):
    """`dglx train --task link`: the edges split off Cora, learned (loss down, validation MRR
    up, test MRR and AUC far above a random scorer's: MRR about 0.05 against 100 negatives,
    AUC 0.5), and the metrics over both ranks' shares of the held-out edges."""
    records, _ = trained[0]["link"]
    epochs, test = records[:-1], records[-1]
    assert [rec["epoch"] for rec in epochs] == [0, 1, 2, 3]
    assert all(rec["task"] == "link" and rec["world_size"] == 2 for rec in epochs)
    # 85% of Cora's 5278 undirected edges, both directions, 512 per rank per step
    assert {rec["steps"] for rec in epochs} == {9}
    assert epochs[-1]["loss"] < epochs[0]["loss"]
    assert "val_mrr" not in epochs[0] and epochs[3]["val_mrr"] > epochs[1]["val_mrr"]
    assert test["test_mrr"] > 0.15 and test["test_auc"] > 0.75, test
    assert set(test) == {"test_mrr", "test_hits@1", "test_hits@10", "test_hits@50", "test_auc",
                         "test_pairs"}
    assert test["test_pairs"] == 300 and epochs[3]["val_pairs"] == 263  # 5% of 5278, all


def test_dglx_train_task_link_refuses_partitions(tmp_path):
    r = subprocess.run([sys.executable, "-m", "dglx_dist", "train", "--task", "link",
                        "--partitions", str(tmp_path)], cwd=tmp_path, env=_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "--partitions is not supported with --task link" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr


def test_a_run_that_learns_nothing_is_not_a_silent_success(tmp_path):
    """Issue 40, case 9: random features and edges (8 classes) train to chance; `dglx train`
    says so in a warning, and with --fail-on-collapse exits 2 in one line (node and link)."""
    from dglx_dist.data.synthetic import SyntheticConfig, write_synthetic

    write_synthetic(SyntheticConfig(num_nodes=2000, num_edges=20000, homophily=0.125,
                                    feature_noise=1000.0), tmp_path / "R")

    def train(*args):
        return subprocess.run([sys.executable, "-m", "dglx_dist", "train", "--data", "R",
                               "--no-progress", "--cache-dir", "cache", *args], cwd=tmp_path,
                              env=_env(DGLX_VIRTUAL_SERVERS="1"), capture_output=True,
                              text=True, timeout=300)

    r = train("--epochs", "5")
    assert r.returncode == 0 and "WARNING" in r.stderr and "learned nothing" in r.stderr
    r = train("--epochs", "5", "--fail-on-collapse")
    errors = [ln for ln in r.stderr.splitlines() if " ERROR " in ln]
    assert r.returncode == 2 and len(errors) == 1, r.stderr[-3000:]
    assert "LearnedNothingError: after 5 epochs the test accuracy" in errors[0], errors
    r = train("--task", "link", "--epochs", "2", "--train-edges", "2000", "--fail-on-collapse")
    assert r.returncode == 2 and "the test AUC" in r.stderr and "is at chance (0.5)" in \
        r.stderr, r.stderr[-3000:]


def test_dglx_train_strategy_auto_plans_logs_and_trains(tmp_path):
    """--strategy auto on Cora, 2 ranks as 2 virtual servers: rank 0 logs the plan's two
    lines once, and the job trains the strategy they name with the options they name."""
    cmd = _train_job(tmp_path, distinct_ports(1)[0], "--strategy", "auto", "--data", "cora",
                     "--epochs", "2", "--eval-every", "0")
    cmd["env"] = _env(XDG_CACHE_HOME=str(tmp_path / "xdg"))  # no measurement cached here
    (r,) = run_together([cmd], width=1)
    assert r.returncode == 0, r.stderr[-4000:]
    summary = [ln for ln in r.stderr.splitlines() if "dglx_dist.plan: plan: strategy" in ln]
    why = [ln for ln in r.stderr.splitlines() if "is predicted fastest to accuracy" in ln]
    assert len(summary) == 1 and len(why) == 1, r.stderr[-4000:]
    chosen = summary[0].split("strategy '")[1].split("'")[0]
    records = _json_lines(r.stdout)
    assert [rec["epoch"] for rec in records] == [0, 1]
    assert {rec["strategy"] for rec in records} == {chosen}
    assert records[0]["servers"] == 2 and "test_acc" in records[-1]
