"""The console of ``dglx train`` under torchrun, 2 ranks (issue 80, item 2): at the default
verbosity a few lines from rank 0, each warning once and no Python dict; with ``-v`` every
rank's detail, each epoch's record as ``key=value`` text; the records as JSON lines on a
stdout that is not a terminal and in ``--metrics-out``. (The bar over epochs is shown on a
terminal only: tests/unit/test_console.py.)"""
import json
import os
import subprocess
import sys

import pytest

from dglx_dist.runtime.env import free_local_port

pytestmark = pytest.mark.e2e
SCREEN = 24  # lines


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``{"default" | "verbose": (tmp_path, CompletedProcess)}``: 2 epochs on Cora, too few
    to learn (so the at-chance warning is said), both launched at once."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DGLX_")}
    env.update({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "DGLX_VIRTUAL_SERVERS": "2"})
    started = {}
    for name, flags in (("default", []), ("verbose", ["-v"])):
        tmp_path = tmp_path_factory.mktemp(name)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--master-port", str(free_local_port()), "-m", "dglx_dist", "train",
               "--data", "cora", "--epochs", "2", "--cache-dir", str(tmp_path / "cache"),
               "--metrics-out", str(tmp_path / "m.jsonl"), *flags]
        started[name] = tmp_path, subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                                   stderr=subprocess.PIPE, text=True)
    out = {}
    for name, (tmp_path, proc) in started.items():
        stdout, stderr = proc.communicate(timeout=300)
        out[name] = tmp_path, subprocess.CompletedProcess(proc.args, proc.returncode, stdout,
                                                          stderr)
    return out


def test_the_default_console_fits_on_a_screen_and_says_each_warning_once(runs):
    tmp_path, r = runs["default"]
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stderr.splitlines()
    assert len(lines) <= SCREEN and not [ln for ln in lines if "{'" in ln], r.stderr
    assert sum("is at chance" in ln for ln in lines) == 1, r.stderr  # not once a rank
    assert "%|" not in r.stderr  # no bar where stderr is not a terminal
    records = [json.loads(line) for line in r.stdout.splitlines()]  # stdout: JSON lines
    assert [rec["epoch"] for rec in records] == [0, 1] and "test_acc" in records[-1]
    written = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert written == records


def test_verbose_brings_back_every_ranks_detail(runs):
    _, r = runs["verbose"]
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stderr.splitlines()
    assert not [ln for ln in lines if "{'" in ln], r.stderr[-3000:]
    assert [ln for ln in lines if "[rank 1]" in ln] and [ln for ln in lines if "[rank 0]" in ln]
    epochs = [ln for ln in lines if "dglx_dist.trainer: epoch " in ln]
    assert len(epochs) == 2 and "epoch 1: epoch=1 strategy=distdgl " in epochs[1], epochs
    assert "loss=" in epochs[1] and "phases_max.forward=" in epochs[1]
