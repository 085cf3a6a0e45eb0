"""`dglx train` where DGL cannot be imported (issue 59): every process of each job (the
launcher and both ranks) starts with a ``sitecustomize`` that makes ``import dgl`` fail, and
every strategy trains node classification on Cora, an R-GCN trains on a graph with types, and
link prediction trains under a sampling strategy and a full-graph one.

Where DGL is installed, distdgl's job runs again with DGL importable (same seed: DGL's blocks
under the same dglx_dist.nn convs) and the test marked ``dgl`` checks that both learn the
same. The other cases are compared elsewhere: each strategy's steps give what dgl.nn's convs
give on DGL's blocks, step by step (tests/dist/test_nn_strategies.py), and every strategy
side by side at 2 and 4 ranks, typed too, is docs/install.md's table
(scripts/dgl_free_table.py). ``make test-core`` (no DGL) runs the blocked jobs alone.
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from dglx_dist.testing.nodgl import blocking_path
from tests.launches import run_together

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
HAVE_DGL = importlib.util.find_spec("dgl") is not None

STRATEGIES = ["distdgl", "p3", "granndis", "dorylus", "fullgraph"]
CORA = ("--epochs", "30", "--eval-every", "0")
CORA_CHANCE = 0.319  # the largest class's share of Cora's test nodes
LINK = ("--task", "link", "--data", "cora", "--epochs", "2", "--eval-every", "0", "--hidden",
        "32", "--dropout", "0", "--weight-decay", "0", "--edge-batch-size", "512",
        "--eval-pairs", "300")
LINK_STRATEGIES = ["distdgl", "fullgraph"]
SAID = "sitecustomize: import dgl is blocked"
NODE_CASES = STRATEGIES + ["typed"]
LINK_CASES = [f"link-{s}" for s in LINK_STRATEGIES]
COMPARED = ["distdgl"]  # run with DGL importable too, where it is


def _env(block_dir: Path | None) -> dict:
    """The job's environment; with ``block_dir`` (a sitecustomize.py that blocks DGL) first on
    the path of every process it starts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DGLX_")}
    env.update({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "DGLX_TIMEOUT": "120",
                "DGLX_VIRTUAL_SERVERS": "2"})
    path = [str(block_dir)] if block_dir is not None else []
    env["PYTHONPATH"] = os.pathsep.join(path + [str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _job(tmp_path: Path, block_dir: Path | None, *args: str) -> dict:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", "-m", "dglx_dist", "train", *args, "--no-progress", "--device", "cpu",
           "--backend", "gloo", "--cache-dir", str(tmp_path / "cache")]
    return {"args": cmd, "cwd": tmp_path, "env": _env(block_dir), "timeout": 600}


def _typed_dataset(path: Path) -> float:
    """dglx datagen --preset mag-small at ``path``; its papers' majority class share."""
    from dglx_dist.data import write_dataset
    from dglx_dist.data.mag import MAG_PRESETS, mag_dataset

    ds = mag_dataset(MAG_PRESETS["mag-small"])
    write_dataset(ds, path)
    paper = ds.nodes["paper"]
    return float(np.bincount(paper.label[paper.test]).max() / paper.test.sum())


def _cases(typed: Path) -> dict[str, tuple[str, ...]]:
    cases = {name: ("--strategy", name, *CORA) for name in STRATEGIES}
    cases["typed"] = ("--strategy", "distdgl", "--data", str(typed), "--epochs", "3",
                      "--strategy-opt", "batch_size=256", "--hidden", "32", "--eval-every", "0")
    cases.update({f"link-{s}": ("--strategy", s, *LINK) for s in LINK_STRATEGIES})
    return cases


@pytest.fixture(scope="module")
def block_dir(tmp_path_factory) -> Path:
    """A folder whose sitecustomize.py blocks DGL and says so on stderr."""
    return blocking_path(tmp_path_factory.mktemp("nodgl"), textwrap.dedent(f"""
        sys.stderr.write({SAID!r} + "\\n")
    """))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, block_dir):
    """Each case with DGL blocked (and, where DGL is installed, importable), two jobs at a
    time: {(case, blocked): (records, stderr)}, once each exited 0; and the typed graph's
    chance."""
    typed = tmp_path_factory.mktemp("typed")
    chance = _typed_dataset(typed / "mag")
    cases = _cases(typed / "mag")
    keys = [(name, blocked) for name in cases for blocked in (True, False)
            if blocked or HAVE_DGL and name in COMPARED]
    jobs = [_job(tmp_path_factory.mktemp(f"{name}-{'nodgl' if blocked else 'dgl'}"),
                 block_dir if blocked else None, *cases[name]) for name, blocked in keys]
    out = {}
    for key, r in zip(keys, run_together(jobs)):
        assert r.returncode == 0, (key, r.stderr[-4000:])
        out[key] = ([json.loads(line) for line in r.stdout.splitlines()
                     if line.startswith("{")], r.stderr)
    return out, chance


@pytest.mark.parametrize("name", NODE_CASES + LINK_CASES)
def test_trains_where_dgl_cannot_be_imported(runs, name):
    """The block bit in the launcher and both ranks, and the run learned: test accuracy well
    above chance, or a falling loss and a test MRR above a random scorer's."""
    records, typed_chance = runs
    (rows, said) = records[(name, True)]
    assert said.count(SAID) >= 3, said[-3000:]
    if name in LINK_CASES:
        epochs, test = rows[:-1], rows[-1]
        assert [r["epoch"] for r in epochs] == [0, 1] and epochs[1]["loss"] < epochs[0]["loss"]
        assert test["test_pairs"] == 300
        assert test["test_mrr"] > 0.1, test  # a random scorer's: about 0.05 (100 negatives)
        return
    chance = typed_chance if name == "typed" else CORA_CHANCE
    assert rows[-1]["test_acc"] > 2 * chance, (rows[-1], chance)


@pytest.mark.dgl
@pytest.mark.parametrize("name", COMPARED)
def test_learns_what_the_same_run_learns_with_dgl(runs, name):
    """Without DGL the run scores within a point of the same run with DGL (node accuracy), or
    within 3 points of MRR and AUC after the same steps (link)."""
    records, _ = runs
    (without, _), (with_dgl, said_there) = records[(name, True)], records[(name, False)]
    assert SAID not in said_there
    if name in LINK_CASES:
        assert [r["steps"] for r in without[:-1]] == [r["steps"] for r in with_dgl[:-1]]
        for key in ("test_mrr", "test_auc"):
            assert without[-1][key] == pytest.approx(with_dgl[-1][key], abs=0.03), key
        return
    assert abs(without[-1]["test_acc"] - with_dgl[-1]["test_acc"]) <= 0.01, (without[-1],
                                                                               with_dgl[-1])


def _records(r: subprocess.CompletedProcess) -> list[dict]:
    assert r.returncode == 0, r.stderr[-4000:]
    assert r.stderr.count(SAID) >= 3, r.stderr[-3000:]
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def test_resumes_from_its_checkpoints_where_dgl_cannot_be_imported(tmp_path, block_dir):
    """With DGL blocked, under distdgl and granndis: 4 epochs with a checkpoint every 2; with
    the last one removed, ``--resume`` goes on from epoch 2 with the uninterrupted job's
    losses (each strategy's two jobs run one after the other, the strategies side by side)."""
    strategies = ["distdgl", "granndis"]

    def jobs(*extra: str) -> list[dict]:
        return [_job(tmp_path / s, block_dir, "--strategy", s, "--eval-every", "0",
                     "--epochs", "4", "--checkpoint-every", "2", "--checkpoint-dir",
                     str(tmp_path / s / "ckpt"), *extra) for s in strategies]

    for s in strategies:
        (tmp_path / s).mkdir()
    whole = [[r for r in _records(p) if "loss" in r] for p in run_together(jobs())]
    for s in strategies:
        shutil.rmtree(tmp_path / s / "ckpt" / "epoch-000004")
    for s, want, proc in zip(strategies, whole, run_together(jobs("--resume"))):
        got = [r for r in _records(proc) if "loss" in r]
        assert f"resumed from {tmp_path / s / 'ckpt' / 'epoch-000002'}" in proc.stderr
        assert [r["epoch"] for r in got] == [2, 3] and [r["epoch"] for r in want] == [0, 1, 2, 3]
        assert [r["loss"] for r in got] == pytest.approx([r["loss"] for r in want[2:]],
                                                         abs=2e-5), s
