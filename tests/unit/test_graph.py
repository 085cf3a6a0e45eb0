"""The package's graph (``dglx_dist.graph`` / ``heterograph``): what DGL's ``dgl.graph`` /
``dgl.heterograph`` give for the same input, read through the same API (types, counts, edges,
degrees, data views, repr); bad input refused in one line; ``from_dgl`` and the partition
cache read it as a DGLGraph; where DGL cannot be imported the dataset loader gives it and it
partitions (``distribute`` under torchrun where the drop-in API imports without DGL, and with
DGL installed in any case)."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from dglx_dist.data import (Graph, builtin_path, from_dgl, graph, heterograph, read_dataset,
                            to_graph)
from dglx_dist.errors import DglxError
from tests.unit.test_hetero_data import _same, _toy
from tests.unit.test_import_boundary import _BLOCK

ROOT = Path(__file__).resolve().parents[2]
T = torch.tensor

HOMOGENEOUS = {  # name -> (data, keyword arguments) for graph()
    "tensors": ((T([2, 0, 2, 1, 2, 0]), T([3, 1, 0, 2, 3, 0])), {}),
    "int32": ((T([0, 3, 3], dtype=torch.int32), T([1, 0, 2], dtype=torch.int32)), {}),
    "lists, more nodes": (([0, 1, 1], [1, 2, 0]), {"num_nodes": 6}),
    "idtype": ((T([4, 1]), T([0, 0])), {"idtype": torch.int32}),
    "no edges": (([], []), {"num_nodes": 3}),
    "coo": (("coo", (T([1, 0]), T([0, 2]))), {}),
    "csr": (("csr", ([0, 2, 3, 3, 3], [1, 2, 0], [2, 0, 1])), {}),
    "csc": (("csc", (T([0, 2, 3, 3]), T([1, 2, 0]), T([], dtype=torch.int64))), {}),
}
HETERO = {  # name -> (data_dict, num_nodes_dict)
    "two types": ({("u", "follows", "u"): (T([0, 1, 2]), T([1, 2, 2])),
                   ("u", "plays", "game"): (T([0, 2]), T([3, 0]))}, None),
    "counts given, a type without edges": (
        {("a", "r", "b"): ([0, 1], [1, 1]), ("b", "s", "a"): ([0], [2])},
        {"a": 4, "b": 2, "c": 5}),
    "one type, named": ({("user", "knows", "user"): ([0, 3], [3, 1])}, None),
    "one relation name twice": ({("u", "r", "u"): ([0], [1]), ("u", "r", "v"): ([1], [0])}, None),
    "one node type, two relations": ({("u", "a", "u"): ([0, 2], [1, 1]),
                                      ("u", "b", "u"): ([3], [0])}, None),
}


@pytest.fixture
def dgl():
    return pytest.importorskip("dgl")


def _both(dgl, kind: str, name: str):
    """(DGL's graph, ours) of the same input."""
    if kind == "graph":
        data, kw = HOMOGENEOUS[name]
        return dgl.graph(data, **kw), graph(data, **kw)
    data, counts = HETERO[name]
    return dgl.heterograph(data, counts), heterograph(data, counts)


def _same_value(a, b):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.device == b.device
        assert torch.equal(a, b), (a, b)
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            _same_value(x, y)
    else:
        assert type(a) is type(b) and a == b, (a, b)


def _readings(g) -> list:
    """Everything the surface reads, in one list (each type's, and the whole graph's)."""
    out = [g.ntypes, g.etypes, g.canonical_etypes, g.is_homogeneous, g.idtype, g.device,
           g.num_nodes(), g.num_edges(), g.number_of_nodes(), g.number_of_edges(), repr(g)]
    out += [(g.num_nodes(t), g.nodes(t)) for t in g.ntypes]
    for et in g.canonical_etypes:
        out += [g.num_edges(et)] + [g.edges(form=f, order=o, etype=et) for f in ("uv", "eid", "all")
                                    for o in ("eid", "srcdst")]
        n_dst, n_src = g.num_nodes(et[2]), g.num_nodes(et[0])
        out += [g.in_degrees(etype=et), g.out_degrees(etype=et)]
        if n_dst and n_src:
            out += [g.in_degrees(n_dst - 1, etype=et), g.out_degrees(np.int64(0), etype=et),
                    g.in_degrees([0, n_dst - 1], etype=et), g.out_degrees(g.nodes(et[0])[-1:], etype=et)]
    if len(g.canonical_etypes) == 1:
        out += [g.edges(), g.edges(form="all", order="srcdst"), g.in_degrees(), g.out_degrees()]
    return out


@pytest.mark.dgl
@pytest.mark.parametrize("name", list(HOMOGENEOUS))
def test_graph_reads_as_dgls(dgl, name):
    theirs, ours = _both(dgl, "graph", name)
    assert isinstance(ours, Graph)
    _same_value(_readings(theirs), _readings(ours))


@pytest.mark.dgl
@pytest.mark.parametrize("name", list(HETERO))
def test_heterograph_reads_as_dgls(dgl, name):
    theirs, ours = _both(dgl, "heterograph", name)
    _same_value(_readings(theirs), _readings(ours))


def _fill(g):
    """The same data set on either graph (through each view DGL offers)."""
    if g.is_homogeneous:
        n, m = g.num_nodes(), g.num_edges()
        g.ndata["feat"] = torch.arange(n * 2, dtype=torch.float32).reshape(n, 2)
        g.ndata["label"] = torch.arange(n) % 3
        g.edata["w"] = torch.arange(m, dtype=torch.float64)
        return
    for t in g.ntypes:
        g.nodes[t].data["feat"] = torch.ones(g.num_nodes(t), 3)
    first = g.ntypes[0]
    label = torch.zeros(g.num_nodes(first), dtype=torch.int64)
    g.ndata["label"] = label if len(g.ntypes) == 1 else {first: label}  # DGL's rule
    for et in g.canonical_etypes:
        g.edges[et].data["w"] = torch.arange(g.num_edges(et), dtype=torch.float32)


def _data_readings(g) -> list:
    out = [sorted(g.ndata), sorted(g.edata), len(g.ndata), "feat" in g.ndata]
    out += [(t, sorted(g.nodes[t].data), dict(g.nodes[t].data)) for t in g.ntypes]
    out += [(et, dict(g.edges[et].data)) for et in g.canonical_etypes]
    out += [g.ndata["feat"], g.edata["w"], g.ndata["label"]]
    if g.is_homogeneous:
        out.append(repr(g))
    return out


@pytest.mark.dgl
@pytest.mark.parametrize("kind, name", [("graph", "tensors"), ("graph", "no edges"),
                                        ("heterograph", "two types"),
                                        ("heterograph", "one type, named"),
                                        ("heterograph", "one node type, two relations")])
def test_data_views_read_and_write_as_dgls(dgl, kind, name):
    theirs, ours = _both(dgl, kind, name)
    for g in (theirs, ours):
        _fill(g)
    _same_value(str(_data_readings(theirs)), str(_data_readings(ours)))
    for g in (theirs, ours):
        del g.ndata["feat"]
        del g.edata["w"]
    _same_value(str(_data_readings_after_delete(theirs)), str(_data_readings_after_delete(ours)))


def _data_readings_after_delete(g):
    return [sorted(g.ndata), sorted(g.edata)] + [sorted(g.nodes[t].data) for t in g.ntypes]


def test_several_types_data_by_type_and_a_name_none_has_is_a_key_error():
    g = heterograph(HETERO["two types"][0])
    g.ndata["x"] = {"u": torch.zeros(3)}
    assert sorted(g.ndata["x"]) == ["u"] and "x" in g.ndata and "y" not in g.ndata
    g.edata["w"] = {"plays": torch.ones(2)}  # a relation name, as DGL takes it
    assert list(g.edata["w"]) == [("u", "plays", "game")]
    with pytest.raises(KeyError, match="no type of the graph has data 'y'"):
        g.ndata["y"]  # DGL's gives {} (the module docstring of graphcore/frames.py)
    with pytest.raises(TypeError, match="takes a dict"):
        g.ndata["z"] = torch.zeros(7)


def test_to_a_device_moves_the_ends_and_the_data():
    g = graph((T([0, 1]), T([1, 2])))
    g.ndata["h"] = torch.ones(3, 2)
    assert g.to("cpu") is g
    moved = g.to("meta")
    assert moved.device == torch.device("meta") and moved.ndata["h"].device.type == "meta"
    assert moved.edges()[0].device.type == "meta" and g.ndata["h"].device.type == "cpu"
    assert moved.idtype == torch.int64 and moved.num_edges() == 2


BAD = [  # (what a user wrote, words the one-line message holds)
    (lambda: graph((T([0, 1]), T([1]))), "src has 2 ids and dst 1"),
    (lambda: graph(([0, 5], [1, 2]), num_nodes=3), "num_nodes is 3, but the largest id is 5"),
    (lambda: graph(([0, -1], [1, 2])), "holds id -1"),
    (lambda: graph(([0.5], [1.0])), "expected a 1-D sequence of integer ids"),
    (lambda: graph((T([0], dtype=torch.int32), T([1]))), "differ in dtype"),
    (lambda: graph(([0], [1]), idtype=torch.float32), "expected torch.int32 or torch.int64"),
    (lambda: graph([(0, 1)]), "expected (src, dst)"),
    (lambda: graph(("csr", ([0, 2], [1]))), "csr edges take 3 arrays"),
    (lambda: graph(("csr", ([0, 5], [1], []))), "indptr is not a row pointer"),
    (lambda: heterograph({("u", "r", "v"): ([0], [1])}, {"u": 1}),
     "node types ['v'] of the edge types have no count"),
    (lambda: heterograph({("u", "r", "u"): ([0], [4])}, {"u": 2}),
     "num_nodes_dict['u'] is 2, but node type 'u''s largest id is 4"),
    (lambda: heterograph({"r": ([0], [1])}), "expected a (src_type, relation, dst_type)"),
    (lambda: heterograph({}), "expected a non-empty dict"),
    (lambda: graph(([0], [1])).num_nodes("user"), "node type 'user' is not one of"),
    (lambda: graph(([0], [1])).edges(etype="likes"), "edge type 'likes': 0 of"),
    (lambda: graph(([0], [1])).nodes["user"], "node type 'user'"),
    (lambda: heterograph(HETERO["one relation name twice"][0]).num_edges("r"),
     "2 of the graph's edge types have that name"),
    (lambda: heterograph(HETERO["two types"][0]).in_degrees(), "name one (etype=...)"),
    (lambda: graph(([0], [1])).in_degrees(5), "expected ids in [0, 2)"),
    (lambda: graph(([0], [1])).edges(form="pairs"), "form 'pairs' is not one of"),
    (lambda: graph(([0], [1])).ndata.__setitem__("h", torch.ones(5)), "expected 2 rows"),
    (lambda: graph(([0], [1])).ndata.__setitem__("h", [1, 2]), "expected a torch.Tensor"),
]


@pytest.mark.parametrize("call, words", BAD, ids=[w for _, w in BAD])
def test_bad_input_is_one_line_naming_it(call, words):
    with pytest.raises(DglxError) as info:
        call()
    message = str(info.value).strip("'\"")
    assert words in message and "\n" not in message, message


@pytest.mark.dgl
def test_from_dgl_reads_either_graph_the_same(dgl):
    from dglx_dist.api.graph import fingerprint
    from dglx_dist.data import CoraGraphDataset, to_dgl

    assert isinstance(CoraGraphDataset()[0], dgl.DGLGraph)  # unchanged where DGL is installed

    cora = read_dataset(builtin_path("cora"))
    for ds in (cora, _toy()):
        theirs, ours = to_dgl(ds), to_graph(ds)
        assert isinstance(ours, Graph) and not isinstance(theirs, Graph)
        _same(from_dgl(theirs), from_dgl(ours))
        _same(ds, from_dgl(ours, num_classes=ds.num_classes))
        assert fingerprint(theirs) == fingerprint(ours)  # the same partition cache


def test_the_package_graph_of_a_dataset_round_trips():
    ds = _toy()
    g = to_graph(ds)
    assert g.ntypes == ["author", "paper"] and g.nodes["paper"].data["feat"].shape == (5, 3)
    assert sorted(g.edges[("paper", "cites", "paper")].data) == ["w"]
    _same(ds, from_dgl(g, num_classes=ds.num_classes))


def _blocked(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _BLOCK + textwrap.dedent(code), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=240)


def test_without_dgl_the_loader_gives_the_package_graph_and_it_partitions(tmp_path):
    proc = _blocked("""
        import json, sys
        import dglx_dist
        from dglx_dist.data import CoraGraphDataset, Graph, from_dgl, read_dataset, write_dataset
        from dglx_dist.partition import PartitionDir, partition_dataset

        dataset = CoraGraphDataset()
        g = dataset[0]
        assert isinstance(g, Graph) and g.num_nodes() == 2708 and g.num_edges() == 10556
        assert g.ndata["train_mask"].sum() == 140 and dataset.num_classes == 7
        g2 = dglx_dist.graph(g.edges(), num_nodes=g.num_nodes())
        assert g2.in_degrees().sum() == 10556
        dataset = from_dgl(g, name="cora")
        write_dataset(dataset, sys.argv[1] + "/data")
        assert read_dataset(sys.argv[1] + "/data").num_edges == 10556
        partition_dataset(dataset, sys.argv[1] + "/parts", "hash", 2)
        pdir = PartitionDir(sys.argv[1] + "/parts")
        assert pdir.num_parts == 2 and pdir.num_nodes == 2708
        assert "dgl" not in sys.modules
    """, str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]


_DISTRIBUTE = """
import json, sys
import dglx_dist
from dglx_dist.data import CoraGraphDataset, Graph, builtin_path, read_dataset, to_graph
from dglx_dist.data.convert import dgl_installed

# the loader's graph is the package's where DGL is absent
g = to_graph(read_dataset(builtin_path("cora"))) if dgl_installed() else CoraGraphDataset()[0]
assert isinstance(g, Graph)
dist = dglx_dist.distribute(g, "distdgl", cache_dir=sys.argv[1] + "/cache")
with open(f"{sys.argv[1]}/rank{dist.rank()}.json", "w") as f:
    json.dump({"nodes": dist.num_nodes(), "edges": dist.num_edges(),
               "train": int(dist.ndata["train_mask"][:].sum()), "dgl": "dgl" in sys.modules}, f)
dist.close()
"""


def _torchrun_distribute(tmp_path: Path, pythonpath: list[str]) -> list[dict]:
    script = tmp_path / "run.py"
    script.write_text(_DISTRIBUTE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath + [str(ROOT)])}
    torchrun = Path(sys.executable).with_name("torchrun")
    proc = subprocess.run([str(torchrun), "--nproc-per-node", "2", str(script), str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, "\n".join(line for line in proc.stderr.splitlines()
                                           if "Error" in line or "error" in line)[-3000:]
    assert any(p.name.startswith("graph-") for p in (tmp_path / "cache").iterdir())
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.dgl
@pytest.mark.dist
def test_distribute_takes_the_package_graph_under_torchrun(dgl, tmp_path):
    for result in _torchrun_distribute(tmp_path, []):
        result.pop("dgl")  # imported or not: the API imports DGL where it needs it
        assert result == {"nodes": 2708, "edges": 10556, "train": 140}


@pytest.mark.dist
def test_distribute_without_dgl_under_torchrun(tmp_path):
    blocker = tmp_path / "nodgl"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(_BLOCK)
    for result in _torchrun_distribute(tmp_path, [str(blocker)]):
        assert result == {"nodes": 2708, "edges": 10556, "train": 140, "dgl": False}
