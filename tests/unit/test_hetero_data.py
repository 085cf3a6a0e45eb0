"""Typed datasets: the in-memory tables, the directory format, DGL conversion, bad input."""
import json

import numpy as np
import pytest

from dglx_dist.data import (EdgeTable, GraphDataset, NodeTable, from_dgl, is_hetero, read_meta,
                            read_dataset, to_dgl, write_dataset)
from dglx_dist.errors import DatasetFormatError


def _toy(seed=0):
    rng = np.random.default_rng(seed)
    paper = NodeTable(5, rng.normal(size=(5, 3)).astype(np.float32), rng.integers(0, 4, 5),
                      train=np.array([1, 1, 0, 0, 0], bool), val=np.array([0, 0, 1, 0, 0], bool),
                      test=np.array([0, 0, 0, 1, 1], bool))
    edges = {("author", "writes", "paper"): EdgeTable(np.array([0, 1, 2, 3]),
                                                      np.array([0, 0, 1, 4])),
             ("paper", "cites", "paper"): EdgeTable(np.array([0, 1, 4]), np.array([1, 2, 0]),
                                                    {"w": np.array([.5, 1., 2.], np.float32)})}
    return GraphDataset.typed({"paper": paper, "author": NodeTable(4)}, edges, num_classes=4,
                         extra={"name": "toy"})


def _same(a: GraphDataset, b: GraphDataset) -> None:
    assert a.ntypes == b.ntypes and a.canonical_etypes == b.canonical_etypes
    assert (a.num_classes, a.category) == (b.num_classes, b.category)
    for t in a.ntypes:
        x, y = a.nodes[t], b.nodes[t]
        assert x.num_nodes == y.num_nodes and x.feat_dim == y.feat_dim
        for f in ("feat", "label", "train", "val", "test"):
            u, v = getattr(x, f), getattr(y, f)
            assert (u is None) == (v is None) and (u is None or np.array_equal(u, v)), (t, f)
    for et in a.canonical_etypes:
        x, y = a.edges[et], b.edges[et]
        assert np.array_equal(x.src, y.src) and np.array_equal(x.dst, y.dst)
        assert sorted(x.edata) == sorted(y.edata)
        for k in x.edata:
            assert np.array_equal(x.edata[k], y.edata[k]) and x.edata[k].dtype == y.edata[k].dtype


def test_types_are_in_dgls_order_and_the_one_labeled_type_is_the_category():
    ds = _toy()
    assert ds.ntypes == ["author", "paper"]
    assert ds.canonical_etypes == [("author", "writes", "paper"), ("paper", "cites", "paper")]
    assert ds.category == "paper" and ds.num_nodes == 9 and ds.num_edges == 7
    assert ds.ntype_offsets().tolist() == [0, 4, 9]
    assert ds.node_types().tolist() == [0] * 4 + [1] * 5


def test_directory_round_trip_keeps_every_type(tmp_path):
    ds = _toy()
    write_dataset(ds, tmp_path / "d")
    assert is_hetero(tmp_path / "d")
    assert not (tmp_path / "d" / "nodes" / "author.parquet").exists()  # nothing to store
    _same(ds, read_dataset(tmp_path / "d"))


def test_the_homogeneous_reader_names_the_types_it_does_not_take(tmp_path):
    write_dataset(_toy(), tmp_path / "d")
    with pytest.raises(DatasetFormatError, match=r"heterogeneous dataset \(node types "
                       r"\['author', 'paper'\]\)"):
        read_meta(tmp_path / "d")


@pytest.mark.dgl
def test_homogeneous_view_numbers_nodes_and_edges_as_dgl_to_homogeneous():
    import dgl

    ds = _toy()
    hg = dgl.to_homogeneous(to_dgl(ds))
    src, dst = ds.homogeneous_edges()
    assert np.array_equal(src, hg.edges()[0].numpy()) and np.array_equal(dst, hg.edges()[1].numpy())
    assert np.array_equal(ds.node_types(), hg.ndata[dgl.NTYPE].numpy())
    assert np.array_equal(np.repeat(np.arange(2), [4, 3]), hg.edata[dgl.ETYPE].numpy())


@pytest.mark.dgl
def test_dgl_round_trip_carries_every_type():
    ds = _toy()
    g = to_dgl(ds)
    assert g.ntypes == ds.ntypes and g.canonical_etypes == ds.canonical_etypes
    assert "feat" not in g.nodes["author"].data
    _same(ds, from_dgl(g, name="toy"))


def _write_meta(path, **change):
    meta = json.loads((path / "meta.json").read_text())
    meta.update(change)
    (path / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("change, match", [
    ({"canonical_etypes": [["author", "writes", "venue"], ["paper", "cites", "paper"]]},
     r"canonical_etypes\[0\].*over the node types \['author', 'paper'\]"),
    ({"num_edges": [4, 9]}, r"1_cites.parquet: 3 rows; expected 9"),
    ({"category": "venue"}, r"category 'venue' is not a node type"),
    ({"ntypes": {"paper": {"num_nodes": 5, "feat_dim": 3, "labeled": True},
                 "author": {"num_nodes": 3, "feat_dim": 0}}},
     r"0_writes.parquet: field 'src' row 3 = 3; expected a 'author' node id in \[0, 3\)"),
])
def test_a_typed_directory_that_disagrees_with_its_meta_is_refused_naming_the_file(
        tmp_path, change, match):
    write_dataset(_toy(), tmp_path / "d")
    _write_meta(tmp_path / "d", **change)
    with pytest.raises(DatasetFormatError, match=match):
        read_dataset(tmp_path / "d")


@pytest.mark.parametrize("build, match", [
    (lambda: GraphDataset.typed({"paper": NodeTable(2)}, {("paper", "cites", "venue"): EdgeTable(
        np.array([0]), np.array([0]))}), r"dst type 'venue' is not a node type"),
    (lambda: GraphDataset.typed({"paper": NodeTable(2)}, {("paper", "cites", "paper"): EdgeTable(
        np.array([0]), np.array([2]))}), r"dst id 2 is outside \[0, 2\) of node type 'paper'"),
    (lambda: GraphDataset.typed({"a/b": NodeTable(2)}, {}), r"node type name 'a/b' cannot be stored"),
    (lambda: GraphDataset.typed({"paper": NodeTable(2, label=np.array([0, 3]))}, {}, num_classes=3),
     r"node type 'paper': labels span \[0, 3\]; expected classes in \[0, 3\)"),
])
def test_bad_tables_are_refused_in_one_line_naming_the_type(build, match):
    with pytest.raises(DatasetFormatError, match=match):
        build()
