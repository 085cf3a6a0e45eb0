"""The ported examples under torchrun, every registered strategy: each reaches its plain DGL
script's test accuracy within 2 points (same seed, model, optimizer and epochs), and exits 0
without an explicit shutdown call (the session shuts down at exit).

Every script of the module runs in :func:`launched`, two jobs at a time
(tests/launches.py): the plain scripts (one interpreter) and the ports (seeded: their results
do not depend on timing); the tests below check what each printed. The ports of DGL's
DistDGL-API scripts, the typed graph's and the scripts of one behaviour each are
tests/e2e/test_examples_distdgl.py's, with these helpers (two files: each worker of
``make test`` takes one, and neither fixture runs for minutes alone)."""
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dglx_dist.strategies import STRATEGIES
from tests.launches import fresh_ports, run_together

pytestmark = pytest.mark.e2e
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NAMES = ("sage_minibatch.py", "gcn_fullgraph.py", "weighted_sampling.py")
# the same arguments for the plain script and its port (fewer full-graph epochs: time budget)
ARGS = {"sage_minibatch.py": [], "gcn_fullgraph.py": ["--epochs", "100"],
        "weighted_sampling.py": []}
# the mini-batch scripts shuffle with numpy's unseeded generator (DGL's DataLoader), so single
# runs of the plain script spread by about 2 points (sage_minibatch: 0.785 to 0.808), and so
# do a port's single seeds (docs/porting.md: 0.786 to 0.804 at 4 ranks; the medians over
# seeds are within 2 points there); the plain scripts run three times and the suite's single
# port run is held to 2 points under the lowest of them (under their median, a port seed at
# 0.787 failed against runs of 0.79-0.81 in two fresh clones)
RUNS_OF = {"sage_minibatch.py": 3, "weighted_sampling.py": 3}
# every strategy runs the mini-batch example, whose training and validation loaders make
# different numbers of batches, and granndis the full-graph example too (fullgraph's run of it
# left to the matrix for the suite's time: the whole matrix, 2 and 4 ranks, is
# scripts/check_examples.py's; its table is in docs/porting.md)
RUNS = [("sage_minibatch.py", "distdgl", 4), ("sage_minibatch.py", "p3", 4),
        ("sage_minibatch.py", "dorylus", 2), ("sage_minibatch.py", "granndis", 2),
        ("sage_minibatch.py", "fullgraph", 2), ("gcn_fullgraph.py", "granndis", 4),
        ("weighted_sampling.py", "distdgl", 2)]
# the plain link script's batch of 1024 edges, as the global batch: each rank takes its share
LINK_RUNS = [("distdgl", 4)]  # p3's link loaders: tests/dist/test_link.py (suite time)


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DGLX_")}
    env.update({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "DGLX_TIMEOUT": "120"},
               **extra)
    return env


_MARK = "----- next script -----"
# `python SCRIPT ARGS` for each script in turn, in one interpreter: torch and DGL are imported
# once instead of once per script (each script seeds its own RNGs; a script's process group,
# DGL's standalone one, is closed before the next script starts its own)
_RUNNER = """
import runpy, sys
import torch.distributed as dist
for path, args in RUNS:
    print(MARK, flush=True)
    sys.argv, sys.path[0] = [path, *args], path.rpartition("/")[0]
    runpy.run_path(path, run_name="__main__")
    if dist.is_initialized():
        dist.destroy_process_group()
"""


def _plain(runs: list[tuple[str, list[str]]], cwd: Path) -> dict:
    """The plain DGL scripts ``runs`` ((file under examples/dgl, arguments)) one after another
    in one process, as a job (:func:`_outs` splits its stdout)."""
    runs = [(str(EXAMPLES / "dgl" / name), args) for name, args in runs]
    return {"args": [sys.executable, "-c", f"RUNS = {runs!r}\nMARK = {_MARK!r}\n" + _RUNNER],
            "cwd": cwd, "env": _env(), "timeout": 900}


def _outs(r) -> list[str]:
    """Each script's stdout of a :func:`_plain` job, once it exited 0."""
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split(_MARK + "\n")[1:]


def _torchrun(ranks: int, args: list[str], cwd: Path, port: int, **env) -> dict:
    return {"args": [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                     str(ranks), "--master-port", str(port), *args],
            "cwd": cwd, "env": _env(**env), "timeout": 600}


def _jobs(root: Path, ports: Iterator[int]) -> dict:
    """The plain scripts (one interpreter) and their ports."""
    plain = [(name, ARGS[name]) for name in NAMES for _ in range(RUNS_OF.get(name, 1))] + \
        [("link_prediction.py", [])]
    jobs = {"plain": _plain(plain, root)}
    runs = [(name, strategy, ranks, ARGS[name]) for name, strategy, ranks in RUNS] + \
        [("link_prediction.py", strategy, ranks, ["--batch-size", str(1024 // ranks)])
         for strategy, ranks in LINK_RUNS]
    for name, strategy, ranks, args in runs:
        jobs[name, strategy, ranks] = _torchrun(
            ranks, [str(EXAMPLES / name), "--strategy", strategy, *args], _fresh(root, "port"),
            next(ports), **({"DGLX_VIRTUAL_SERVERS": "2"} if ranks == 4 else {}))
    return jobs


def _fresh(root: Path, name: str) -> Path:
    """A new directory under ``root`` (each run's partition cache its own)."""
    for i in range(10_000):
        if not (path := root / f"{name}{i}").exists():
            path.mkdir()
            return path
    raise AssertionError(root)


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> dict:
    """Every run of the module, by name: the plain scripts' stdouts (a list) and the ports'
    completed processes."""
    root = tmp_path_factory.mktemp("examples")
    jobs = _jobs(root, fresh_ports())
    done = dict(zip(jobs, run_together(list(jobs.values()))))
    return {"plain": _outs(done.pop("plain")), **done}


def _test_acc(stdout: str) -> float:
    """The last test accuracy printed (every rank prints; their lines may interleave)."""
    found = re.findall(r'\{"test_acc": [0-9.]+\}', stdout)
    assert found, stdout[-2000:]
    return json.loads(found[-1])["test_acc"]


def _mean_acc(stdout: str) -> float:
    """Every rank's accuracy on its share of the test nodes, weighted by the share."""
    found = [json.loads(m) for m in re.findall(r'\{"test_acc": [0-9.]+, "test_nodes": \d+\}',
                                                stdout)]
    assert found, stdout[-2000:]
    return sum(f["test_acc"] * f["test_nodes"] for f in found) / sum(f["test_nodes"]
                                                                    for f in found)


def _ranking(stdout: str) -> dict:
    """The last test metrics the link-prediction script printed."""
    found = re.findall(r'\{"test_mrr": [^}]*\}', stdout)  # ranks' lines may run together
    assert found, stdout[-2000:]
    return json.loads(found[-1])


def _ok(r) -> str:
    assert r.returncode == 0, r.stderr[-4000:]
    return r.stdout


@pytest.fixture(scope="module")
def plain_outs(launched):
    """The stdouts of each plain DGL script the ports are compared with, by script: the node
    classification scripts (``RUNS_OF``) and the link prediction one."""
    runs = [name for name in NAMES for _ in range(RUNS_OF.get(name, 1))] + \
        ["link_prediction.py"]
    by_name: dict[str, list[str]] = {}
    for name, out in zip(runs, launched["plain"]):
        by_name.setdefault(name, []).append(out)
    return by_name


@pytest.fixture(scope="module")
def plain_acc(plain_outs):
    """Each plain DGL node classification script's test accuracy (the lowest of its runs:
    see ``RUNS_OF``)."""
    return {name: min(_test_acc(out) for out in plain_outs[name])
            for name in NAMES}


def test_runs_cover_every_strategy():
    """Every strategy the package ships (plug-ins from elsewhere, such as the tests', are not
    ported here); the typed example's run is tests/e2e/test_examples_distdgl.py's."""
    shipped = {n for n in STRATEGIES.names()
               if STRATEGIES.get(n).__module__.startswith("dglx_dist.")}
    assert {s for _, s, _ in RUNS} == shipped


@pytest.mark.parametrize("name,strategy,ranks", RUNS)
def test_port_reaches_plain_accuracy(launched, plain_acc, name, strategy, ranks):
    """4 ranks run as 2 virtual servers."""
    acc = _test_acc(_ok(launched[name, strategy, ranks]))
    assert acc >= plain_acc[name] - 0.02, (name, strategy, acc, plain_acc[name])


@pytest.mark.parametrize("strategy,ranks", LINK_RUNS)
def test_link_port_reaches_plain_ranking(launched, plain_outs, strategy, ranks):
    """Link prediction (examples/link_prediction.py): MRR and AUC of the held-out edges within
    2 points of the plain DGL script's on the same split. (Both scripts seed numpy too: DGL's
    DataLoader shuffles with numpy's generator, and unseeded the plain script's test MRR
    ranged over 0.366-0.419 between runs.)"""
    plain = _ranking(plain_outs["link_prediction.py"][0])
    got = _ranking(_ok(launched["link_prediction.py", strategy, ranks]))
    for key in ("test_mrr", "test_auc"):
        assert got[key] >= plain[key] - 0.02, (strategy, key, got, plain)
