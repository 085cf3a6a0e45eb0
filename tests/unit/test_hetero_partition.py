"""Typed partitioning (issue 34): a typed GraphDataset partitioned over its homogeneous view, the
typed partition directory, PartitionDir's typed API, and the typed manifest's refusals."""
import json

import numpy as np
import pytest

from dglx_dist.data import EdgeTable, GraphDataset, NodeTable, write_dataset
from dglx_dist.data.dataset import etype_key
from dglx_dist.errors import (IdOutOfRangeError, InvalidValueError, PartitionError,
                              PartitionFormatError, UnknownNameError)
from dglx_dist.partition import PartitionDir, partition_dataset
from dglx_dist.partition import io as pio

METHODS = ["hash", pytest.param("metis", marks=pytest.mark.dgl)]


def _toy(seed=0, authors=120, papers=240, fields=60, edata=False):
    """author: no features, no labels; field: 3 features, no labels; paper: 5 features,
    labels and masks. Fields form a dense cluster of their own (a min cut alone would keep
    them together), authors each write a few nearby papers."""
    rng = np.random.default_rng(seed)
    split = rng.permutation(papers)
    masks = [np.isin(np.arange(papers), split[lo:hi]) for lo, hi in ((0, 60), (60, 90),
                                                                      (90, 150))]
    paper = NodeTable(papers, rng.normal(size=(papers, 5)).astype(np.float32),
                      rng.integers(0, 4, papers), *masks)
    field = NodeTable(fields, rng.normal(size=(fields, 3)).astype(np.float32))
    a = rng.integers(0, authors, 500)
    p = (a * 2 + rng.integers(0, 3, 500)) % papers
    s = rng.integers(0, papers, 600)
    ends = {("author", "writes", "paper"): (a, p), ("paper", "written_by", "author"): (p, a),
            ("paper", "cites", "paper"): (s, (s + rng.integers(1, 5, 600)) % papers),
            ("field", "related", "field"): (rng.integers(0, fields, 900),
                                            rng.integers(0, fields, 900)),
            ("paper", "has_topic", "field"): (rng.integers(0, papers, 40),
                                              rng.integers(0, fields, 40))}
    edges = {et: EdgeTable(s, d, {"w": rng.random(s.size).astype(np.float32)} if edata else {})
             for et, (s, d) in ends.items()}
    return GraphDataset.typed({"paper": paper, "field": field, "author": NodeTable(authors)}, edges,
                         num_classes=4, extra={"name": "toy"})


def _partition(ds, tmp_path, method, parts, **options):
    out = tmp_path / f"{method}-{parts}"
    return partition_dataset(ds, out, method, parts, options), PartitionDir(out)


def _owner_by_orig(pdir):
    owner = np.full(pdir.num_nodes, -1)
    for p in range(pdir.num_parts):
        owner[pdir.load_part(p).core_orig] = p
    return owner


@pytest.mark.parametrize("parts", [2, 3])
@pytest.mark.parametrize("method", METHODS)
def test_typed_partitions_hold_every_node_edge_and_row_once(method, parts, tmp_path):
    ds = _toy(seed=parts)
    report, pdir = _partition(ds, tmp_path, method, parts)
    types = pdir.types
    assert types.ntypes == ("author", "field", "paper") and types.category == "paper"
    assert types.ntype_offsets.tolist() == ds.ntype_offsets().tolist()
    assert types.etype_offsets.tolist() == ds.etype_offsets().tolist()
    assert dict(types.feat_dims) == {"author": 0, "field": 3, "paper": 5}
    loaded = [pdir.load_part(p) for p in range(parts)]
    core = np.concatenate([p.core_orig for p in loaded])
    assert np.array_equal(np.sort(core), np.arange(ds.num_nodes))  # each node core once
    eids = np.concatenate([p.eid for p in loaded])
    assert np.array_equal(np.sort(eids), np.arange(ds.num_edges))  # each edge once
    for p in loaded:
        counts = pdir.ntype_counts(p.part)
        assert np.array_equal(p.ntype_counts, counts) and counts.sum() == p.num_core
        _check_nodes(ds, pdir, p, counts)
        _check_edges(ds, pdir, p)
    _check_quality(ds, pdir, report, loaded)


def _check_nodes(ds, pdir, p, counts):
    types = pdir.types
    index, per_type = types.to_per_type(p.core_orig)
    assert np.array_equal(index, np.repeat(np.arange(3), counts))  # one run per type, in order
    starts = np.concatenate([[0], np.cumsum(counts)])
    for i, t in enumerate(types.ntypes):
        run = slice(starts[i], starts[i + 1])
        ids, table = per_type[run], ds.nodes[t]
        assert np.array_equal(types.to_homogeneous(t, ids), p.core_orig[run])
        if table.feat is not None:
            assert np.array_equal(pdir.load_type_feat(p.part, t), table.feat[ids])
        label = table.label[ids] if table.labeled else np.full(ids.size, -1)
        assert np.array_equal(p.label[run], label)
        for m, values in table.masks().items():
            assert np.array_equal(getattr(p, m)[run], values[ids])


def _check_edges(ds, pdir, p):
    types = pdir.types
    local_orig = np.concatenate([p.core_orig, p.halo_orig])
    etype, per_type = types.etype_of(p.eid)
    for i, et in enumerate(types.canonical_etypes):
        mine = etype == i
        for end, ntype, local in (("src", et[0], p.src), ("dst", et[2], p.dst)):
            index, ids = types.to_per_type(local_orig[local[mine]])
            assert np.all(index == types.ntype_index(ntype))
            assert np.array_equal(ids, getattr(ds.edges[et], end)[per_type[mine]]), (et, end)


def _check_quality(ds, pdir, report, loaded):
    """The per-type report equals a recount from the dataset and the owners."""
    owner = _owner_by_orig(pdir)
    starts = dict(zip(ds.ntypes, ds.ntype_offsets()))
    for et, e in ds.edges.items():
        src, dst = e.src + starts[et[0]], e.dst + starts[et[2]]
        cut = owner[src] != owner[dst]
        halo = [np.unique(src[cut & (owner[dst] == p)]).size for p in range(len(loaded))]
        got = report.per_type["etypes"][etype_key(et)]
        assert (got["edges"], got["edge_cut"], got["halo_per_part"]) == \
            (e.num_edges, int(cut.sum()), halo), et
    for i, t in enumerate(ds.ntypes):
        assert report.per_type["ntypes"][t]["core_per_part"] == \
            [int(pdir.ntype_counts(p)[i]) for p in range(len(loaded))]
    assert "per_type" in report.to_json() and "| edge type |" in report.to_markdown()


@pytest.mark.parametrize("seed", [0, 1])
def test_metis_balances_each_node_type_and_the_training_nodes(tmp_path, seed):
    """Fields are a dense cluster of their own, which a min cut that ignores types keeps in
    few parts; balanced per type, each part gets its share. METIS aims at 3% imbalance per
    constraint; with 20-120 nodes of a type per part one node is 1-5%, so 10% (the bound the
    Cora test uses) leaves room for rounding."""
    report, pdir = _partition(_toy(seed), tmp_path, "metis", 3)
    for t, v in report.per_type["ntypes"].items():
        assert v["imbalance"] <= 1.10, (t, v)
    assert report.imbalance["train"] <= 1.10, report.imbalance
    assert report.imbalance["nodes"] <= 1.10, report.imbalance


def test_typed_partitioning_refuses_bad_input_before_writing(tmp_path):
    with pytest.raises(PartitionError, match=r"feature_dim: node type 'field' has 3 feature "
                       r"columns; expected num_parts = 4 <= the width of every node type"):
        partition_dataset(_toy(), tmp_path / "p", "feature_dim", 4)
    from dglx_dist.errors import InsufficientMemoryError

    with pytest.raises(InsufficientMemoryError, match=r"needs about .* MiB"):
        partition_dataset(_toy(), tmp_path / "p", "hash", 2, memory_limit=1000)
    assert not (tmp_path / "p").exists()


def test_a_plan_that_reorders_nodes_within_a_part_is_refused():
    from dglx_dist.partition import PartitionPlan, RangeBook
    from dglx_dist.partition.layout import Layout

    view = _toy()  # partitioners plan on its homogeneous view
    reverse = np.arange(view.num_nodes)[::-1].copy()  # new id -> original id, types reversed
    layout = Layout(view, PartitionPlan(RangeBook([0, view.num_nodes]), orig_ids=reverse))
    with pytest.raises(PartitionError, match=r"part 0: core node 240 is of type 'field' after "
                                             r"one of type 'paper'; typed partitions need"):
        layout.part(0)


def test_types_map_ids_both_ways_and_name_what_is_wrong(tmp_path):
    _, pdir = _partition(_toy(), tmp_path, "hash", 2)
    types = pdir.types
    assert types.to_homogeneous("field", [0, 59]).tolist() == [120, 179]
    assert [a.tolist() for a in types.to_per_type([0, 120, 180, 419])] == \
        [[0, 1, 2, 2], [0, 0, 0, 239]]
    cites = types.etype_to_homogeneous(("paper", "cites", "paper"), [0, 1])
    assert np.array_equal(cites, types.etype_to_homogeneous("cites", [0, 1]))
    index, ids = types.etype_of(cites)
    assert [types.canonical_etypes[i] for i in index] == [("paper", "cites", "paper")] * 2
    assert ids.tolist() == [0, 1]
    with pytest.raises(UnknownNameError, match=r"node type 'venue' is not one of "
                                               r"\['author', 'field', 'paper'\]"):
        types.to_homogeneous("venue", [0])
    with pytest.raises(IdOutOfRangeError, match=r"id 60 is outside \[0, 60\) of node type "
                                                r"'field'"):
        types.to_homogeneous("field", [60])
    with pytest.raises(UnknownNameError, match=r"edge type 'likes' is not a relation of"):
        types.etype_to_homogeneous("likes", [0])
    with pytest.raises(IdOutOfRangeError, match=r"homogeneous node id 420 is outside"):
        types.to_per_type([420])
    with pytest.raises(InvalidValueError, match=r"node type 'author' .* has no features; the "
                                                r"types with features: \['field', 'paper'\]"):
        pdir.load_type_feat(0, "author")
    _, homogeneous = _partition(_tiny(), tmp_path / "homogeneous", "hash", 2)
    assert homogeneous.types is None
    with pytest.raises(InvalidValueError, match="homogeneous partitioning: it has no node types"):
        homogeneous.ntype_counts(0)


def _tiny():
    from dglx_dist.testing import tiny_dataset

    return tiny_dataset()


def test_edge_data_of_some_edge_types_is_stored_and_a_dtype_clash_is_refused(tmp_path):
    ds = _toy(edata=True)
    cites = ("paper", "cites", "paper")
    rng = np.random.default_rng(3)
    ds.edges[cites].edata["year"] = rng.integers(1990, 2020, (600, 2))  # cites alone
    for source in (ds, tmp_path / "d"):
        if source != ds:
            write_dataset(ds, source)
        _, pdir = _partition(source, tmp_path / f"p{source is ds}", "hash", 3)
        stored = {name: np.concatenate([pdir.load_edge_data(p)[name] for p in range(3)])
                  [pdir.edge_part_ids()] for name in ("w", "year")}
        types = pdir.types
        assert np.array_equal(stored["w"], np.concatenate([e.edata["w"]
                                                           for e in ds.edges.values()]))
        at = types.etype_index(cites)
        run = slice(int(types.etype_offsets[at]), int(types.etype_offsets[at + 1]))
        assert np.array_equal(stored["year"][run], ds.edges[cites].edata["year"])
        assert not stored["year"][:run.start].any() and not stored["year"][run.stop:].any()
        assert dict(types.edge_data) == {"w": tuple(range(len(types.canonical_etypes))),
                                         "year": (at,)}
    ds.edges[cites].edata["w"] = np.zeros(600, np.float64)
    with pytest.raises(PartitionError, match=r"edge data 'w' is float64\[\] in edge type "
                                             r"paper:cites:paper but float32\[\] in "):
        partition_dataset(ds, tmp_path / "bad", "hash", 2)
    write_dataset(ds, tmp_path / "d2")
    with pytest.raises(PartitionError, match=r"edge data 'w' is double in edge type "
                                             r"paper:cites:paper but float in "):
        partition_dataset(tmp_path / "d2", tmp_path / "bad", "hash", 2)
    assert not (tmp_path / "bad").exists()


def test_homogeneous_manifests_gain_no_typed_fields(tmp_path):
    _, pdir = _partition(_tiny(), tmp_path, "hash", 2)
    m = json.loads((pdir.path / pio.MANIFEST).read_text())
    assert "types" not in m and all("ntype_counts" not in e for e in m["parts"])
    assert sorted(m["parts"][0]["files"]) == sorted(pio.PART_FILES)


@pytest.fixture
def typed_dir(tmp_path):
    out = tmp_path / "typed"
    partition_dataset(_toy(), out, "hash", 2)
    return out


def _edit(path, fn):
    m = json.loads((path / pio.MANIFEST).read_text())
    fn(m)
    (path / pio.MANIFEST).write_text(json.dumps(m))


@pytest.mark.parametrize("edit, message", [
    (lambda m: m["parts"][0].update(ntype_counts=[1, 1, 1]),
     r"parts\[0\]\.ntype_counts sum to 3; expected num_core = \d+"),
    (lambda m: m["parts"][1].pop("ntype_counts"), r"parts\[1\]\.ntype_counts = None"),
    (lambda m: m["types"].update(ntype_offsets=[0, 120, 420]),
     r"field 'types.ntype_offsets' = .*expected 4 non-decreasing integers"),
    (lambda m: m["types"].update(ntype_offsets=[0, 120, 180, 400]),
     r"field 'types.ntype_offsets' ends at 400; expected num_nodes = 420"),
    (lambda m: m["types"].update(etype_offsets=[0, 1, 2, 3, 4, 5]),
     r"'types.etype_offsets' ends at 5; expected num_edges"),
    (lambda m: m["types"]["feat_dims"].pop("field"), r"field 'types.feat_dims'"),
    (lambda m: m["types"]["canonical_etypes"][0].__setitem__(0, "venue"),
     r"'types.canonical_etypes\[0\]' = \['venue'"),
    (lambda m: m["types"].update(labeled=["venue"]), r"field 'types.labeled'"),
    (lambda m: m["types"].update(category="venue"), r"field 'types.category' = 'venue'"),
    (lambda m: m["types"].update(edge_data={"w": [0, 5]}),
     r"field 'types.edge_data' = .*indices in \[0, 5\)"),
    (lambda m: m["types"].update(ntypes=["paper", "field", "author"]),
     r"'types.ntypes' = .*expected distinct names in sorted order"),
    (lambda m: m.update(feat_dim=5), r"a typed manifest .* feat_dim 5 .* expected version 2, "
                                     r"feat_dim 0"),
    (lambda m: m["parts"][0]["files"].pop("feat-1.arrow"), r"parts\[0\]\.files lists"),
])
def test_bad_typed_manifests_are_refused_naming_the_field(typed_dir, edit, message):
    _edit(typed_dir, edit)
    with pytest.raises(PartitionFormatError, match=message):
        PartitionDir(typed_dir)


def _rewrite(folder, name, table):
    """Replaces a part file and its manifest entry (checksums agree, content does not)."""
    from dglx_dist.data.checked import write_arrow
    from dglx_dist.data.owned import sha256_file

    write_arrow(table, folder / name)
    _edit(folder.parent, lambda m: m["parts"][int(folder.name[-1])]["files"][name].update(
        bytes=(folder / name).stat().st_size, sha256=sha256_file(folder / name)))


@pytest.mark.parametrize("rows, width, message", [
    (None, 4, r"feat-2.arrow: field 'feat' has width 4; expected 5"),
    (3, 5, r"feat-2.arrow: 3 rows; expected \d+"),
])
def test_a_type_feature_file_of_the_wrong_shape_is_refused(typed_dir, rows, width, message):
    import pyarrow as pa

    pdir = PartitionDir(typed_dir)
    n = int(pdir.ntype_counts(0)[2]) if rows is None else rows
    flat = pa.array(np.zeros(n * width, np.float32))
    _rewrite(typed_dir / "part-00000", "feat-2.arrow",
             pa.table({"feat": pa.FixedSizeListArray.from_arrays(flat, width)}))
    with pytest.raises(PartitionFormatError, match=message):
        PartitionDir(typed_dir).load_type_feat(0, "paper")


@pytest.mark.parametrize("column, row_of, value, message", [
    ("label", lambda c: 0, 2, r"field 'label' row 0 = 2; expected -1 \(node type 'author' "
                                 r"has no labels\)"),
    ("label", lambda c: c[0] + c[1], -1, r"field 'label' row \d+ = -1; expected a class in "
                                         r"\[0, 4\)"),
    ("orig_id", lambda c: 0, 200, r"field 'orig_id' row 0 = 200; expected an id in \[0, 120\) "
                                  r"of node type 'author'"),
    ("train", lambda c: c[0], True, r"field 'train/val/test' row \d+ is true; expected false "
                                    r"\(node type 'field' has no labels\)"),
])
def test_typed_node_rows_are_checked_against_their_type(typed_dir, column, row_of, value,
                                                         message):
    import pyarrow as pa

    folder = typed_dir / "part-00000"
    table = pa.ipc.open_file(folder / "nodes.arrow").read_all()
    values = table.column(column).to_numpy().copy()
    values[row_of(PartitionDir(typed_dir).ntype_counts(0))] = value
    _rewrite(folder, "nodes.arrow", table.set_column(table.schema.get_field_index(column),
                                                     column, pa.array(values)))
    with pytest.raises(PartitionFormatError, match=message):
        PartitionDir(typed_dir).load_part(0)


def test_a_homogeneous_part_still_refuses_label_minus_one(tmp_path):
    import pyarrow as pa

    out = tmp_path / "h"
    partition_dataset(_tiny(), out, "hash", 2)
    table = pa.ipc.open_file(out / "part-00000" / "nodes.arrow").read_all()
    label = table.column("label").to_numpy().copy()
    label[0] = -1
    _rewrite(out / "part-00000", "nodes.arrow", table.set_column(2, "label", pa.array(label)))
    with pytest.raises(PartitionFormatError, match=r"field 'label' row 0 = -1; expected a value "
                                                   r"in \[0, 3\)"):
        PartitionDir(out).load_part(0)


def test_the_cli_partitions_and_verifies_a_typed_directory(tmp_path, capsys, caplog):
    from dglx_dist.cli import main

    data = write_dataset(_toy(), tmp_path / "d")
    out = tmp_path / "p"
    assert main(["partition", str(data), str(out), "--method", "hash", "--parts", "2"]) == 0
    printed = capsys.readouterr().out
    assert "| node type |" in printed and "| author:writes:paper |" in printed
    assert json.loads(printed.strip().splitlines()[-1])["per_type"]["ntypes"]["field"]
    assert main(["verify", str(out)]) == 0
    assert PartitionDir(out).manifest["dataset"] == {"name": "toy"}
    victim = out / "part-00001" / "feat-1.arrow"
    victim.write_bytes(victim.read_bytes()[:-8] + bytes(8))
    assert main(["verify", str(out)]) == 2
    assert main(["partition", str(data), str(tmp_path / "q"), "--method", "feature_dim",
                 "--parts", "4"]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 2 and "feat-1.arrow: sha256" in errors[0]
    assert errors[1].startswith("PartitionError: feature_dim: node type 'field' has 3 feature")


def test_the_partition_cache_keys_a_typed_dataset_by_its_tables(tmp_path):
    import os

    from dglx_dist.data import write_dataset
    from dglx_dist.prepare import derived_key

    typed = write_dataset(_toy(), tmp_path / "d")
    plain = write_dataset(_tiny(), tmp_path / "h")
    os.rename(plain, tmp_path / "x")
    os.rename(typed, tmp_path / "h")  # the same name as the homogeneous one had
    key = derived_key(tmp_path / "h", "hash-2", ["hash", 2, {}])  # as partitions are keyed
    assert key.startswith("h-typed-hash-2-") and key != derived_key(tmp_path / "x", "hash-2",
                                                                    ["hash", 2, {}])
    table = tmp_path / "h" / "edges" / "2_cites.parquet"
    os.utime(table, ns=(table.stat().st_atime_ns, table.stat().st_mtime_ns + 10**9))
    assert derived_key(tmp_path / "h", "hash-2", ["hash", 2, {}]) != key


@pytest.mark.dgl
@pytest.mark.parametrize("name", ["dorylus"])
def test_strategies_without_types_refuse_typed_partitions_in_one_line(typed_dir, name):
    from dglx_dist.errors import NotSupportedError
    from dglx_dist.runtime.topology import Topology
    from dglx_dist.strategies import STRATEGIES
    from dglx_dist.strategies.base import check_partitions

    with pytest.raises(NotSupportedError, match=r"holds a graph with node types \['author', "
                       rf"'field', 'paper'\]; strategy '{name}' trains graphs without types "
                       r"only so far \(distdgl, fullgraph, granndis, p3 train typed graphs\)"):
        check_partitions(STRATEGIES.build(name), PartitionDir(typed_dir), Topology(2, 1))


def test_dglx_train_refuses_another_model_on_typed_partitions_in_one_line(typed_dir, caplog):
    from dglx_dist.cli import main

    assert main(["train", "--strategy", "distdgl", "--partitions", str(typed_dir),
                 "--model", "gat"]) == 2
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and errors[0].exc_info is None
    assert "--model gat: a dataset with node types trains the R-GCN" in errors[0].getMessage()


def test_typed_partitions_are_checked_against_their_own_typed_dataset(tmp_path):
    """Issue 61, case 2d: ``dglx train --data TYPED --partitions ITS_PARTITIONS`` was refused
    with "this step takes a homogeneous one"; partitions of another dataset still are."""
    from dglx_dist.prepare import check_partitions_of, resolve_dataset

    data = write_dataset(_toy(), tmp_path / "data")
    partition_dataset(data, tmp_path / "parts", "hash", 2)
    check_partitions_of(tmp_path / "parts", data)  # its own: nothing to say
    other = write_dataset(_toy(papers=200), tmp_path / "other")
    with pytest.raises(PartitionError, match=r"its num_nodes is 420, the dataset's 380"):
        check_partitions_of(tmp_path / "parts", other)
    renamed = _toy()
    renamed.edges[("paper", "cites_", "paper")] = renamed.edges.pop(("paper", "cites", "paper"))
    renamed = write_dataset(renamed, tmp_path / "renamed")
    with pytest.raises(PartitionError, match=r"its edge types is"):
        check_partitions_of(tmp_path / "parts", renamed)
    with pytest.raises(PartitionError, match=r"was not made from --data cora: its num_nodes"):
        check_partitions_of(tmp_path / "parts", "cora")
    homogeneous = tmp_path / "hom-parts"
    partition_dataset(resolve_dataset("cora"), homogeneous, "hash", 2)
    with pytest.raises(PartitionError, match=r"its num_nodes is 2708, the dataset's 420"):
        check_partitions_of(homogeneous, data)
