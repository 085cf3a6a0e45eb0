"""The package's own sampling where DGL cannot be imported: two real processes, each a
fresh interpreter in which ``import dgl`` raises, meet in a gloo process group, draw blocks
over their parts (typed and untyped) and build the package's blocks; the edges are those of
the dataset, checked here with numpy."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from dglx_dist.data import (EdgeTable, GraphDataset, NodeTable, builtin_path, read_dataset,
                            write_dataset)
from dglx_dist.partition import PartitionDir, partition_dataset
from dglx_dist.runtime.env import free_local_port
from tests.unit.test_import_boundary import _BLOCK

pytestmark = pytest.mark.dist
ROOT = Path(__file__).resolve().parents[2]

_RANK = textwrap.dedent("""
    import json, sys
    import torch
    import dglx_dist
    from dglx_dist.partition import PartitionDir
    from dglx_dist.sampling import PartitionSampler

    session = dglx_dist.init(backend="gloo", device="cpu")
    pdir = PartitionDir(sys.argv[1])
    part = pdir.load_part(session.rank)
    types = pdir.types
    sampler = PartitionSampler.of(pdir, part, session.world)
    fanouts = [-1, -1] if types is None else [[-1] * len(types.canonical_etypes)] * 2
    seeds = torch.arange(session.rank, pdir.num_nodes, 7)
    out = []
    for block in sampler.draw_blocks(seeds, fanouts):
        ends = []
        for e, (st, _, dt) in enumerate(block.canonical_etypes):
            kind = block.etype == e
            src = block.nodes_of(block.ntypes.index(st))[block.src[kind]]
            dst = block.nodes_of(block.ntypes.index(dt), dst=True)[block.dst[kind]]
            ends.append([src.tolist(), dst.tolist(), block.eid[kind].tolist()])
        out.append({"dst": {name: block.nodes_of(t, dst=True).tolist()
                            for t, name in enumerate(block.ntypes)},
                    "edges": {"/".join(et): e for et, e in zip(block.canonical_etypes, ends)}})
    drawn = sampler.draw_blocks(seeds, [[3] * len(types.canonical_etypes)] * 2
                                if types is not None else [3, 3])
    assert "dgl" not in sys.modules, "DGL was imported"
    with open(sys.argv[2] + f".{session.rank}", "w") as f:
        json.dump({"full": out, "drawn": [b.eid.numel() for b in drawn],
                   "seeds": seeds.tolist()}, f)
    session.shutdown()
""")


def _run_ranks(pdir: Path, code: str = _RANK, *args: str) -> list[dict]:
    """Each rank's result of ``code`` (written to a file: a pipe that fills would stall a
    rank, and with it its peer's collectives)."""
    port, procs = free_local_port(), []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
               "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        procs.append(subprocess.Popen([sys.executable, "-c", _BLOCK + code, str(pdir),
                                       str(pdir) + ".out", *args], cwd=ROOT, env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True))
    for proc in procs:
        _, stderr = proc.communicate(timeout=240)
        assert proc.returncode == 0, stderr[-3000:]
    return [json.loads(Path(f"{pdir}.out.{rank}").read_text()) for rank in range(2)]


def _in_edges(src, dst, eid, nodes) -> list:
    keep = np.isin(dst, nodes)
    return sorted(zip(src[keep].tolist(), dst[keep].tolist(), eid[keep].tolist()))


def test_untyped_blocks_are_drawn_without_dgl(tmp_path):
    ds = read_dataset(builtin_path("cora"))
    partition_dataset(builtin_path("cora"), tmp_path / "parts", "hash", 2)
    pdir = PartitionDir(tmp_path / "parts")
    maps = pdir.relabeling
    src, dst = (x if maps is None else maps[1][x] for x in (ds.src, ds.dst))
    eid = np.arange(ds.src.size)
    for out in _run_ranks(tmp_path / "parts"):
        nodes = out["seeds"]
        assert out["full"][-1]["dst"]["_N"] == nodes
        for block in reversed(out["full"]):
            assert sorted(block["dst"]["_N"]) == sorted(nodes)
            s, d, e = block["edges"]["_N/_E/_N"]
            assert sorted(zip(s, d, e)) == _in_edges(src, dst, eid, nodes)
            nodes = sorted(set(nodes) | set(s))
        assert 0 < out["drawn"][1] <= 3 * len(out["seeds"])


def _typed_dataset():
    rng = np.random.default_rng(3)
    ends = {("author", "writes", "paper"): (rng.integers(0, 30, 120), rng.integers(0, 50, 120)),
            ("paper", "cites", "paper"): (rng.integers(0, 50, 150), rng.integers(0, 50, 150))}
    return GraphDataset.typed({"author": NodeTable(30),
                          "paper": NodeTable(50, rng.normal(size=(50, 4)).astype(np.float32))},
                         {et: EdgeTable(s, d) for et, (s, d) in ends.items()}, num_classes=0)


def test_typed_blocks_are_drawn_without_dgl(tmp_path):
    ds = _typed_dataset()
    write_dataset(ds, tmp_path / "typed")
    partition_dataset(tmp_path / "typed", tmp_path / "parts", "hash", 2)
    for out in _run_ranks(tmp_path / "parts"):
        last = out["full"][-1]
        nodes = last["dst"]["paper"]  # per-type ids of the papers among the seeds
        assert nodes and last["dst"]["author"]
        for etype, table in ds.edges.items():
            s, d, eid = last["edges"]["/".join(etype)]
            assert sorted(zip(s, d, eid)) == _in_edges(table.src, table.dst,
                                                       np.arange(table.src.size), nodes)
        assert out["drawn"][1] > 0
