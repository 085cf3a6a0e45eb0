"""The ported examples under torchrun, every registered strategy: each reaches its plain DGL
script's test accuracy within 2 points (same seed, model, optimizer and epochs), and exits 0
without an explicit shutdown call (the session shuts down at exit)."""
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from dglx_dist.runtime.env import free_local_port
from dglx_dist.strategies import STRATEGIES
from tests.launches import distinct_ports, run_together

pytestmark = pytest.mark.e2e
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NAMES = ("sage_minibatch.py", "gcn_fullgraph.py", "weighted_sampling.py")
# the same arguments for the plain script and its port (fewer full-graph epochs: time budget)
ARGS = {"sage_minibatch.py": [], "gcn_fullgraph.py": ["--epochs", "100"],
        "weighted_sampling.py": []}


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DGLX_")}
    env.update({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "DGLX_TIMEOUT": "120"},
               **extra)
    return env


def _test_acc(stdout: str) -> float:
    """The last test accuracy printed (every rank prints; their lines may interleave)."""
    found = re.findall(r'\{"test_acc": [0-9.]+\}', stdout)
    assert found, stdout[-2000:]
    return json.loads(found[-1])["test_acc"]


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


def _run_plain(runs: list[tuple[str, list[str]]], cwd: Path, timeout: float) -> list[str]:
    """Runs the plain DGL scripts ``runs`` ((file under examples/dgl, arguments), one after
    another in one process); returns each one's stdout."""
    runs = [(str(EXAMPLES / "dgl" / name), args) for name, args in runs]
    r = subprocess.run([sys.executable, "-c", f"RUNS = {runs!r}\nMARK = {_MARK!r}\n" + _RUNNER],
                       env=_env(), cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split(_MARK + "\n")[1:]


# the mini-batch scripts shuffle with numpy's unseeded generator (DGL's DataLoader), so one
# run of the same seed spreads by a few points (sage_minibatch: 0.79 to 0.81); they run three
# times and the ports are held to the median (docs/porting.md: medians of three seeds)
RUNS_OF = {"sage_minibatch.py": 3, "weighted_sampling.py": 3}


@pytest.fixture(scope="module")
def plain_outs(tmp_path_factory):
    """The stdouts of each plain DGL script the ports are compared with: the node
    classification scripts (``RUNS_OF``) and the link prediction one (all in one process)."""
    runs = [(name, ARGS[name]) for name in NAMES for _ in range(RUNS_OF.get(name, 1))] + \
        [("link_prediction.py", [])]
    outs = _run_plain(runs, tmp_path_factory.mktemp("plain"), timeout=900)
    by_name: dict[str, list[str]] = {}
    for (name, _), out in zip(runs, outs):
        by_name.setdefault(name, []).append(out)
    return by_name


@pytest.fixture(scope="module")
def plain_acc(plain_outs):
    """Each plain DGL node classification script's test accuracy (the median of its runs)."""
    return {name: statistics.median(_test_acc(out) for out in plain_outs[name])
            for name in NAMES}


# every strategy runs one of the two examples here (the whole matrix, 2 and 4 ranks, is
# scripts/check_examples.py's; its table is in docs/porting.md): the suite's time budget
RUNS = [("sage_minibatch.py", "distdgl", 4), ("sage_minibatch.py", "p3", 4),
        ("sage_minibatch.py", "dorylus", 2), ("gcn_fullgraph.py", "granndis", 4),
        ("gcn_fullgraph.py", "fullgraph", 4), ("weighted_sampling.py", "distdgl", 2)]


def test_runs_cover_every_strategy():
    """Every strategy the package ships (plug-ins from elsewhere, such as the tests', are not
    ported here); the typed example's run is below."""
    shipped = {n for n in STRATEGIES.names()
               if STRATEGIES.get(n).__module__.startswith("dglx_dist.")}
    assert {s for _, s, _ in RUNS} == shipped


# the plain link script's batch of 1024 edges, as the global batch: each rank takes its share
LINK_RUNS = [("distdgl", 4), ("p3", 2)]


@pytest.fixture(scope="module")
def port_outs(tmp_path_factory):
    """Each port's run under torchrun (``RUNS``, then ``LINK_RUNS``), two at a time (they are
    seeded: their results do not depend on timing; tests/launches.py); 4 ranks run as 2
    virtual servers."""
    specs = [(name, strategy, ranks, ARGS[name]) for name, strategy, ranks in RUNS] + \
        [("link_prediction.py", strategy, ranks, ["--batch-size", str(1024 // ranks)])
         for strategy, ranks in LINK_RUNS]
    jobs = []
    for (name, strategy, ranks, args), port in zip(specs, distinct_ports(len(specs))):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
               "--master-port", str(port), str(EXAMPLES / name), "--strategy", strategy, *args]
        env = _env(**({"DGLX_VIRTUAL_SERVERS": "2"} if ranks == 4 else {}))
        jobs.append({"args": cmd, "cwd": tmp_path_factory.mktemp("port"), "env": env,
                     "timeout": 600})
    return dict(zip([spec[:3] for spec in specs], run_together(jobs)))


@pytest.mark.parametrize("name,strategy,ranks", RUNS)
def test_port_reaches_plain_accuracy(port_outs, plain_acc, name, strategy, ranks):
    r = port_outs[name, strategy, ranks]
    assert r.returncode == 0, r.stderr[-4000:]
    acc = _test_acc(r.stdout)
    assert acc >= plain_acc[name] - 0.02, (name, strategy, acc, plain_acc[name])


def test_plain_rgcn_on_a_typed_graph_learns(tmp_path):
    """examples/dgl/rgcn_hetero.py on mag-small for 3 epochs: test accuracy far above chance
    (the largest class's share, 0.07; measured 0.38 after 3 epochs, 0.62-0.68 after the
    default 20; features alone give 0.24-0.28)."""
    r = subprocess.run([sys.executable, str(EXAMPLES / "dgl" / "rgcn_hetero.py"), "--epochs", "3"],
                       env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _test_acc(r.stdout) > 0.25, r.stdout[-2000:]


def test_rgcn_port_learns_the_typed_graph_under_distdgl(tmp_path):
    """examples/rgcn_hetero.py at 2 ranks, 5 epochs: far above what features alone give
    (measured 0.51; the plain script 0.56 after 5 epochs). The medians over 3 seeds at the
    default 20 epochs, within 2 points of the plain script's, are scripts/check_examples.py's
    (docs/porting.md): single runs on mag-small's 164 test papers spread by 6 points."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-port", str(free_local_port()), str(EXAMPLES / "rgcn_hetero.py"),
           "--epochs", "5"]
    r = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    assert _test_acc(r.stdout) > 0.4, r.stdout[-2000:]


def _ranking(stdout: str) -> dict:
    """The last test metrics the link-prediction script printed."""
    found = re.findall(r"\{\"test_mrr\": [^}]*\}", stdout)  # ranks may share a line
    assert found, stdout[-2000:]
    return json.loads(found[-1])


@pytest.fixture(scope="module")
def plain_link(plain_outs):
    """The plain DGL link prediction script's test metrics."""
    return _ranking(plain_outs["link_prediction.py"][0])


@pytest.mark.parametrize("strategy,ranks", LINK_RUNS)
def test_link_port_reaches_plain_ranking(port_outs, plain_link, strategy, ranks):
    """Link prediction (examples/link_prediction.py): MRR and AUC of the held-out edges within
    2 points of the plain DGL script's on the same split. (Both scripts seed numpy too: DGL's
    DataLoader shuffles with numpy's generator, and unseeded the plain script's test MRR
    ranged over 0.366-0.419 between runs.)"""
    r = port_outs["link_prediction.py", strategy, ranks]
    assert r.returncode == 0, r.stderr[-4000:]
    got = _ranking(r.stdout)
    for key in ("test_mrr", "test_auc"):
        assert got[key] >= plain_link[key] - 0.02, (strategy, key, got, plain_link)


def _mean_acc(stdout: str) -> float:
    """Every rank's accuracy on its share of the test nodes, weighted by the share."""
    found = [json.loads(m) for m in re.findall(r'\{"test_acc": [0-9.]+, "test_nodes": \d+\}',
                                                stdout)]
    assert found, stdout[-2000:]
    return sum(f["test_acc"] * f["test_nodes"] for f in found) / sum(f["test_nodes"]
                                                                    for f in found)


def test_distdgl_script_runs_with_its_import_changed(tmp_path):
    """DGL's DistDGL API: the plain script in DGL's standalone mode on one partition, the
    port under torchrun on DGL's two partitions (2 virtual servers), imported, no ip_config."""
    plain_args = ["--part-config", str(tmp_path / "p1" / "cora.json"), "--standalone"]
    *_, plain = _run_plain([("partition_cora.py", [str(tmp_path / "p1"), "--parts", "1"]),
                            ("partition_cora.py", [str(tmp_path / "p2"), "--parts", "2"]),
                            ("distdgl_sage.py", plain_args)], tmp_path, timeout=700)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-port", str(free_local_port()), str(EXAMPLES / "distdgl_sage.py"),
           "--part-config", str(tmp_path / "p2" / "cora.json")]
    port = subprocess.run(cmd, cwd=tmp_path, env=_env(DGLX_VIRTUAL_SERVERS="2"),
                          capture_output=True, text=True, timeout=400)
    assert port.returncode == 0, port.stderr[-4000:]
    assert _mean_acc(port.stdout) >= _mean_acc(plain) - 0.02, (port.stdout[-500:], plain[-500:])


BAD_INPUT = """
import dglx_dist
from dglx_dist.data import CoraGraphDataset

g = dglx_dist.distribute(CoraGraphDataset()[0], "distdgl")
size = 0 if g.rank() == 1 else 8  # rank 1 alone passes a bad batch size
dglx_dist.DataLoader(g, g.ndata["train_mask"], dglx_dist.NeighborSampler([2]), batch_size=size)
"""


def test_bad_input_is_one_line_not_a_traceback_per_rank(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text(BAD_INPUT)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-port", str(free_local_port()), str(script)]
    r = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode != 0
    lines = [line for line in r.stderr.splitlines() if line.startswith("dglx_dist error")]
    assert lines == ["dglx_dist error on rank 1: InvalidValueError: DataLoader: batch_size 0; "
                     "expected an integer >= 1 (at bad.py:7)"], r.stderr[-3000:]
    # torchrun's closing summary quotes each rank's line (its error file), not its @record
    # hint, and its root cause is the rank that refused (the others date theirs later)
    root = r.stderr.split("Root Cause")[-1]
    assert "traceback : dglx_dist error on rank 1: InvalidValueError" in root, r.stderr[-5000:]
    assert f'File "{script}"' not in r.stderr, r.stderr[-3000:]  # no rank's traceback


# the plain R-GCN script samples with DGL's unseeded generator and tests 164 papers: its single
# runs spread from 0.54 to 0.62 (5 epochs), the ports' from 0.51 to 0.58 (docs/porting.md); the
# plain script runs three times and the ports are held to 0.08 under the median
RGCN_RUNS, RGCN_MARGIN = 3, 0.08


@pytest.fixture(scope="module")
def mag_parts(tmp_path_factory):
    """DGL's partitions of mag-small (one, and two) and the median test accuracy of the plain
    DistDGL R-GCN script in DGL's standalone mode on the one partition, 5 epochs, over
    ``RGCN_RUNS`` runs: the tests below share them."""
    root = tmp_path_factory.mktemp("mag")
    plain_args = ["--part-config", str(root / "p1" / "mag.json"), "--standalone",
                  "--epochs", "5"]
    _, _, *plain = _run_plain([("partition_mag.py", [str(root / "p1"), "--parts", "1"]),
                               ("partition_mag.py", [str(root / "p2"), "--parts", "2"]),
                               *[("distdgl_rgcn.py", plain_args)] * RGCN_RUNS], root,
                              timeout=700)
    return root / "p2" / "mag.json", statistics.median(_mean_acc(out) for out in plain)


def _run_rgcn(cmd: list[str], cwd: Path, part_config: Path) -> subprocess.CompletedProcess:
    """2 processes as 2 virtual servers on DGL's two partitions, 5 epochs."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-port", str(free_local_port()), *cmd, "--part-config", str(part_config),
           "--epochs", "5"]
    return subprocess.run(cmd, cwd=cwd, env=_env(DGLX_VIRTUAL_SERVERS="2"),
                          capture_output=True, text=True, timeout=400)


def test_distdgl_rgcn_script_runs_with_its_import_changed(tmp_path, mag_parts):
    """DGL's DistDGL API on a graph with node types (DistEmbedding, node_split by type, a
    typed DistNodeDataLoader): the plain script in DGL's standalone mode on one of DGL's
    partitions of mag-small, the port under torchrun on DGL's two partitions (2 virtual
    servers), imported; features alone give 0.24-0.28."""
    part_config, plain_acc = mag_parts
    port = _run_rgcn([str(EXAMPLES / "distdgl_rgcn.py")], tmp_path, part_config)
    assert port.returncode == 0, port.stderr[-4000:]
    port_acc = _mean_acc(port.stdout)
    assert port_acc > 0.45 and port_acc >= plain_acc - RGCN_MARGIN, (port.stdout[-500:],
                                                                     plain_acc)


def test_unchanged_distdgl_rgcn_script_trains_under_p3(tmp_path, mag_parts):
    """DGL's own script (examples/dgl/distdgl_rgcn.py: `import dgl`, torch's DDP), not one
    line changed, through `-m dglx_dist.run --strategy p3` (DGL's partitions laid out by
    columns on the way): the same floor as its port under distdgl. 5 epochs: measured 0.60
    (granndis, a little cheaper, measured 0.34 after 5 epochs and 0.53 after 10: too few
    steps for a floor here; every strategy's run is in docs/porting.md's table)."""
    part_config, plain_acc = mag_parts
    run = _run_rgcn(["-m", "dglx_dist.run", "--strategy", "p3",
                     str(EXAMPLES / "dgl" / "distdgl_rgcn.py")], tmp_path, part_config)
    assert run.returncode == 0, run.stderr[-4000:]
    acc = _mean_acc(run.stdout)
    assert acc > 0.45 and acc >= plain_acc - RGCN_MARGIN, (run.stdout[-500:], plain_acc)
