"""`dglx train` where DGL cannot be imported (issue 59): every strategy, and an R-GCN on a graph
with types, trains node classification under torchrun in processes in which ``import dgl``
raises, and learns what the same run learns with DGL importable (same seed: the package's
blocks and dglx_dist.nn's convs on one side, DGL's blocks under the same convs on the other).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.launches import run_together
from tests.unit.test_import_boundary import _BLOCK

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]

STRATEGIES = ["distdgl", "p3", "granndis", "dorylus", "fullgraph"]
CORA = ("--epochs", "30", "--eval-every", "0")
CORA_CHANCE = 0.319  # the largest class's share of Cora's test nodes


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
           "--cache-dir", str(tmp_path / "cache")]
    return {"args": cmd, "cwd": tmp_path, "env": _env(block_dir), "timeout": 600}


def _typed_dataset(path: Path) -> float:
    """dglx datagen --preset mag-small at ``path``; its papers' majority class share."""
    from dglx_dist.data import write_dataset
    from dglx_dist.data.mag import MAG_PRESETS, mag_dataset

    ds = mag_dataset(MAG_PRESETS["mag-small"])
    write_dataset(ds, path)
    paper = ds.nodes["paper"]
    return float(np.bincount(paper.label[paper.test]).max() / paper.test.sum())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each run with DGL blocked and with DGL importable, two jobs at a time: {(name,
    blocked): the last epoch's record}, once each exited 0; and the typed graph's chance."""
    block_dir = tmp_path_factory.mktemp("nodgl")
    (block_dir / "sitecustomize.py").write_text(_BLOCK)
    control = subprocess.run([sys.executable, "-c", "import dgl"], env=_env(block_dir),
                             capture_output=True, text=True, timeout=60)
    assert control.returncode != 0 and "(blocked)" in control.stderr  # the block bites
    typed = tmp_path_factory.mktemp("typed")
    chance = _typed_dataset(typed / "mag")
    cases = {name: ("--strategy", name, *CORA) for name in STRATEGIES}
    cases["typed"] = ("--strategy", "distdgl", "--data", str(typed / "mag"), "--epochs", "4",
                      "--strategy-opt", "batch_size=256", "--hidden", "32", "--eval-every", "0")
    keys = [(name, blocked) for name in cases for blocked in (True, False)]
    jobs = [_job(tmp_path_factory.mktemp(f"{name}-{'nodgl' if blocked else 'dgl'}"),
                 block_dir if blocked else None, *cases[name]) for name, blocked in keys]
    out = {}
    for key, r in zip(keys, run_together(jobs)):
        assert r.returncode == 0, (key, r.stderr[-4000:])
        records = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        out[key] = records[-1]
    return out, chance


@pytest.mark.parametrize("name", STRATEGIES + ["typed"])
def test_trains_without_dgl_as_with_it(runs, name):
    """Without DGL the run learns (well above chance) and scores within a point of the same
    run with DGL."""
    records, typed_chance = runs
    without, with_dgl = records[(name, True)], records[(name, False)]
    chance = typed_chance if name == "typed" else CORA_CHANCE
    assert without["test_acc"] > 2 * chance, (without, chance)
    assert abs(without["test_acc"] - with_dgl["test_acc"]) <= 0.01, (without, with_dgl)
