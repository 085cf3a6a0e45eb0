"""The ported examples under torchrun, every registered strategy: each reaches its plain DGL
script's test accuracy within 2 points (same seed, model, optimizer and epochs), and exits 0
without an explicit shutdown call (the session shuts down at exit).

Every script of the module runs in :func:`launched`, two jobs at a time
(tests/launches.py): the plain scripts (two interpreters) and the ports (seeded:
their results do not depend on timing), and the ports that read the partitions DGL's scripts
wrote, queued once those are written; the tests below check what each printed."""
import json
import os
import re
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dglx_dist.strategies import STRATEGIES
from tests.launches import Together, fresh_ports

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
# the plain R-GCN script samples with DGL's unseeded generator and tests 164 papers: its single
# runs spread from 0.54 to 0.62 (5 epochs), the ports' from 0.51 to 0.58 (docs/porting.md); the
# plain script runs three times and the ports are held to 0.08 under the median
RGCN_RUNS, RGCN_MARGIN = 3, 0.08


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


# The plain scripts of the second interpreter, by the name the tests read their stdouts under
# (how many each): DGL's partitioning and its standalone DistDGL runs, then the typed graph's
# R-GCN, one interpreter for all three (torch and DGL imported once)
GROUPS = {"cora": 3, "mag": 2 + RGCN_RUNS, "rgcn_hetero": 1}


def _first_jobs(root: Path, ports: Iterator[int]) -> dict:
    """The jobs that need nothing written before them: the plain scripts (partitioning DGL's
    way first where a script reads partitions) and the ports of the self-contained scripts."""
    plain = [(name, ARGS[name]) for name in NAMES for _ in range(RUNS_OF.get(name, 1))] + \
        [("link_prediction.py", [])]
    cora, mag = root / "cora", root / "mag"
    rgcn_plain = ["--part-config", str(mag / "p1" / "mag.json"), "--standalone", "--epochs", "5"]
    groups = {"cora": [("partition_cora.py", [str(cora / "p1"), "--parts", "1"]),
                       ("partition_cora.py", [str(cora / "p2"), "--parts", "2"]),
                       ("distdgl_sage.py", ["--part-config", str(cora / "p1" / "cora.json"),
                                            "--standalone"])],
              "mag": [("partition_mag.py", [str(mag / "p1"), "--parts", "1"]),
                      ("partition_mag.py", [str(mag / "p2"), "--parts", "2"]),
                      *[("distdgl_rgcn.py", rgcn_plain)] * RGCN_RUNS],
              "rgcn_hetero": [("rgcn_hetero.py", ["--epochs", "3"])]}
    assert {name: len(runs) for name, runs in groups.items()} == GROUPS
    jobs = {"plain": _plain(plain, root),
            "groups": _plain([run for runs in groups.values() for run in runs], root)}
    runs = [(name, strategy, ranks, ARGS[name]) for name, strategy, ranks in RUNS] + \
        [("link_prediction.py", strategy, ranks, ["--batch-size", str(1024 // ranks)])
         for strategy, ranks in LINK_RUNS] + [("rgcn_hetero.py", "distdgl", 2, ["--epochs", "5"])]
    for name, strategy, ranks, args in runs:
        jobs[name, strategy, ranks] = _torchrun(
            ranks, [str(EXAMPLES / name), "--strategy", strategy, *args], _fresh(root, "port"),
            next(ports), **({"DGLX_VIRTUAL_SERVERS": "2"} if ranks == 4 else {}))
    return jobs


def _then_jobs(root: Path, ports: Iterator[int]) -> dict:
    """The ports of DGL's DistDGL-API scripts on the partitions the first jobs wrote, 2
    processes as 2 virtual servers each; a script with a bad argument, and one that holds a
    loader's iterator to the end."""
    (root / "bad.py").write_text(BAD_INPUT)
    cora, mag = root / "cora" / "p2" / "cora.json", root / "mag" / "p2" / "mag.json"
    rgcn = ["--part-config", str(mag), "--epochs", "5"]
    runs = {"distdgl_sage": [str(EXAMPLES / "distdgl_sage.py"), "--part-config", str(cora)],
            "distdgl_rgcn": [str(EXAMPLES / "distdgl_rgcn.py"), *rgcn],
            "rgcn_p3": ["-m", "dglx_dist.run", "--strategy", "p3",
                        str(EXAMPLES / "dgl" / "distdgl_rgcn.py"), *rgcn]}
    (root / "left.py").write_text(LEFT_ITERATOR)
    jobs = {name: _torchrun(2, args, _fresh(root, name), next(ports), DGLX_VIRTUAL_SERVERS="2")
            for name, args in runs.items()}
    jobs["bad"] = _torchrun(2, [str(root / "bad.py")], root, next(ports))
    jobs["left"] = _torchrun(2, [str(root / "left.py")], root, next(ports),
                             DGLX_VIRTUAL_SERVERS="2")
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
    """Every run of the module, by name: the plain scripts' stdouts (lists) and the ports'
    completed processes."""
    root, ports = tmp_path_factory.mktemp("examples"), fresh_ports()
    first, then = _first_jobs(root, ports), _then_jobs(root, ports)
    with Together(2) as pool:
        started = {name: pool.submit(job) for name, job in first.items()}
        grouped = _outs(started.pop("groups").result())  # DGL's partitions are written
        # the ports that read them join the queue behind the first jobs still waiting
        started.update({name: pool.submit(job) for name, job in then.items()})
        done = {name: future.result() for name, future in started.items()}
    out = {"plain": _outs(done.pop("plain"))}
    assert len(grouped) == sum(GROUPS.values()), len(grouped)
    for name, count in GROUPS.items():
        out[name], grouped = grouped[:count], grouped[count:]
    return {**out, **done}


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
    ported here); the typed example's run is below."""
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


def test_plain_rgcn_on_a_typed_graph_learns(launched):
    """examples/dgl/rgcn_hetero.py on mag-small for 3 epochs: test accuracy far above chance
    (the largest class's share, 0.07; measured 0.38 after 3 epochs, 0.62-0.68 after the
    default 20; features alone give 0.24-0.28)."""
    (out,) = launched["rgcn_hetero"]
    assert _test_acc(out) > 0.25, out[-2000:]


def test_rgcn_port_learns_the_typed_graph_under_distdgl(launched):
    """examples/rgcn_hetero.py at 2 ranks, 5 epochs: far above what features alone give
    (measured 0.51; the plain script 0.56 after 5 epochs). The medians over 3 seeds at the
    default 20 epochs, within 2 points of the plain script's, are scripts/check_examples.py's
    (docs/porting.md): single runs on mag-small's 164 test papers spread by 6 points."""
    out = _ok(launched["rgcn_hetero.py", "distdgl", 2])
    assert _test_acc(out) > 0.4, out[-2000:]


def test_distdgl_script_runs_with_its_import_changed(launched):
    """DGL's DistDGL API: the plain script in DGL's standalone mode on one partition, the
    port under torchrun on DGL's two partitions (2 virtual servers), imported, no ip_config."""
    plain, port = launched["cora"][-1], _ok(launched["distdgl_sage"])
    assert _mean_acc(port) >= _mean_acc(plain) - 0.02, (port[-500:], plain[-500:])


BAD_INPUT = """
import dglx_dist
from dglx_dist.data import CoraGraphDataset

g = dglx_dist.distribute(CoraGraphDataset()[0], "distdgl")
size = 0 if g.rank() == 1 else 8  # rank 1 alone passes a bad batch size
dglx_dist.DataLoader(g, g.ndata["train_mask"], dglx_dist.NeighborSampler([2]), batch_size=size)
"""


def test_bad_input_is_one_line_not_a_traceback_per_rank(launched):
    r = launched["bad"]
    assert r.returncode != 0
    lines = [line for line in r.stderr.splitlines() if line.startswith("dglx_dist error")]
    assert lines == ["dglx_dist error on rank 1: InvalidValueError: DataLoader: batch_size 0; "
                     "expected an integer >= 1 (at bad.py:7)"], r.stderr[-3000:]
    # torchrun's closing summary quotes each rank's line (its error file), not its @record
    # hint, and its root cause is the rank that refused (the others date theirs later)
    root = r.stderr.split("Root Cause")[-1]
    assert "traceback : dglx_dist error on rank 1: InvalidValueError" in root, r.stderr[-5000:]
    assert f'File "{r.args[-1]}"' not in r.stderr, r.stderr[-3000:]  # no rank's traceback


LEFT_ITERATOR = """
import dglx_dist
from dglx_dist.data import CoraGraphDataset

g = dglx_dist.distribute(CoraGraphDataset()[0], "distdgl")
ids = dglx_dist.node_split(g.ndata["train_mask"], g)
batches = iter(dglx_dist.DataLoader(g, ids, dglx_dist.NeighborSampler([2, 2]), batch_size=16))
for _ in range(2):  # from the second step on, the loader pulls the rows the loop reads
    input_nodes, output_nodes, blocks = next(batches)
    g.ndata["feat"][input_nodes]
print("left with the next step's rows under way")
"""


def test_an_iterator_held_to_the_end_exits_quietly(launched):
    """A script that stops taking steps while the next step's rows are under way and holds
    the iterator until it exits: exit 0, nothing on stderr about it. (Python closes such a
    generator at exit, after the session's shutdown, in a half torn-down interpreter; it
    used to finish the pull then, and printed "Exception ignored in: <generator ...>" with a
    TypeError on every rank.)"""
    r = launched["left"]
    assert "rows under way" in _ok(r), r.stdout[-2000:]
    assert "Exception ignored" not in r.stderr and "Traceback" not in r.stderr, r.stderr[-3000:]


@pytest.fixture(scope="module")
def rgcn_plain_acc(launched):
    """The median test accuracy of the plain DistDGL R-GCN script in DGL's standalone mode
    on DGL's one partition of mag-small, 5 epochs, over ``RGCN_RUNS`` runs."""
    return statistics.median(_mean_acc(out) for out in launched["mag"][2:])


def test_distdgl_rgcn_script_runs_with_its_import_changed(launched, rgcn_plain_acc):
    """DGL's DistDGL API on a graph with node types (DistEmbedding, node_split by type, a
    typed DistNodeDataLoader): the plain script in DGL's standalone mode on one of DGL's
    partitions of mag-small, the port under torchrun on DGL's two partitions (2 virtual
    servers), imported; features alone give 0.24-0.28."""
    port = _ok(launched["distdgl_rgcn"])
    acc = _mean_acc(port)
    assert acc > 0.45 and acc >= rgcn_plain_acc - RGCN_MARGIN, (port[-500:], rgcn_plain_acc)


def test_unchanged_distdgl_rgcn_script_trains_under_p3(launched, rgcn_plain_acc):
    """DGL's own script (examples/dgl/distdgl_rgcn.py: `import dgl`, torch's DDP), not one
    line changed, through `-m dglx_dist.run --strategy p3` (DGL's partitions laid out by
    columns on the way): the same floor as its port under distdgl. 5 epochs: measured 0.60
    (granndis, a little cheaper, measured 0.34 after 5 epochs and 0.53 after 10: too few
    steps for a floor here; every strategy's run is in docs/porting.md's table)."""
    run = _ok(launched["rgcn_p3"])
    acc = _mean_acc(run)
    assert acc > 0.45 and acc >= rgcn_plain_acc - RGCN_MARGIN, (run[-500:], rgcn_plain_acc)
