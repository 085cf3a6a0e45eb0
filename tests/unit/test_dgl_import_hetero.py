"""Importing DGL's partition_graph output of a heterograph (issue 34): typed partitions with
the graph's types, every node core once, per-type features, labels and masks by original
per-type id, every edge once with its type and ends; the CLI and `dglx verify`; each kind of
disagreement between DGL's JSON and its files refused naming the file and field."""
import json
import shutil
from pathlib import Path

import dgl
import numpy as np
import pytest
import torch
from dgl.data.utils import load_tensors, save_tensors

from dglx_dist.cli import main
from dglx_dist.errors import PartitionError, PartitionFormatError
from dglx_dist.partition import PartitionDir, import_dgl_partitions

pytestmark = pytest.mark.dgl
# name: (part_method, the label's name in the graph)
CASES = {"metis": ("metis", "label"), "random": ("random", "labels")}
SIZES = {"author": 60, "field": 12, "paper": 90}


def hetero_graph(label: str = "label"):
    """author: no data; field: 4 features, a node field we do not import; paper: 6 features,
    labels and the three masks. writes, cites and has_topic with the reverse relations, and
    edge data on cites."""
    rng = np.random.default_rng(3)
    writes = (rng.integers(0, 60, 200), rng.integers(0, 90, 200))
    cites = (rng.integers(0, 90, 150), rng.integers(0, 90, 150))
    topic = (rng.integers(0, 90, 120), rng.integers(0, 12, 120))
    g = dgl.heterograph({
        ("author", "writes", "paper"): writes, ("paper", "rev-writes", "author"): writes[::-1],
        ("paper", "cites", "paper"): cites, ("paper", "has_topic", "field"): topic,
        ("field", "rev-has_topic", "paper"): topic[::-1]}, num_nodes_dict=SIZES)
    paper = g.nodes["paper"].data
    paper["feat"] = torch.from_numpy(rng.normal(size=(90, 6)).astype(np.float32))
    paper[label] = torch.from_numpy(rng.integers(0, 5, 90))
    split = torch.from_numpy(rng.permutation(90))
    for i, name in enumerate(("train_mask", "val_mask", "test_mask")):
        paper[name] = torch.zeros(90, dtype=torch.bool).index_fill_(0, split[i::3][:20], True)
    g.nodes["field"].data["feat"] = torch.from_numpy(rng.normal(size=(12, 4)).astype(np.float32))
    g.nodes["field"].data["year"] = torch.arange(12)
    g.edges["cites"].data["w"] = torch.from_numpy(rng.random(150).astype(np.float32))
    g.edges["writes"].data["w"] = torch.from_numpy(rng.random(200).astype(np.float32))
    g.edges["has_topic"].data["kind"] = torch.from_numpy(rng.integers(0, 9, (120, 2)))
    return g


def _dgl_partition(out: Path, method: str, label: str):
    g = hetero_graph(label)
    nids, eids = dgl.distributed.partition_graph(g, "het", 2, str(out), part_method=method,
                                                 return_mapping=True)
    return out / "het.json", nids, eids


@pytest.fixture(scope="module")
def dgl_parts(tmp_path_factory):
    """name -> (json path, orig_nids, orig_eids): DGL's partitions of the heterograph."""
    root = tmp_path_factory.mktemp("dgl")
    return {name: _dgl_partition(root / name, *args) for name, args in CASES.items()}


@pytest.fixture(scope="module")
def imported(dgl_parts, tmp_path_factory):
    """name -> our partition directory, imported with the original ids."""
    root = tmp_path_factory.mktemp("ours")
    return {name: PartitionDir(import_dgl_partitions(js, root / name, orig_nids=nids,
                                                     orig_eids=eids))
            for name, (js, nids, eids) in dgl_parts.items()}


def _runs(pdir, p):
    """Part p's core nodes of each type: {type: (slice of local ids, per-type ids)}."""
    counts = pdir.ntype_counts(p)
    starts = np.concatenate([[0], np.cumsum(counts)])
    part = pdir.load_part(p)
    index, per_type = pdir.types.to_per_type(part.core_orig)
    out = {}
    for i, t in enumerate(pdir.types.ntypes):
        run = slice(int(starts[i]), int(starts[i + 1]))
        assert np.all(index[run] == i), (p, t)  # one run per type, in type order
        out[t] = (run, per_type[run])
    return part, out


@pytest.mark.parametrize("name", sorted(CASES))
def test_types_and_ownership_are_the_graphs_and_dgls(dgl_parts, imported, name):
    g, pdir = hetero_graph(CASES[name][1]), imported[name]
    meta = json.loads(dgl_parts[name][0].read_text())
    types = pdir.types
    assert types.ntypes == tuple(g.ntypes) and types.canonical_etypes == tuple(g.canonical_etypes)
    assert types.ntype_offsets.tolist() == [0, 60, 72, 162]
    assert types.etype_offsets.tolist() == np.cumsum(
        [0] + [g.num_edges(e) for e in g.canonical_etypes]).tolist()
    assert dict(types.feat_dims) == {"author": 0, "field": 4, "paper": 6}
    assert types.labeled == ("paper",) and types.category == "paper"
    assert pdir.num_classes == 5 and pdir.feat_dim == 0 and pdir.manifest["relabeled"]
    core = np.concatenate([pdir.load_part(p).core_orig for p in range(2)])
    assert np.array_equal(np.sort(core), np.arange(g.num_nodes()))  # each node core once
    for p in range(2):
        counts = [b - a for a, b in (meta["node_map"][t][p] for t in g.ntypes)]
        assert pdir.ntype_counts(p).tolist() == counts
        assert pdir.book.core_ids(p)[0] == meta["node_map"][g.ntypes[0]][p][0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_features_labels_and_masks_by_original_id(imported, name):
    label_key = CASES[name][1]
    g, pdir = hetero_graph(label_key), imported[name]
    for p in range(2):
        part, runs = _runs(pdir, p)
        for t, (run, ids) in runs.items():
            data = g.nodes[t].data
            if "feat" in data:
                np.testing.assert_array_equal(pdir.load_type_feat(p, t), data["feat"][ids])
            label = data[label_key][ids].numpy() if t == "paper" else np.full(ids.size, -1)
            assert np.array_equal(part.label[run], label), (p, t)
            for ours in ("train", "val", "test"):
                want = data[f"{ours}_mask"][ids].numpy() if t == "paper" else False
                assert np.array_equal(getattr(part, ours)[run], np.broadcast_to(want, ids.shape))
            year = data["year"][ids].numpy() if t == "field" else np.zeros(ids.size)
            assert np.array_equal(pdir.load_node_data(p)["year"][run], year), (p, t)
    assert pdir.node_data == {"year": {"dtype": "int64", "shape": [], "ntypes": ["field"]}}
    prov = pdir.manifest["dataset"]
    assert prov["not_imported"] == {"node_data": []}
    assert prov["node_ids"].startswith("given") and prov["absent_masks_as_false"] == []
    # the graph's own name of the labels, for g.nodes["paper"].data (DGL's R-GCN: "labels")
    assert pdir.ndata_names == ({} if label_key == "label" else {"label": label_key})


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_edge_once_with_its_type_and_ends(imported, name):
    g, pdir = hetero_graph(CASES[name][1]), imported[name]
    types = pdir.types
    eids = np.concatenate([pdir.load_part(p).eid for p in range(2)])
    assert np.array_equal(np.sort(eids), np.arange(g.num_edges()))  # each edge stored once
    for p in range(2):
        part = pdir.load_part(p)
        assert np.all(pdir.owner(part.halo_gid) != p)
        local_orig = np.concatenate([part.core_orig, part.halo_orig])
        etype, per_type = types.etype_of(part.eid)
        for i, et in enumerate(types.canonical_etypes):
            mine = etype == i
            want = [e.numpy()[per_type[mine]] for e in g.edges(etype=et)]
            for end, ntype, local, ids in zip(("src", "dst"), (et[0], et[2]),
                                              (part.src, part.dst), want):
                index, got = types.to_per_type(local_orig[local[mine]])
                assert np.all(index == types.ntype_index(ntype)), (p, et, end)
                assert np.array_equal(got, ids), (p, et, end)


@pytest.mark.parametrize("name", sorted(CASES))
def test_edge_data_of_each_edge_type_by_original_id(imported, name):
    """edge_feat.dgl's tensors (w on cites and writes, a 2-wide int64 kind on has_topic): each
    edge's row is its type's row of the input graph; edge types without a name hold zeros
    and do not list it."""
    g, pdir = hetero_graph(CASES[name][1]), imported[name]
    types = pdir.types
    assert dict(types.edge_data) == {"kind": (types.etype_index("has_topic"),),
                                     "w": tuple(sorted(types.etype_index(r)
                                                       for r in ("cites", "writes")))}
    for p in range(2):
        part, data = pdir.load_part(p), pdir.load_edge_data(p)
        assert data["kind"].dtype == np.int64 and data["kind"].shape == (part.eid.size, 2)
        etype, per_type = types.etype_of(part.eid)
        for i, et in enumerate(types.canonical_etypes):
            mine = etype == i
            for name_, values in data.items():
                want = g.edges[et].data[name_][per_type[mine]].numpy() \
                    if name_ in g.edges[et].data else 0
                assert np.array_equal(values[mine], np.broadcast_to(want, values[mine].shape)), \
                    (p, et, name_)


def test_without_the_mapping_ids_are_dgls_per_type_ids(dgl_parts, tmp_path):
    js, nids, _ = dgl_parts["random"]
    pdir = PartitionDir(import_dgl_partitions(js, tmp_path / "o"))
    assert "not given" in pdir.manifest["dataset"]["node_ids"]
    g, gpb = hetero_graph("labels"), dgl.distributed.load_partition_book(str(js), 1)[0]
    _, runs = _runs(pdir, 1)
    for t in ("field", "paper"):
        run, ids = runs[t]  # DGL's per-type ids; the input graph's are nids[t][ids]
        gids = torch.from_numpy(pdir.book.core_ids(1)[run])
        assert np.array_equal(gpb.map_to_per_ntype(gids)[1].numpy(), ids)
        np.testing.assert_array_equal(pdir.load_type_feat(1, t),
                                      g.nodes[t].data["feat"][nids[t][torch.from_numpy(ids)]])


def test_cli_imports_and_verify_passes(dgl_parts, imported, tmp_path, capsys):
    js, nids, eids = dgl_parts["metis"]
    torch.save(nids, tmp_path / "nids.pt")
    np.savez(tmp_path / "eids.npz", **{":".join(k): v.numpy() for k, v in eids.items()})
    out = tmp_path / "out"
    assert main(["partition", "--from-dgl", str(js), str(out), "--orig-nids",
                 str(tmp_path / "nids.pt"), "--orig-eids", str(tmp_path / "eids.npz")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["types"]["ntypes"] == ["author", "field", "paper"]
    assert sum(summary["core_per_part"]) == 162 and summary["edge_cut"] > 0
    assert main(["verify", str(out)]) == 0
    assert json.loads(capsys.readouterr().out.strip())["ok"]
    ours, ref = PartitionDir(out), imported["metis"]  # the same as given the maps in memory
    assert ours.manifest["types"] == ref.manifest["types"]
    for p in range(2):
        a, b = ours.load_part(p), ref.load_part(p)
        assert np.array_equal(a.core_orig, b.core_orig) and np.array_equal(a.eid, b.eid)


# --- refusals ------------------------------------------------------------------------------

def _variant(tmp_path: Path, js: Path, edit=None, files=None) -> Path:
    """A copy of DGL's output, its JSON changed by ``edit``, its part files by ``files``
    ({relative path: change to the tensors})."""
    copy = tmp_path / "variant"
    shutil.copytree(js.parent, copy)
    m = json.loads(js.read_text())
    if edit:
        edit(m)
    (copy / js.name).write_text(json.dumps(m))
    for rel, change in (files or {}).items():
        tensors = load_tensors(str(copy / rel))
        change(tensors)
        save_tensors(str(copy / rel), tensors)
    return copy / js.name


def _shift(key, first, second, part=0):
    """Moves one id from type ``first``'s range of ``part`` to the type after it."""
    def edit(m):
        m[key][first][part][1] -= 1
        m[key][second][part][0] -= 1
    return edit


BAD = {
    "type not in node_map": (lambda m: m["ntypes"].update(venue=3),
                             r"field 'node_map' lists the types \['author', 'field', 'paper'\]; "
                             r"field 'ntypes' lists \['author', 'field', 'paper', 'venue'\]"),
    "node_map type missing": (lambda m: m["node_map"].pop("field"),
                              r"field 'node_map' lists the types \['author', 'paper'\]"),
    "node counts": (_shift("node_map", "author", "field"),
                    r"part0/graph.dgl: ndata\['_TYPE'\] row \d+ = 0 \('author'\) for node \d+; "
                    r"field 'node_map' of .*het.json puts node \d+ in type 'field'"),
    "edge counts": (_shift("edge_map", "author:writes:paper", "field:rev-has_topic:paper"),
                    r"part0/graph.dgl: edge \d+ \(edata\['_ID'\]\): edata\['_TYPE'\] = 0 "
                    r"\('author:writes:paper'\); field 'edge_map' .* 'field:rev-has_topic"),
    "types out of order": (lambda m: m["node_map"]["paper"].reverse(),
                           r"field 'node_map'\['paper'\]\[0\] = \[\d+, 162\]; expected DGL's "
                           r"layout: a range starting at \d+"),
    "ranges of other parts": (lambda m: m.update({"part-0": m["part-1"]}),
                              r"part1/graph.dgl: its \d+ inner nodes .* do not have the ids"),
    "unsorted etypes": (lambda m: m["etypes"].update({"author:writes:paper": 1,
                                                      "field:rev-has_topic:paper": 0}),
                        r"field 'etypes' numbers the types .* expected them in sorted order"),
    "bad etype name": (lambda m: m["etypes"].update({"paper:cites": m["etypes"].pop(
        "paper:cites:paper")}), r"field 'etypes' has the edge type 'paper:cites'; expected"),
}


def _add(key, value):
    return lambda tensors: tensors.update({key: value})


BAD_FILES = {
    "feature of an unknown type": ("part1/node_feat.dgl", _add("venue/feat", torch.ones(3, 2)),
                                   r"part1/node_feat.dgl: key 'venue/feat': 'venue' is not one "
                                   r"of the node types \['author', 'field', 'paper'\] of field "
                                   r"'ntypes'"),
    "mask without labels": ("part0/node_feat.dgl",
                            _add("author/train_mask", torch.ones(5, dtype=torch.uint8)),
                            r"part0/node_feat.dgl: 'author/train_mask' is a mask of node type "
                            r"'author', which has no author/label or author/labels"),
    "label and labels": ("part0/node_feat.dgl",
                         lambda t: t.update({"paper/labels": t["paper/label"]}),
                         r"node type 'paper' has both paper/label and paper/labels"),
    "feature rows": ("part1/node_feat.dgl", lambda t: t.update({"paper/feat": t["paper/feat"][1:]}),
                     r"part1/node_feat.dgl: 'paper/feat' has shape \(\d+, 6\); expected \d+ rows"),
    "names differ by part": ("part1/node_feat.dgl", lambda t: t.pop("field/feat"),
                             r"part1/node_feat.dgl: node data .*part0/node_feat.dgl has .*; "
                             r"expected every part to have the same node data per type"),
    "edge data of an unknown type": ("part0/edge_feat.dgl", _add("a:b:c/w", torch.ones(2)),
                                     r"edge_feat.dgl: key 'a:b:c/w': 'a:b:c' is not one of the "
                                     r"edge types"),
    "edge data rows": ("part1/edge_feat.dgl",
                       lambda t: t.update({"paper:cites:paper/w": t["paper:cites:paper/w"][1:]}),
                       r"part1/edge_feat.dgl: 'paper:cites:paper/w' has shape \(\d+,\) and dtype "
                       r"torch.float32; expected \d+ rows \(the part's edges of that type\)"),
    "edge data dtypes": ("part0/edge_feat.dgl", lambda t: t.update(
        {"author:writes:paper/w": t["author:writes:paper/w"].double()}),
        r"part0/edge_feat.dgl: '.*/w' is float(32|64)\[\]; edge data 'w' is float(64|32)\[\] "
        r"elsewhere; expected one dtype and row shape per name"),
    "edge data differs by part": ("part1/edge_feat.dgl", lambda t: t.pop("paper:cites:paper/w"),
                                  r"part1/edge_feat.dgl: edge data .*part0/edge_feat.dgl has "
                                  r".*; expected every part to have the same edge data per "
                                  r"edge type"),
}


def _refused(tmp_path, js, message, **kwargs):
    out = tmp_path / "out"
    with pytest.raises(PartitionFormatError, match=message):
        import_dgl_partitions(js, out, **kwargs)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["variant"]  # no temporary left


@pytest.mark.parametrize("case", sorted(BAD))
def test_json_that_disagrees_with_the_files_is_refused(dgl_parts, tmp_path, case):
    edit, message = BAD[case]
    _refused(tmp_path, _variant(tmp_path, dgl_parts["metis"][0], edit), message)


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_part_files_that_disagree_are_refused(dgl_parts, tmp_path, case):
    rel, change, message = BAD_FILES[case]
    _refused(tmp_path, _variant(tmp_path, dgl_parts["metis"][0], files={rel: change}), message)


@pytest.mark.parametrize("kwargs, message", [
    ({"orig_nids": np.arange(162)}, r"orig_nids: ndarray; this graph has types: expected a "
                                    r"dict \{type: ids\}"),
    ({"orig_nids": {"paper": np.arange(90)}}, r"orig_nids: types \['paper'\]; expected exactly "
                                              r"\['author', 'field', 'paper'\]"),
    ({"orig_nids": {"author": np.zeros(60, np.int64), "field": np.arange(12),
                    "paper": np.arange(90)}}, r"orig_nids\['author'\]: not a permutation"),
    ({"orig_eids": {("a", "b", "c"): np.arange(3)}}, r"orig_eids: types \['a:b:c'\]"),
])
def test_bad_id_maps_are_refused(dgl_parts, tmp_path, kwargs, message):
    with pytest.raises(PartitionError, match=message):
        import_dgl_partitions(dgl_parts["metis"][0], tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists()
