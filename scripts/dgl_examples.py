"""DGL's own published DistDGL examples, unchanged, through ``dglx_dist.run`` under every
strategy, beside DGL's own run of the same script: exit codes, the median and mean test
accuracy over the runs and its range, the median epoch time, as JSON lines and a markdown
table (docs/porting.md has the measured ones; docs/reliability.md issue 77's R-GCN seeds).

    .venv/bin/python scripts/dgl_examples.py --dgl-repo PATH/TO/dmlc/dgl [--tags v2.1.0 ...]
        [--examples rgcn-issue77 ...] [--runs N | --seeds S ...]

The scripts are read from a clone of dmlc/dgl (``git show TAG:examples/distributed/...``),
never copied into this repository; a tag without a script is skipped. Their data is
partitioned the way DGL's own ``partition_graph.py`` beside each script does it, in 1 part
for DGL's standalone run (one process) and 2 parts for the runner (2 processes, 2 virtual
servers):

* ``graphsage/node_classification.py`` and ``node_classification_unsupervised.py`` on Cora
  (node data ``features`` and ``labels``, METIS, ``balance_ntypes=train_mask``,
  ``balance_edges=True``). The supervised one takes its own flags ``--num_epochs 20
  --batch_size 32 --lr 0.01 --fan_out 10,10`` (its defaults, batches of 1000 at lr 0.003,
  take one step per epoch on Cora's 140 training nodes and end near 0.45 after 20 epochs,
  too far from converged to compare); the unsupervised one runs its defaults (it needs
  scikit-learn below 1.7, whose LogisticRegression still takes ``multi_class``).
* ``rgcn/node_classification.py`` (``--sparse-embedding --dgl-sparse``: a ``DistEmbedding``
  per featureless type and DGL's ``SparseAdam``) on mag-small, dglx_dist's ogbn-mag-shaped graph
  (papers with features, ``labels`` renumbered so every class is present, as ogbn-mag's
  are; the other types featureless), the flags of DGL's README but ``--batch-size 128
  --n-epochs 10`` (mag-small has 2,460 training papers); it imports ``ogb``.
* ``rgcn-issue77``: the same script and graph with issue 77's flags, ``--n-epochs 10
  --n-bases 2 --fanout 10,10 --batch-size 64 --n-hidden 64 --sparse-embedding`` (torch's
  sparse ``nn.Embedding`` per featureless type, in a DDP-wrapped embedding layer, and
  torch's ``SparseAdam``; the script's defaults otherwise: no dropout, lr 0.01), at v2.4.0;
  only when named (``--examples rgcn-issue77``).

Each run is one of: DGL's standalone run, DGL's own DistDGL (2 simulated machines, each a
DGL server and one trainer, as ``dglx bench``'s DGL rows run it, in a private /dev/shm
from :func:`~dglx_dist.bench.dgl_distdgl.shm_wrapper`), and the runner under each strategy.
``--runs N`` repeats every cell N times, unseeded; ``--seeds S ...`` instead runs every cell
once per seed: a prologue seeds Python's ``random``, numpy, torch and DGL (``dgl.seed``)
with it before the script runs (in DGL's runs in the trainer and in each DGL server, where
DistDGL samples), and under the runner also gives the script's loaders ``ddp_seed=S`` and
the strategy ``seed=S`` (the runner's loaders shuffle and sample from that seed, not from
torch's generator; GraNNDis's co-batches are drawn from the strategy's).

DGL's own run goes through a shim that, on a DGL older than 2.4, puts the two loaders where
DGL 2.4's scripts look for them (``dgl.distributed.DistNodeDataLoader`` and
``DistEdgeDataLoader``, DGL's own classes) and changes nothing else.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from dglx_dist.bench.dgl_distdgl import shm_wrapper  # noqa: E402
from dglx_dist.bench.procs import run_group  # noqa: E402
from dglx_dist.report import markdown_table  # noqa: E402
from dglx_dist.runtime.env import free_local_port  # noqa: E402
from dglx_dist.strategies import STRATEGIES  # noqa: E402

CORA = """
import sys, dgl
from dglx_dist.data import CoraGraphDataset
g = CoraGraphDataset()[0]
g.ndata["features"], g.ndata["labels"] = g.ndata.pop("feat"), g.ndata.pop("label")
dgl.distributed.partition_graph(g, "cora", int(sys.argv[2]), sys.argv[1], part_method="metis",
                                balance_ntypes=g.ndata["train_mask"], balance_edges=True)
"""
MAG = """
import sys, dgl, torch
from dglx_dist.data import to_dgl
from dglx_dist.data.mag import MAG_PRESETS, mag_dataset
g = to_dgl(mag_dataset(MAG_PRESETS["mag-small"]))
label = g.nodes["paper"].data.pop("label")
g.nodes["paper"].data["labels"] = torch.unique(label, return_inverse=True)[1]
for t in g.ntypes:
    if t != "paper":
        g.nodes[t].data.pop("feat", None)
dgl.distributed.partition_graph(g, "mag", int(sys.argv[2]), sys.argv[1], part_method="metis",
                                balance_ntypes={"paper": g.nodes["paper"].data["train_mask"]},
                                balance_edges=True)
"""
SEED = """
def _seed():  # EXAMPLE_SEED: every generator a script draws from, seeded before it runs
    import os, random
    if os.environ.get("EXAMPLE_SEED") is None:
        return None
    import dgl, numpy, torch
    seed = int(os.environ["EXAMPLE_SEED"])
    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)
    dgl.seed(seed)
    return seed
"""
SHIM = SEED + """
import runpy, sys
import dgl.dataloading, dgl.distributed
for name in ("DistNodeDataLoader", "DistEdgeDataLoader"):  # DGL 2.4's places, on an older DGL
    if not hasattr(dgl.distributed, name):
        setattr(dgl.distributed, name, getattr(dgl.dataloading, name))
_seed()
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
RUNNER_SEED = SEED + """
import functools, os, runpy, sys
seed = _seed()
if seed is not None:  # the runner's loaders draw from their ddp_seed, not torch's generator
    import dgl
    for name in ("DistNodeDataLoader", "DistEdgeDataLoader"):
        setattr(dgl.distributed, name,
                functools.partial(getattr(dgl.distributed, name), ddp_seed=seed))
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")
"""
"""Run by the runner in the script's place under ``--seeds``: seeds as :data:`SHIM` does,
then runs the script."""

MACHINE = SEED + """
import os, runpy, subprocess, sys
role, machine = sys.argv[1], sys.argv[2]
os.chdir(os.path.dirname(os.path.abspath(__file__)))  # what the script writes stays there
if role in ("server", "trainer"):  # DGL's launch runs the script itself in both roles
    import dgl.dataloading, dgl.distributed
    from dgl.distributed import rpc_client
    rpc_client.get_local_machine_id = lambda _namebook: int(machine)  # all are 127.0.0.1
    for name in ("DistNodeDataLoader", "DistEdgeDataLoader"):  # as SHIM does
        if not hasattr(dgl.distributed, name):
            setattr(dgl.distributed, name, getattr(dgl.dataloading, name))
    _seed()  # the server too: DistDGL's trainers sample on the servers
    sys.argv = sys.argv[3:]
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as e:  # a server's initialize() exits once the trainers are done
        sys.exit(0 if role == "server" else e.code)
    sys.exit(0)
server = subprocess.Popen([sys.executable, __file__, "server", *sys.argv[2:]],
                          env={**os.environ, "DGL_ROLE": "server", "DGL_SERVER_ID": machine})
trainer = subprocess.run([sys.executable, __file__, "trainer", *sys.argv[2:]],
                         env={**os.environ, "DGL_ROLE": "client", "DGL_DIST_MODE": "distributed",
                              "DGL_GROUP_ID": "0", "RANK": machine, "LOCAL_RANK": "0"})
try:
    server.wait(timeout=60)
except subprocess.TimeoutExpired:
    server.kill()
sys.exit(trainer.returncode)
"""
"""One simulated machine of DGL's own DistDGL, as DGL's launch.py starts one: the example
script as a DGL server and as one trainer, in a private /dev/shm (``shm_wrapper``)."""


@dataclasses.dataclass(frozen=True)
class Example:
    """One of DGL's scripts: where it is, its data and flags, how its accuracy is printed."""

    path: str
    data: str  # "cora" or "mag"
    args: tuple[str, ...]
    accuracy: str  # a regex matching the test accuracy in the script's output
    each_rank: bool = False  # every rank prints it once (the mean is taken), or the last one
    standalone_flag: bool = False  # the script itself takes --standalone
    strategies: tuple[str, ...] | None = None  # None: every registered one
    by_default: bool = True  # run without --examples


SAGE = "examples/distributed/graphsage/"
EXAMPLES = {
    "graphsage": Example(SAGE + "node_classification.py", "cora", (
        "--graph_name", "cora", "--ip_config", "ip_config.txt", "--num_epochs", "20",
        "--batch_size", "32", "--lr", "0.01", "--fan_out", "10,10", "--eval_every", "20"),
        r"TestAccuracy ([0-9.]+)", each_rank=True),
    "graphsage-unsupervised": Example(
        SAGE + "node_classification_unsupervised.py", "cora",
        ("--graph_name", "cora", "--ip_config", "ip_config.txt"), r"test acc ([0-9.]+)",
        standalone_flag=True, strategies=("distdgl", "p3")),
    "rgcn": Example("examples/distributed/rgcn/node_classification.py", "mag", (
        "--graph-name", "mag", "--dataset", "ogbn-mag", "--fanout=25,25", "--batch-size",
        "128", "--n-hidden", "64", "--lr", "0.01", "--eval-batch-size", "1024", "--low-mem",
        "--dropout", "0.5", "--use-self-loop", "--n-bases", "2", "--n-epochs", "10",
        "--layer-norm", "--ip-config", "ip_config.txt", "--sparse-embedding", "--dgl-sparse"),
        r"Test Acc ([0-9.]+)",  # DGL's own run without --standalone: DGL's SparseAdam needs
        strategies=("distdgl", "p3", "granndis", "fullgraph")),  # the process group it skips
    "rgcn-issue77": Example("examples/distributed/rgcn/node_classification.py", "mag", (
        "--graph-name", "mag", "--dataset", "ogbn-mag", "--ip-config", "ip_config.txt",
        "--n-epochs", "10", "--n-bases", "2", "--fanout", "10,10", "--batch-size", "64",
        "--n-hidden", "64", "--sparse-embedding"), r"Test Acc ([0-9.]+)",
        strategies=("distdgl", "p3", "granndis", "fullgraph"), by_default=False),
}
CONFIG_FLAG = {"cora": "--part_config", "mag": "--conf-path"}


def run_env(**extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DGLX_")}
    env.update({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "DGLX_TIMEOUT": "120"},
               **extra)
    return env


def _script(repo: Path, tag: str, example: Example, out: Path) -> Path | None:
    """The example's file at ``tag``, written under ``out`` (None: the tag has none)."""
    r = subprocess.run(["git", "-C", str(repo), "show", f"{tag}:{example.path}"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None
    path = out / tag / example.path.replace("/", "_")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(r.stdout)
    return path


def _measure(cmd: list, cwd: Path, env: dict[str, str], example: Example) -> dict:
    """Runs one script (a command, or DGL DistDGL's machines: a list of them); its exit code,
    test accuracy (the mean over the ranks' lines, or the last line: rank 0's, over every
    test node), mean epoch time and wall time."""
    t0 = time.perf_counter()
    if isinstance(cmd[0], list):
        done, _ = run_group(cmd, env, 1800, [None] * len(cmd))  # absolute paths
        r = subprocess.CompletedProcess(cmd, max(p.returncode for p in done),
                                        "".join(p.stdout for p in done), "")
    else:
        r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    accs = [float(a) for a in re.findall(example.accuracy, r.stdout)]
    accs = accs if example.each_rank else accs[-1:]
    epochs = [float(t) for t in re.findall(r"TrainEpochTime\(mean\) ([0-9.]+)", r.stdout)]
    errors = [line for line in r.stderr.splitlines() if "error" in line.lower()]
    return {"exit": r.returncode, "test_acc": round(statistics.mean(accs), 4) if accs else None,
            "epoch_s": round(statistics.mean(epochs), 4) if epochs else None,
            "wall_s": round(time.perf_counter() - t0, 1),
            "error": errors[-1][-300:] if r.returncode and errors else None}


def _runs(example: Example, path: Path, out: Path, strategies: list[str],
          seed: int | None = None):
    """DGL's standalone run, then the runner's under each strategy: (system, command, env);
    with ``seed``, each seeded (the module docstring says how)."""
    flag = CONFIG_FLAG[example.data]
    one, two = (out / f"{example.data}{n}" / f"{example.data}.json" for n in (1, 2))
    seeded = {} if seed is None else {"EXAMPLE_SEED": str(seed)}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--master-port"]
    plain = [*torchrun, str(free_local_port()), "--nproc-per-node", "1", str(out / "shim.py"),
             str(path), *example.args, flag, str(one)]
    plain += ["--standalone"] if example.standalone_flag else []
    yield ("DGL standalone (1 part, 1 process)", plain,
           run_env(DGL_DIST_MODE="standalone", **seeded))
    cmds, env = _dgl_machines(example, path, out, two)
    yield "DGL DistDGL (2 machines, 1 trainer each)", cmds, {**env, **seeded}
    script = [str(path)] if seed is None else [
        *("--strategy-opt", f"seed={seed}"), str(out / "seeded.py"), str(path)]
    for strategy in strategies:
        if example.strategies is None or strategy in example.strategies:
            cmd = [*torchrun, str(free_local_port()), "--nproc-per-node", "2", "-m",
                   "dglx_dist.run", "--strategy", strategy, "--cache-dir", str(out / "cache"),
                   *script, *example.args, flag, str(two)]
            yield (f"dglx_dist.run {strategy}", cmd,
                   run_env(DGLX_VIRTUAL_SERVERS="2", **seeded))


def _dgl_machines(example: Example, path: Path, out: Path, config: Path):
    """DGL's own DistDGL run of the script on the 2-part partitions: 2 simulated machines
    (commands), each a server and a trainer, and their environment."""
    ip_config = out / "dgl-machines" / "ip_config.txt"
    ip_config.parent.mkdir(exist_ok=True)
    ip_config.write_text("".join(f"127.0.0.1 {free_local_port()}\n" for _ in range(2)))
    args = [str(ip_config) if a == "ip_config.txt" else a for a in example.args]
    cmds = [[*shm_wrapper(), sys.executable, str(out / "machine.py"), "machine", str(m),
             str(path), *args, CONFIG_FLAG[example.data], str(config)] for m in range(2)]
    env = run_env(DGL_NUM_SAMPLER="0", DGL_NUM_CLIENT="2", DGL_NUM_SERVER="1",
                  DGL_CONF_PATH=str(config), DGL_IP_CONFIG=str(ip_config),
                  DGL_GRAPH_FORMAT="csc", MASTER_ADDR="127.0.0.1",
                  MASTER_PORT=str(free_local_port()), WORLD_SIZE="2")
    return cmds, env


def summary(rows: list[dict]) -> list[dict]:
    """One row per (example, tag, system): exit codes, the median and mean test accuracy
    and its range, the median epoch time."""
    cells: dict[tuple, list[dict]] = {}
    for row in rows:
        cells.setdefault((row["example"], row["tag"], row["system"]), []).append(row)
    out = []
    for (example, tag, system), runs in cells.items():
        accs = [r["test_acc"] for r in runs if r["test_acc"] is not None]
        epochs = [r["epoch_s"] for r in runs if r["epoch_s"] is not None]
        out.append({"example": example, "tag": tag, "system": system,
                    "exit": " ".join(str(r["exit"]) for r in runs),
                    "test_acc": statistics.median(accs) if accs else None,
                    "mean": round(statistics.mean(accs), 4) if accs else None,
                    "range": f"{min(accs):.3f}-{max(accs):.3f}" if accs else "",
                    "epoch_s": statistics.median(epochs) if epochs else None})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dgl-repo", required=True, help="a clone of dmlc/dgl with its tags")
    parser.add_argument("--tags", nargs="+", default=["v2.1.0", "v2.4.0", "master"])
    parser.add_argument("--strategies", nargs="+", default=STRATEGIES.names())
    parser.add_argument("--examples", nargs="+", choices=EXAMPLES,
                        default=[n for n, e in EXAMPLES.items() if e.by_default])
    parser.add_argument("--out", default="dgl-examples")
    parser.add_argument("--runs", type=int, default=3, help="runs per cell (DGL's too)")
    parser.add_argument("--seeds", type=int, nargs="+", help="instead of --runs: one run "
                        "per cell per seed, every generator seeded with it")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "ip_config.txt").write_text("127.0.0.1\n")
    (out / "shim.py").write_text(SHIM)
    (out / "machine.py").write_text(MACHINE)
    (out / "seeded.py").write_text(RUNNER_SEED)
    for data, code in (("cora", CORA), ("mag", MAG)):
        for parts in (1, 2):
            if not (out / f"{data}{parts}" / f"{data}.json").is_file():
                subprocess.run([sys.executable, "-c", code, str(out / f"{data}{parts}"),
                                str(parts)], check=True, capture_output=True, env=run_env())
    rows = []
    seeds = args.seeds or [None] * args.runs
    for name in args.examples:
        example = EXAMPLES[name]
        for tag in args.tags:
            path = _script(Path(args.dgl_repo), tag, example, out)
            for seed in seeds if path is not None else []:  # cells alternate
                for system, cmd, env in _runs(example, path, out, args.strategies, seed):
                    row = {"example": name, "tag": tag, "system": system,
                           **({} if seed is None else {"seed": seed}),
                           **_measure(cmd, out, env, example)}
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    print(markdown_table(summary(rows)))


if __name__ == "__main__":
    main()
