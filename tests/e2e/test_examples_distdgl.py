"""The ports of DGL's DistDGL-API scripts (``import dglx_dist.dgl as dgl``, DGL's own
partitions) and the runner on DGL's unchanged script, the typed graph's R-GCN example, and two
scripts of one behaviour each (a bad argument on one rank; a loader's iterator held to the end).
tests/e2e/test_examples.py has the other ports and the helpers both files use.

Every script of the module runs in :func:`launched`, two jobs at a time (tests/launches.py):
DGL's partitioning and its plain scripts (one interpreter), the typed graph's port and the two
scripts, and the ports that read the partitions DGL's scripts wrote, queued once those are
written; the tests below check what each printed."""
import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_examples import (EXAMPLES, _fresh, _mean_acc, _ok, _outs, _plain,
                                     _test_acc, _torchrun)
from tests.launches import Together, fresh_ports

pytestmark = pytest.mark.e2e
# the plain R-GCN script samples with DGL's unseeded generator and tests 164 papers: its single
# runs spread from 0.54 to 0.62 (5 epochs), the ports' from 0.51 to 0.58 (docs/porting.md); the
# plain script runs three times and the ports are held to 0.08 under the median
RGCN_RUNS, RGCN_MARGIN = 3, 0.08
# DGL's plain scripts by the name the tests read their stdouts under (how many each): DGL's
# partitioning and its standalone DistDGL runs, then the typed graph's R-GCN, one interpreter
# for all three (torch and DGL imported once)
GROUPS = {"cora": 3, "mag": 2 + RGCN_RUNS, "rgcn_hetero": 1}


def _first_jobs(root: Path, ports: Iterator[int]) -> dict:
    """The jobs that need nothing written before them: DGL's partitioning, its standalone
    DistDGL runs and the typed graph's plain R-GCN (one interpreter), the typed graph's port, a
    script with a bad argument, and one that holds a loader's iterator to the end."""
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
    (root / "bad.py").write_text(BAD_INPUT)
    (root / "left.py").write_text(LEFT_ITERATOR)
    return {"groups": _plain([run for runs in groups.values() for run in runs], root),
            ("rgcn_hetero.py", "distdgl", 2): _torchrun(
                2, [str(EXAMPLES / "rgcn_hetero.py"), "--strategy", "distdgl", "--epochs", "5"],
                _fresh(root, "port"), next(ports)),
            "bad": _torchrun(2, [str(root / "bad.py")], root, next(ports)),
            "left": _torchrun(2, [str(root / "left.py")], root, next(ports),
                              DGLX_VIRTUAL_SERVERS="2")}


def _then_jobs(root: Path, ports: Iterator[int]) -> dict:
    """The ports of DGL's DistDGL-API scripts on the partitions the first jobs wrote, 2
    processes as 2 virtual servers each."""
    cora, mag = root / "cora" / "p2" / "cora.json", root / "mag" / "p2" / "mag.json"
    rgcn = ["--part-config", str(mag), "--epochs", "5"]
    runs = {"distdgl_sage": [str(EXAMPLES / "distdgl_sage.py"), "--part-config", str(cora)],
            "distdgl_rgcn": [str(EXAMPLES / "distdgl_rgcn.py"), *rgcn],
            "rgcn_p3": ["-m", "dglx_dist.run", "--strategy", "p3",
                        str(EXAMPLES / "dgl" / "distdgl_rgcn.py"), *rgcn]}
    return {name: _torchrun(2, args, _fresh(root, name), next(ports), DGLX_VIRTUAL_SERVERS="2")
            for name, args in runs.items()}


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> dict:
    """Every run of the module, by name: the plain scripts' stdouts (lists, by group) and the
    ports' completed processes."""
    root, ports = tmp_path_factory.mktemp("examples"), fresh_ports()
    first, then = _first_jobs(root, ports), _then_jobs(root, ports)
    with Together(2) as pool:
        started = {name: pool.submit(job) for name, job in first.items()}
        grouped = _outs(started.pop("groups").result())  # DGL's partitions are written
        # the ports that read them join the queue behind the first jobs still waiting
        started.update({name: pool.submit(job) for name, job in then.items()})
        done = {name: future.result() for name, future in started.items()}
    out = {}
    assert len(grouped) == sum(GROUPS.values()), len(grouped)
    for name, count in GROUPS.items():
        out[name], grouped = grouped[:count], grouped[count:]
    return {**out, **done}


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
