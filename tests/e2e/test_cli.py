"""The ``dglx`` command run as a subprocess, the way users and the README run it."""
import json
import subprocess
import sys

import pytest

from dglx_dist.data import builtin_path, read_dataset
from dglx_dist.partition import PARTITIONERS, PartitionDir

pytestmark = pytest.mark.e2e


def dglx(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "dglx_dist", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def test_datagen_then_partition(tmp_path):
    data = tmp_path / "syn"
    r = dglx("datagen", data, "--num-nodes", 3000, "--num-edges", 30000, "--feat-dim", 16,
             "--num-classes", 4, "--seed", 5)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["num_nodes"] == 3000
    ds = read_dataset(data)
    assert ds.num_edges == 30000 and ds.feat_dim == 16

    r = dglx("partition", data, tmp_path / "parts", "--method", "metis", "--parts", 3,
             "--opt", "balance=train,edges")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["num_parts"] == 3 and 0 < report["edge_cut"] < ds.num_edges
    assert set(report["imbalance"]) == {"nodes", "edges", "train", "val", "test"}
    assert "| method | parts | edge_cut |" in r.stdout
    pdir = PartitionDir(tmp_path / "parts")
    assert pdir.manifest["partitioner"]["options"]["balance"] == ["train", "edges"]


def test_datagen_writes_a_typed_graph_shaped_like_ogbn_mag(tmp_path):
    """--preset mag-small (OUT given as --out): a typed directory that reads back whole."""

    r = dglx("datagen", "--preset", "mag-small", "--out", tmp_path / "d")
    assert r.returncode == 0, r.stderr
    meta = json.loads(r.stdout.strip().splitlines()[-1])
    assert meta["format"] == "dglx-hetero" and meta["ntypes"]["paper"]["num_nodes"] == 2877
    ds = read_dataset(tmp_path / "d")
    assert ds.category == "paper" and ds.num_classes == 349 and len(ds.canonical_etypes) == 8
    assert ds.num_edges == sum(meta["num_edges"])


def test_demo_partitions_cora_with_every_partitioner(tmp_path):
    """Then its training run (2 epochs here: its accuracy is the examples' and train tests')
    prints its table and test accuracy; all of it fits on a screen, no Python dict in the
    log (issue 80), and --metrics-out holds one JSON object per epoch."""
    r = dglx("demo", "--epochs", 2, "--metrics-out", tmp_path / "m.jsonl")
    assert r.returncode == 0, r.stderr
    assert "## distdgl training on 2 local processes" in r.stdout and "test accuracy: " in r.stdout
    table = r.stdout.split("every registered partitioner")[-1]
    for name in PARTITIONERS.names():
        assert f"| {name} | 4 |" in table
    console = (r.stdout + r.stderr).splitlines()
    assert len(console) <= 30 and "{'" not in r.stderr, r.stdout + r.stderr
    records = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [rec["epoch"] for rec in records] == [0, 1]


BAD_PARTITION_ARGS = [
    (["--parts", "0"], "num_parts = 0; expected 1 <= num_parts <= num_nodes (2708)"),
    (["--method", "grid"], "unknown partitioner 'grid'; valid names: feature_dim, hash, metis"),
    (["--opt", "colour=red"], "unknown option(s) ['colour'] for partitioner 'metis'"),
    (["--method", "feature_dim", "--parts", "2000"],
     "feature_dim: node type '_N' has 1433 feature columns; expected num_parts = 2000"),
    (["--memory-limit", "1000"], "needs about"),
]

# `dglx ARGV` for each ARGV of RUNS in turn, in one interpreter (torch is imported once, not
# once per command): each run's exit status as `python -m dglx_dist` would exit with it (main's
# return value or SystemExit's code) and its stderr, a fresh logging handler on it per run
_CLI_RUNNER = """
import contextlib, io, json, logging, sys
from dglx_dist.cli import main

results = []
for argv in RUNS:
    err = io.StringIO()
    for handler in logging.getLogger().handlers[:]:
        logging.getLogger().removeHandler(handler)
    with contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
    results.append({"returncode": code or 0, "stderr": err.getvalue()})
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def bad_partition_runs(tmp_path_factory):
    """[(its own empty directory, {returncode, stderr})] of `dglx partition` for each case of
    BAD_PARTITION_ARGS, all in one subprocess."""
    dirs = [tmp_path_factory.mktemp("bad") for _ in BAD_PARTITION_ARGS]
    runs = [["partition", str(builtin_path()), str(d / "parts"), *args]
            for d, (args, _) in zip(dirs, BAD_PARTITION_ARGS)]
    r = subprocess.run([sys.executable, "-c", f"RUNS = {runs!r}\n" + _CLI_RUNNER],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return list(zip(dirs, json.loads(r.stdout.strip().splitlines()[-1])))


@pytest.mark.parametrize("case", range(len(BAD_PARTITION_ARGS)),
                         ids=[f"args{i}-{m}" for i, (_, m) in enumerate(BAD_PARTITION_ARGS)])
def test_bad_arguments_fail_before_writing(bad_partition_runs, case):
    tmp_path, r = bad_partition_runs[case]
    message = BAD_PARTITION_ARGS[case][1]
    out = tmp_path / "parts"
    assert r["returncode"] == 2
    assert message in r["stderr"]
    assert not out.exists() and list(tmp_path.iterdir()) == []


def _user_files(tmp_path):
    (tmp_path / "cache-file").write_text("not a directory")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "thesis.tex").write_text("mine")


BAD_TRAIN_ARGS = [
    (["--strategy", "dorylus", "--strategy-opt", "invocation_timeout=0"],
     "option 'invocation_timeout': 0.0; expected a value > 0"),
    (["--cache-dir", "cache-file"], "--cache-dir cache-file is a file; expected a directory"),
    # --metrics-file: --metrics-out's older name, still taken
    (["--metrics-file", "no/such/dir/m.jsonl"], "--metrics-out no/such/dir/m.jsonl: cannot be "
                                                "opened for appending (No such file or"),
    (["--checkpoint-dir", "ckpt"], "--checkpoint-dir ckpt holds thesis.tex, which are not "
                                   "checkpoints"),
]


@pytest.fixture(scope="module")
def bad_train_runs(tmp_path_factory):
    """Each of ``BAD_TRAIN_ARGS`` as ``dglx train`` under torchrun (2 ranks) in a directory
    holding a user's files: the directory, its files before, the run. The four launches run
    at once (each refuses before training; one after another they took a minute)."""
    import os

    from dglx_dist.runtime.env import free_local_port

    env = {k: v for k, v in os.environ.items() if not k.startswith("DGLX_")}
    env.update({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"})
    started = []
    for args, _ in BAD_TRAIN_ARGS:
        tmp_path = tmp_path_factory.mktemp("bad-train")
        _user_files(tmp_path)
        before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--master-port", str(free_local_port()), "-m", "dglx_dist", "train",
               "--epochs", "1", "--no-progress", *args]
        started.append((tmp_path, before, subprocess.Popen(
            cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)))
    runs = []
    for tmp_path, before, proc in started:
        _, stderr = proc.communicate(timeout=300)
        runs.append((tmp_path, before, proc.returncode, stderr))
    return runs


@pytest.mark.parametrize("case", range(len(BAD_TRAIN_ARGS)),
                         ids=[f"args{i}-{m}" for i, (_, m) in enumerate(BAD_TRAIN_ARGS)])
def test_bad_train_input_under_torchrun_is_one_line(bad_train_runs, case):
    """A refusal of `dglx train` under torchrun (a strategy option before the process group;
    the cache, metrics file and checkpoint directory before the first epoch, issue 40 case
    11): one ERROR line from rank 0 and no traceback from any rank; torchrun's own summary
    quotes the line (each rank's error file). tests/unit/test_errors.py has the rank rules and
    the usage errors."""
    args, message = BAD_TRAIN_ARGS[case]
    tmp_path, before, returncode, stderr = bad_train_runs[case]
    assert returncode != 0, stderr[-2000:]
    said = [line for line in stderr.splitlines() if message in line]
    summary = [line for line in said if line.lstrip().startswith("traceback :")]
    assert len(said) - len(summary) == 1 and summary, stderr[-3000:]
    frames = [ln for ln in stderr.splitlines() if 'File "' in ln and "/dglx_dist/" in ln]
    assert not frames, stderr[-3000:]  # torchrun's own traceback has none of ours
    assert {p: p.read_bytes() for p in before} == before
    if "--strategy" in args:
        assert not (tmp_path / "dglx-partitions").exists()  # refused before partitioning
