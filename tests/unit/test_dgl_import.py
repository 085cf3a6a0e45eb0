"""Importing DGL's partition_graph output: same parts, same ids, the same graph and node data;
each kind of bad input refused with an error naming the file and field."""
import json
from collections import Counter
from pathlib import Path

import dgl
import numpy as np
import pytest
import torch

from dglx_dist.cli import main
from dglx_dist.data import to_dgl
from dglx_dist.errors import PartitionError, PartitionFormatError
from dglx_dist.partition import PartitionDir, import_dgl_partitions
from dglx_dist.partition.columns import by_columns
from dglx_dist.partition.io import MANIFEST

CASES = {"metis2": ("metis", 2), "random3": ("random", 3)}


def _dgl_partition(cora, out: Path, method: str, parts: int):
    g = to_dgl(cora)
    g.edata["w"] = torch.arange(g.num_edges(), dtype=torch.float32)  # edge data DGL keeps
    ids = torch.arange(g.num_nodes())  # node data DGL keeps beside features, labels, masks:
    g.ndata["year"] = ids  # each node's original id, as a scalar,
    g.ndata["pos"] = torch.stack([ids, -ids], 1).short()  # as a vector of another dtype,
    g.ndata["odd"] = ids % 2 == 1  # as a bool
    g.ndata["img"] = torch.zeros(g.num_nodes(), 2, 2)  # and one we cannot keep (rows of 2-D)
    nids, eids = dgl.distributed.partition_graph(
        g, "cora", parts, str(out), part_method=method, return_mapping=True,
        balance_ntypes=g.ndata["train_mask"] if method == "metis" else None,
        balance_edges=method == "metis")
    return out / "cora.json", nids.numpy(), eids.numpy()


@pytest.fixture(scope="module")
def dgl_parts(cora, tmp_path_factory):
    """name -> (json path, orig_nids, orig_eids), DGL's partitions of Cora."""
    root = tmp_path_factory.mktemp("dgl")
    return {name: _dgl_partition(cora, root / name, *args) for name, args in CASES.items()}


@pytest.fixture(scope="module")
def imported(dgl_parts, tmp_path_factory):
    """name -> our partition directory, imported with the original ids."""
    root = tmp_path_factory.mktemp("ours")
    return {name: import_dgl_partitions(js, root / name, orig_nids=nids,
                                        orig_eids=torch.from_numpy(eids))
            for name, (js, nids, eids) in dgl_parts.items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_ownership_and_ids_are_dgls(dgl_parts, imported, name):
    js, nids, _ = dgl_parts[name]
    pdir, meta = PartitionDir(imported[name]), json.loads(js.read_text())
    ranges = meta["node_map"]["_N"]
    assert pdir.manifest["node_book"]["offsets"] == [r[0] for r in ranges] + [ranges[-1][1]]
    owned = np.concatenate([pdir.core_ids(p) for p in range(pdir.num_parts)])
    assert np.array_equal(owned, np.arange(pdir.num_nodes))  # every node owned once
    gpb = dgl.distributed.load_partition_book(str(js), 0)[0]
    ids = torch.arange(pdir.num_nodes)
    owner = gpb.nid2partid(ids)
    assert np.array_equal(pdir.owner(ids.numpy()), owner.numpy())
    for p in range(pdir.num_parts):
        mine, book = ids[owner == p], dgl.distributed.load_partition_book(str(js), p)[0]
        assert np.array_equal(pdir.to_local(mine.numpy()), book.nid2localnid(mine, p).numpy())
    back = np.empty_like(nids)
    back[nids] = np.arange(nids.size)
    assert np.array_equal(pdir.to_original(ids.numpy()), nids)
    assert np.array_equal(back[pdir.to_original(ids.numpy())], ids.numpy())  # round trip


@pytest.mark.parametrize("name", sorted(CASES))
def test_parts_hold_the_in_edges_and_node_data_of_their_nodes(cora, imported, name):
    pdir = PartitionDir(imported[name])
    seen_edges = 0
    for p in range(pdir.num_parts):
        part = pdir.load_part(p)
        orig = np.concatenate([part.core_orig, part.halo_orig])
        got = Counter(zip(orig[part.src].tolist(), orig[part.dst].tolist()))
        into = np.isin(cora.dst, part.core_orig)
        assert got == Counter(zip(cora.src[into].tolist(), cora.dst[into].tolist())), p
        assert np.array_equal(cora.src[part.eid], orig[part.src])  # eid = the input's edge id
        assert np.array_equal(cora.dst[part.eid], orig[part.dst])
        assert np.all(pdir.owner(part.halo_gid) != p)
        assert np.array_equal(part.halo_gid, np.unique(part.halo_gid))
        assert np.array_equal(pdir.to_original(part.halo_gid), part.halo_orig)
        np.testing.assert_array_equal(part.feat, cora.feat[part.core_orig])
        for key in ("label", "train", "val", "test"):
            assert np.array_equal(getattr(part, key), getattr(cora, key)[part.core_orig]), key
        seen_edges += part.src.size
    assert seen_edges == cora.num_edges
    assert pdir.num_classes == cora.num_classes and pdir.feat_dim == cora.feat_dim


def test_provenance_names_what_was_not_imported(imported):
    m = PartitionDir(imported["metis2"]).manifest
    assert m["relabeled"] and m["partitioner"]["options"]["part_method"] == "metis"
    assert m["dataset"]["not_imported"] == {"node_data": ["_N/img"]}
    assert m["dataset"]["node_ids"].startswith("given")


def test_edge_data_is_imported_by_original_edge_id(imported):
    """_N:_E:_N/w held each edge's original id: every stored edge carries its own."""
    for name in imported:
        pdir = PartitionDir(imported[name])
        assert pdir.manifest["edge_data"] == {"w": {"dtype": "float32", "shape": []}}
        for p in range(pdir.num_parts):
            part, data = pdir.load_part(p), pdir.load_edge_data(p)
            assert np.array_equal(data["w"], part.eid.astype(np.float32)), (name, p)


def test_other_node_data_is_imported_by_original_node_id(imported):
    """year held each node's original id, pos (id, -id) as int16, odd its parity: every core
    node carries its own, in the dtype and shape DGL's files have (DGL stores bools as
    uint8, and its DistGraph reads them so)."""
    for name in imported:
        pdir = PartitionDir(imported[name])
        assert pdir.node_data == {"year": {"dtype": "int64", "shape": []},
                                  "pos": {"dtype": "int16", "shape": [2]},
                                  "odd": {"dtype": "uint8", "shape": []}}  # DGL's file
        for p in range(pdir.num_parts):
            orig, data = pdir.load_part(p).core_orig, pdir.load_node_data(p)
            assert np.array_equal(data["year"], orig), (name, p)
            assert np.array_equal(data["pos"], np.stack([orig, -orig], 1).astype(np.int16))
            assert np.array_equal(data["odd"], orig % 2)


def test_laid_out_by_columns_the_other_node_data_stays(imported, tmp_path):
    """P3's layout of an import (the runner's, by_columns) keeps the other node data."""
    out = PartitionDir(by_columns(imported["metis2"], tmp_path / "cols"))
    pdir = PartitionDir(imported["metis2"])
    assert out.node_data == pdir.node_data and out.feature_layout == "columns"
    for p in range(pdir.num_parts):
        for name, values in pdir.load_node_data(p).items():
            np.testing.assert_array_equal(out.load_node_data(p)[name], values)


def test_a_name_our_stored_data_takes_is_not_imported(cora, tmp_path):
    g = to_dgl(cora)
    g.ndata["labels"], g.ndata["label"] = g.ndata["label"], torch.ones(g.num_nodes())
    dgl.distributed.partition_graph(g, "cora", 1, str(tmp_path / "dgl"))
    out = import_dgl_partitions(tmp_path / "dgl" / "cora.json", tmp_path / "ours",
                                keys={"label": "labels"})
    pdir = PartitionDir(out)
    assert pdir.manifest["dataset"]["not_imported"] == {"node_data": ["_N/label"]}
    assert pdir.node_data == {} and np.array_equal(pdir.load_part(0).label,
                                                   cora.label[pdir.load_part(0).core_orig])


def test_without_orig_ids_dgl_ids_are_the_original_ids(cora, dgl_parts, tmp_path):
    js, nids, _ = dgl_parts["random3"]
    pdir = PartitionDir(import_dgl_partitions(js, tmp_path / "o", num_classes=9))
    assert not pdir.manifest["relabeled"] and pdir.num_classes == 9
    assert "not given" in pdir.manifest["dataset"]["node_ids"]
    part = pdir.load_part(1)
    assert np.array_equal(part.core_orig, part.core_gid)
    np.testing.assert_array_equal(part.feat, cora.feat[nids[part.core_gid]])


@pytest.mark.parametrize("names", [{"feat": "features", "label": "labels"},  # DGL's examples
                                   {"feat": "x", "label": "label"}])  # the one float tensor
def test_the_graphs_own_names_are_found_and_kept(cora, tmp_path, names):
    """DGL's distributed examples partition with ndata "features" / "labels"; the import finds
    them (or the one floating-point tensor) and records the names the graph gave."""
    g = to_dgl(cora)
    for role, name in names.items():
        g.ndata[name] = g.ndata.pop(role)
    nids, _ = dgl.distributed.partition_graph(g, "cora", 2, str(tmp_path / "dgl"),
                                              return_mapping=True)
    pdir = PartitionDir(import_dgl_partitions(tmp_path / "dgl" / "cora.json", tmp_path / "o"))
    assert pdir.ndata_names == {k: v for k, v in names.items() if k != v}
    assert pdir.manifest["dataset"]["node_data_keys"]["feat"] == f"_N/{names['feat']}"
    part = pdir.load_part(1)
    np.testing.assert_array_equal(part.feat, cora.feat[nids[part.core_gid]])
    np.testing.assert_array_equal(part.label, cora.label[nids[part.core_gid]])


def test_features_under_no_usual_name_beside_other_floats_are_refused(cora, tmp_path):
    g = to_dgl(cora)
    g.ndata["feature"] = g.ndata.pop("feat")  # no usual name, and not the one float tensor
    g.ndata["noise"] = torch.zeros(g.num_nodes(), 2)
    dgl.distributed.partition_graph(g, "cora", 1, str(tmp_path / "dgl"))
    with pytest.raises(PartitionFormatError, match=r"no '_N/feat' \(the feat key"):
        import_dgl_partitions(tmp_path / "dgl" / "cora.json", tmp_path / "o")


def _variant(tmp_path: Path, js: Path, edit) -> Path:
    """A copy of DGL's JSON (part files named by absolute path) changed by ``edit``."""
    m = json.loads(js.read_text())
    for p in range(m["num_parts"]):
        m[f"part-{p}"] = {k: str(js.parent / v) for k, v in m[f"part-{p}"].items()}
    edit(m)
    out = tmp_path / "variant" / js.name
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(m))
    return out


def _swap_parts(m):
    m["part-0"], m["part-1"] = m["part-1"], m["part-0"]


BAD = {
    "missing field": (lambda m: m.pop("num_nodes"), r"field 'num_nodes' = None; expected an int"),
    "missing part entry": (lambda m: m.pop("part-1"), r"field 'part-1' = None; expected an obj"),
    "missing part file": (lambda m: m["part-1"].update(node_feats="/nonexistent/node_feat.dgl"),
                          r"/nonexistent/node_feat.dgl: missing \(field 'part-1'.'node_feats'"),
    "ranges not contiguous": (lambda m: m["node_map"]["_N"][1].__setitem__(0, 7),
                              r"field 'node_map'\['_N'\] = .*expected contiguous ranges"),
    "ranges of other parts": (lambda m: m["node_map"].update(_N=[[0, 1000], [1000, 2708]]),
                              r"part0/graph.dgl: its \d+ inner nodes .* do not have the "
                              r"ids .* \[0, 1000\) that .*cora.json gives it in field "
                              r"'node_map'\['_N'\]\[0\]"),
    "parts swapped": (_swap_parts, r"part1/graph.dgl: its \d+ inner nodes"),
    "edge ranges": (lambda m: m["edge_map"].update({"_N:_E:_N": [[0, 10], [10, 10556]]}),
                    r"edges into inner nodes do not have the ids .*'edge_map'"),
    "node_map file": (lambda m: m.update(node_map="node_map.npy"),
                      r"field 'node_map' is the file name 'node_map.npy'"),
    "no halo": (lambda m: m.update(halo_hops=0), r"field 'halo_hops' = 0; expected an int"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_dgl_output_is_refused(dgl_parts, tmp_path, case):
    edit, message = BAD[case]
    js = _variant(tmp_path, dgl_parts["metis2"][0], edit)
    with pytest.raises(PartitionFormatError, match=message):
        import_dgl_partitions(js, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["variant"]  # no temporary directory left


@pytest.mark.parametrize("kwargs, error, message", [
    ({"keys": {"feat": "x"}}, PartitionFormatError, r"no '_N/x' \(the feat key; found \["),
    ({"keys": {"colour": "x"}}, PartitionError, r"key\(s\) \['colour'\] not understood"),
    ({"num_classes": 3}, PartitionFormatError, r"label 6; expected labels in \[0, num_cl"),
    ({"orig_nids": np.zeros(2708, np.int64)}, PartitionError, "not a permutation of"),
    ({"orig_eids": np.arange(5)}, PartitionError, "expected 10556 integers"),
])
def test_bad_arguments_are_refused(dgl_parts, tmp_path, kwargs, error, message):
    with pytest.raises(error, match=message):
        import_dgl_partitions(dgl_parts["metis2"][0], tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists()


def test_output_directory_is_checked_before_anything_is_replaced(dgl_parts, tmp_path):
    js = dgl_parts["metis2"][0]
    with pytest.raises(PartitionError, match="would hold the input"):
        import_dgl_partitions(js, js.parent, overwrite=True)
    assert (js.parent / "part0" / "graph.dgl").is_file()
    other = tmp_path / "mine"
    other.mkdir()
    (other / "keep.txt").write_text("x")
    with pytest.raises(PartitionError, match="holds files no dglx command recorded writing"):
        import_dgl_partitions(js, other, overwrite=True)
    assert (other / "keep.txt").read_text() == "x"
    out = import_dgl_partitions(js, tmp_path / "out")
    with pytest.raises(PartitionError, match="already exists"):
        import_dgl_partitions(js, out)
    assert PartitionDir(import_dgl_partitions(js, out, overwrite=True)).num_parts == 2


def test_partition_dir_on_dgl_output_says_how_to_import(dgl_parts):
    js = dgl_parts["metis2"][0]
    for path in (js, js.parent):
        with pytest.raises(PartitionFormatError, match=r"DGL partition_graph output.*dglx "
                                                       r"partition --from-dgl .*cora.json OUT"):
            PartitionDir(path)


def test_cli_imports_and_refuses_partitioner_options(dgl_parts, tmp_path, capsys):
    js, nids, _ = dgl_parts["metis2"]
    np.save(tmp_path / "nids.npy", nids)
    assert main(["partition", "--from-dgl", str(js), str(tmp_path / "out"),
                 "--orig-nids", str(tmp_path / "nids.npy")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["num_parts"] == 2 and summary["relabeled"] and summary["edge_cut"] > 0
    assert (tmp_path / "out" / MANIFEST).is_file()
    assert main(["partition", "--from-dgl", str(js), str(tmp_path / "o2"), "--parts", "3"]) == 2
    assert main(["partition", str(js.parent), str(tmp_path / "o3"), "--num-classes", "7"]) == 2
    assert not (tmp_path / "o2").exists() and not (tmp_path / "o3").exists()


def test_a_truncated_feature_file_is_refused(dgl_parts, tmp_path):
    """DGL's load_tensors reads a cut-short node_feat.dgl as zeros; the import checks every
    tensor's bytes against its header (issue 40, case 4)."""
    import shutil

    js = dgl_parts["metis2"][0]
    copy = tmp_path / "dgl"
    shutil.copytree(js.parent, copy)
    feat = copy / "part0" / "node_feat.dgl"
    data = feat.read_bytes()
    feat.write_bytes(data[:len(data) // 8])
    with pytest.raises(PartitionFormatError, match=r"node_feat.dgl: [\d,]+ bytes, but its "
                                                   r"headers declare .* truncated"):
        import_dgl_partitions(copy / js.name, tmp_path / "out")
    assert not (tmp_path / "out").exists()
