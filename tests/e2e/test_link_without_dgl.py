"""`dglx train --task link` where DGL cannot be imported: every process of the job (the
launcher and both ranks) starts with a ``sitecustomize`` that makes ``import dgl`` fail, and
the run trains and ranks the held-out pairs as the same run with DGL importable does (the
package's edge sampler, negatives and pair graphs; DGL's graphs at the loader's output where
DGL is there), under a sampling strategy and a full-graph one."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.launches import distinct_ports, run_together
from tests.unit.test_import_boundary import _BLOCK

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
STRATEGIES = ("distdgl", "fullgraph")
SAID = "sitecustomize: import dgl is blocked"
ARGS = ("--task", "link", "--data", "cora", "--epochs", "2", "--eval-every", "0", "--hidden",
        "32", "--dropout", "0", "--weight-decay", "0", "--edge-batch-size", "512", "--device",
        "cpu", "--backend", "gloo", "--eval-pairs", "300", "--no-progress")


def _job(tmp: Path, port: int, strategy: str, blocked: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DGLX_")}
    env.update({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "DGLX_TIMEOUT": "120",
                "DGLX_VIRTUAL_SERVERS": "2"})
    path = [str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p]
    if blocked:
        path.insert(0, str(tmp.parent / "block"))
    env["PYTHONPATH"] = os.pathsep.join(path)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-port", str(port), "-m", "dglx_dist", "train", *ARGS, "--strategy",
           strategy, "--cache-dir", str(tmp / "cache")]
    return {"args": cmd, "cwd": tmp, "env": env, "timeout": 600}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """{(strategy, blocked): (records, stderr)} of each run, two at a time (the records are
    seeded, not timed)."""
    root = tmp_path_factory.mktemp("nodgl")
    (root / "block").mkdir()
    (root / "block" / "sitecustomize.py").write_text(
        _BLOCK + textwrap.dedent(f"""
            sys.stderr.write({SAID!r} + "\\n")
        """))
    keys = [(s, blocked) for s in STRATEGIES for blocked in (False, True)]
    jobs = []
    for (strategy, blocked), port in zip(keys, distinct_ports(len(keys))):
        tmp = root / f"{strategy}-{'blocked' if blocked else 'dgl'}"
        tmp.mkdir()
        jobs.append(_job(tmp, port, strategy, blocked))
    out = {}
    for key, r in zip(keys, run_together(jobs)):
        assert r.returncode == 0, (key, r.stderr[-4000:])
        out[key] = ([json.loads(line) for line in r.stdout.splitlines()
                     if line.startswith("{")], r.stderr)
    return out


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_link_prediction_trains_without_dgl_as_with_it(runs, strategy):
    (with_dgl, said_there), (without, said) = runs[strategy, False], runs[strategy, True]
    assert SAID not in said_there
    assert said.count(SAID) >= 3, said[-3000:]  # the launcher and both ranks were blocked
    epochs, test = without[:-1], without[-1]
    assert [rec["epoch"] for rec in epochs] == [0, 1] and epochs[1]["loss"] < epochs[0]["loss"]
    assert [rec["steps"] for rec in epochs] == [rec["steps"] for rec in with_dgl[:-1]]
    assert test["test_pairs"] == with_dgl[-1]["test_pairs"] == 300
    assert test["test_mrr"] > 0.1, test  # a random scorer's: about 0.05 against 100 negatives
    for key in ("test_mrr", "test_auc"):
        assert test[key] == pytest.approx(with_dgl[-1][key], abs=0.03), (key, test,
                                                                          with_dgl[-1])
