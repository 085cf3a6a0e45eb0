"""Sampling on the device (issue 79, DGL's ``use_uva``): a sampler's copy on a device draws
there, its blocks are there, and they are blocks of the graph. Two real processes (DGL
blocked in them) in a gloo group draw over their parts (typed and untyped) with the host's
sampler and with its copy on each device this machine has (the CPU always, a GPU where
there is one); a whole graph held locally (P3's structure cache) draws in-process. On the
CPU the copy draws exactly what the host's sampler draws from the same seeds; on a GPU
torch's generator there draws other numbers, so the blocks are checked against the
dataset's edges with numpy: every edge is an in-edge of its destination, no destination has
more than its fanout, no excluded edge is drawn, and the last layer's destinations are the
seeds."""
import dataclasses
import textwrap

import numpy as np
import pytest
import torch

from dglx_dist.data import builtin_path, read_dataset, write_dataset
from dglx_dist.partition import PartitionDir, partition_dataset
from dglx_dist.sampling import UNIFORM, LocalSampler, whole_graph
from tests.dist.test_sampling_without_dgl import _run_ranks, _typed_dataset

pytestmark = pytest.mark.dist
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
FANOUTS = (3, 5)  # input layer first

_RANK = textwrap.dedent("""
    import dataclasses, json, sys
    import torch
    import dglx_dist
    from dglx_dist.partition import PartitionDir
    from dglx_dist.sampling import UNIFORM, PartitionSampler

    def ends(block):
        out = {}
        for e, (st, _, dt) in enumerate(block.canonical_etypes):
            kind = block.etype == e
            src = block.nodes_of(block.ntypes.index(st))[block.src[kind]]
            dst = block.nodes_of(block.ntypes.index(dt), dst=True)[block.dst[kind]]
            out["/".join((st, dt))] = [src.tolist(), dst.tolist(), block.eid[kind].tolist()]
        return out

    session = dglx_dist.init(backend="gloo", device="cpu")
    pdir, device = PartitionDir(sys.argv[1]), sys.argv[3]
    host = PartitionSampler.of(pdir, pdir.load_part(session.rank), session.world)
    moved = host.to(device)
    types = pdir.types
    per = 1 if types is None else len(types.canonical_etypes)
    fanouts = [[k] * per if types is not None else k for k in (3, 5)]
    seeds = torch.arange(session.rank, pdir.num_nodes, 5)
    exclude = torch.arange(session.rank, pdir.edge_book().num_nodes, 3)
    options = dataclasses.replace(UNIFORM, seed=11)
    out = {"seeds": seeds.tolist(), "host_device": str(host.local_gid.device)}
    for name, sampler in (("host", host), ("moved", moved)):
        blocks = sampler.draw_blocks(seeds, fanouts, exclude, options)
        out[name] = [{"device": b.src.device.type, "edges": ends(b),
                      "dst": {t: b.nodes_of(i, dst=True).tolist()
                              for i, t in enumerate(b.ntypes)}} for b in blocks]
    with open(sys.argv[2] + f".{session.rank}", "w") as f:
        json.dump(out, f)
    session.shutdown()
""")


def _check_blocks(blocks: list[dict], seeds: dict, in_edges: dict, excluded: set) -> None:
    """``blocks`` (input layer first) are a draw of ``FANOUTS`` from the graph whose
    in-edges by ``(source type, destination type)`` are ``in_edges`` (a set of ``(src, dst,
    eid)`` each), the last layer's destinations ``seeds`` (by type), no edge of
    ``excluded`` (``(type pair, eid)``) among them."""
    assert blocks[-1]["dst"] == {t: v for t, v in seeds.items() if t in blocks[-1]["dst"]}
    for block, fanout in zip(blocks, FANOUTS):
        for pair, (s, d, e) in block["edges"].items():
            drawn = set(zip(s, d, e))
            assert len(drawn) == len(s), pair  # no edge twice
            assert drawn <= in_edges[pair], (pair, sorted(drawn - in_edges[pair])[:5])
            assert not {(pair, x) for x in e} & excluded, pair
            counts = np.bincount(np.asarray(d, dtype=np.int64)) if d else np.zeros(1)
            assert counts.max() <= fanout, pair


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("typed", [False, True], ids=["untyped", "typed"])
def test_a_samplers_copy_on_a_device_draws_blocks_of_the_graph_there(tmp_path, device, typed):
    if typed:
        ds = _typed_dataset()
        write_dataset(ds, tmp_path / "data")
        tables = {(st, dt): (t.src, t.dst) for (st, _, dt), t in ds.edges.items()}
        method = "hash"
    else:
        ds = read_dataset(builtin_path("cora"))
        tables = {("_N", "_N"): (ds.src, ds.dst)}
        method = "metis"
    partition_dataset(tmp_path / "data" if typed else builtin_path("cora"), tmp_path / "parts",
                      method, 2)
    pdir = PartitionDir(tmp_path / "parts")
    maps = pdir.relabeling if not typed else None
    in_edges = {}
    for pair, (src, dst) in tables.items():
        if maps is not None:  # a graph without types speaks partitioned ids
            src, dst = maps[1][src], maps[1][dst]
        in_edges["/".join(pair)] = set(zip(src.tolist(), dst.tolist(), range(src.size)))
    for out in _run_ranks(tmp_path / "parts", _RANK, device):  # (DGL blocked in the ranks)
        assert out["host_device"] == "cpu"
        assert {b["device"] for b in out["moved"]} == {torch.device(device).type}
        last = out["host"][-1]["dst"]
        for name in ("host", "moved"):
            _check_blocks(out[name], last, in_edges, _excluded(pdir, out["seeds"]))
        if device == "cpu":  # the same numbers from the same seeds
            assert out["moved"] == [{**b, "device": "cpu"} for b in out["host"]]
        if not typed:
            assert last == {"_N": out["seeds"]}


def _excluded(pdir: PartitionDir, seeds: list) -> set:
    """The edges a rank's draw excluded: every third partitioned edge id from its rank
    (``exclude`` in the rank's code), as ``(type pair, eid)``; the rank is read off its
    seeds' first id, which is the rank."""
    book = pdir.edge_book()
    parted = np.arange(seeds[0], book.num_nodes, 3)
    eid = np.concatenate([pdir.load_part(p).eid for p in range(pdir.num_parts)])
    user = eid[parted]  # partitioned edge ids are the parts' edges in order
    types = pdir.types
    if types is None:
        return {("_N/_N", int(e)) for e in user}
    offsets = np.asarray(types.etype_offsets)
    kind = np.searchsorted(offsets[1:-1], user, side="right")
    return {("/".join((types.canonical_etypes[k][0], types.canonical_etypes[k][2])),
             int(e - offsets[k])) for k, e in zip(kind, user)}


@pytest.mark.parametrize("device", DEVICES)
def test_a_whole_graphs_sampler_draws_on_a_device_too(tmp_path, device):
    ds = read_dataset(builtin_path("cora"))
    partition_dataset(builtin_path("cora"), tmp_path / "parts", "hash", 2)
    pdir = PartitionDir(tmp_path / "parts")
    host = LocalSampler(whole_graph([pdir.load_part(p) for p in range(2)], pdir.num_nodes))
    moved = host.to(device)
    seeds = torch.arange(0, pdir.num_nodes, 4)
    options = dataclasses.replace(UNIFORM, seed=5)
    maps = pdir.relabeling
    src, dst = (x if maps is None else maps[1][x] for x in (ds.src, ds.dst))
    in_edges = {"_N/_N": set(zip(src.tolist(), dst.tolist(), range(src.size)))}
    drawn = {}
    for name, sampler in (("host", host), ("moved", moved)):
        blocks = sampler.draw_blocks(seeds, FANOUTS, None, options)
        assert {b.src.device.type for b in blocks} == {torch.device(device).type if
                                                       name == "moved" else "cpu"}
        drawn[name] = [{"dst": {"_N": b.nodes_of(0, dst=True).tolist()},
                        "edges": {"_N/_N": [b.nodes_of(0)[b.src].tolist(),
                                            b.nodes_of(0, dst=True)[b.dst].tolist(),
                                            b.eid.tolist()]}} for b in blocks]
        _check_blocks(drawn[name], {"_N": seeds.tolist()}, in_edges, set())
    if device == "cpu":
        assert drawn["moved"] == drawn["host"]
