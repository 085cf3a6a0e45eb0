"""``dglx data import`` (dglx_dist.data.ogb_import) on small OGB datasets written here in OGB's
own on-disk layout (the raw files its loaders read: ``ROOT/ogbn_arxiv/raw/edge.csv.gz``, ...):
one like ogbn-arxiv (no types), one like ogbn-mag (typed, its split per type) and one like
ogbl-collab (a link task, its split in ``.pt`` files). What the import writes reads back with
the features, labels, edges and split that OGB's own loader classes give on the same files;
``dglx partition`` and ``dglx train`` take it; refusals are one line; the output directory
follows ``dglx datagen``'s rules. Nothing here reaches the network (a connection fails the
test), and the import reads ROOT without writing into it.
"""
import gzip
import importlib.util
import json
import logging
import pathlib
import socket
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

if importlib.util.find_spec("ogb") is None:  # not imported here: its import asks PyPI
    pytest.skip("the ogb package is not installed (pip install 'dglx_dist[ogb]')",
                allow_module_level=True)

from dglx_dist.cli import main  # noqa: E402
from dglx_dist.data import read_dataset  # noqa: E402
from dglx_dist.data.ogb_import import import_ogb, ogb_package  # noqa: E402
from dglx_dist.errors import (DatasetFormatError, InvalidValueError,  # noqa: E402
                              MissingDependencyError, OutputExistsError)

MAG_RELATIONS = [("author", "affiliated_with", "institution"), ("author", "writes", "paper"),
                 ("paper", "cites", "paper"), ("paper", "has_topic", "field_of_study")]
MAG_NODES = {"author": 40, "field_of_study": 12, "institution": 5, "paper": 60}


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the test reached for the network")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


# -- OGB's layout ---------------------------------------------------------------------------
def _csv(path: Path, rows, header=None) -> None:
    """A gzipped CSV as OGB ships them (no header unless given)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = np.asarray(rows)
    rows = rows.reshape(len(rows), -1)
    lines = ([",".join(header)] if header else []) + [",".join(map(str, r)) for r in rows]
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")


def _start(root: Path, name: str, version: int) -> Path:
    folder = root / name.replace("-", "_")
    (folder / "processed").mkdir(parents=True)  # empty, as OGB's zips have it
    (folder / f"RELEASE_v{version}.txt").write_text("fixture\n")
    return folder


def _split_csv(folder: Path, n: int, rng) -> None:
    perm = rng.permutation(n)
    for part, idx in zip(("train", "valid", "test"), np.split(perm, [n // 2, 3 * n // 4])):
        _csv(folder / f"{part}.csv.gz", np.sort(idx[:-2]))  # two nodes in no part


def arxiv_like(root: Path, n=50, e=160, f=6) -> Path:
    """ogbn-arxiv's files: each citation once, node features, one label per node, the
    time split."""
    rng = np.random.default_rng(0)
    folder = _start(root, "ogbn-arxiv", 1)
    raw = folder / "raw"
    _csv(raw / "edge.csv.gz", rng.integers(0, n, (e, 2)))
    _csv(raw / "num-node-list.csv.gz", [n])
    _csv(raw / "num-edge-list.csv.gz", [e])
    _csv(raw / "node-feat.csv.gz", np.round(rng.normal(size=(n, f)), 6))
    _csv(raw / "node-label.csv.gz", rng.integers(0, 40, n))
    _csv(raw / "node_year.csv.gz", rng.integers(1990, 2020, n))
    _split_csv(folder / "split" / "time", n, rng)
    return folder


def mag_like(root: Path, f=4) -> Path:
    """ogbn-mag's files: counts and relations per type, paper features and labels, the split
    of the papers."""
    rng = np.random.default_rng(1)
    folder = _start(root, "ogbn-mag", 2)
    raw, types = folder / "raw", sorted(MAG_NODES)
    _csv(raw / "num-node-dict.csv.gz", [[MAG_NODES[t] for t in types]], header=types)
    _csv(raw / "triplet-type-list.csv.gz", np.array(MAG_RELATIONS))
    for s, rel, d in MAG_RELATIONS:
        sub, m = raw / "relations" / f"{s}___{rel}___{d}", 3 * MAG_NODES[d]
        _csv(sub / "edge.csv.gz", np.stack([rng.integers(0, MAG_NODES[s], m),
                                            rng.integers(0, MAG_NODES[d], m)], 1))
        _csv(sub / "num-edge-list.csv.gz", [m])
        _csv(sub / "edge_reltype.csv.gz", np.full(m, MAG_RELATIONS.index((s, rel, d))))
    n = MAG_NODES["paper"]
    _csv(raw / "node-feat" / "paper" / "node-feat.csv.gz", np.round(rng.normal(size=(n, f)), 6))
    _csv(raw / "node-feat" / "paper" / "node_year.csv.gz", rng.integers(2010, 2020, n))
    has = [[str(t == "paper") for t in types]]
    _csv(raw / "nodetype-has-label.csv.gz", has, header=types)
    _csv(raw / "node-label" / "paper" / "node-label.csv.gz", rng.integers(0, 349, n))
    split = folder / "split" / "time"
    _csv(split / "nodetype-has-split.csv.gz", has, header=types)
    _split_csv(split / "paper", n, rng)
    return folder


def collab_like(root: Path, n=40, e=120, f=5, legacy=False) -> Path:
    """ogbl-collab's files: the training edges in raw/ (with weights and years), node
    features, and the edge split as torch.save files of numpy arrays."""
    rng = np.random.default_rng(2)
    folder = _start(root, "ogbl-collab", 1)
    raw = folder / "raw"
    edges = rng.integers(0, n, (e + 40, 2))
    _csv(raw / "edge.csv.gz", edges[:e])
    _csv(raw / "num-node-list.csv.gz", [n])
    _csv(raw / "num-edge-list.csv.gz", [e])
    _csv(raw / "node-feat.csv.gz", np.round(rng.normal(size=(n, f)), 6))
    _csv(raw / "edge_weight.csv.gz", rng.integers(1, 3, e))
    _csv(raw / "edge_year.csv.gz", rng.integers(2000, 2018, e))
    split = folder / "split" / "time"
    split.mkdir(parents=True)
    parts = {"train": edges[:e], "valid": edges[e:e + 20], "test": edges[e + 20:]}
    for part, pairs in parts.items():
        body = {"edge": pairs, "weight": np.ones(len(pairs), np.int64),
                "year": np.full(len(pairs), 2018)}
        if part != "train":
            body["edge_neg"] = rng.integers(0, n, (len(pairs) * 2, 2))
        torch.save(body, split / f"{part}.pt", _use_new_zipfile_serialization=not legacy)
    return folder


# -- OGB's own loaders ----------------------------------------------------------------------
def ogb_loader(folder: str, cls: str):
    """OGB's NodePropPredDataset / LinkPropPredDataset class, loaded from its own module
    without its package's __init__ (which imports DGL and PyG: 9 s here)."""
    ogb = ogb_package()  # without the check its import starts (a request to PyPI)
    path = Path(ogb.__file__).parent / folder / "dataset.py"
    spec = importlib.util.spec_from_file_location(f"_ogb_{folder}_dataset", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, cls)


def tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*"))}


def dglx(*args, caplog=None) -> tuple[int, dict | None]:
    """``dglx ARGS`` in this process: its exit status and the JSON line it printed."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([str(a) for a in args])
    lines = out.getvalue().strip().splitlines()
    return code, (json.loads(lines[-1]) if code == 0 and lines else None)


def one_error_line(caplog) -> str:
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "\n" not in errors[0], errors
    return errors[0]


# -- what the import writes -----------------------------------------------------------------
@pytest.mark.parametrize("directed", [False, True])
def test_ogbn_arxiv_reads_back_as_ogbs_loader_gives_it(tmp_path, directed):
    root = tmp_path / "ogb"
    arxiv_like(root)
    before = tree(root)
    code, line = dglx("data", "import", "ogbn-arxiv", tmp_path / "arxiv", "--ogb-root", root,
                      *(["--directed"] if directed else []))
    assert code == 0 and tree(root) == before  # ROOT is only read
    ogb = ogb_loader("nodeproppred", "NodePropPredDataset")("ogbn-arxiv", root=str(root))
    graph, labels = ogb[0]
    split = ogb.get_idx_split()
    ds = read_dataset(tmp_path / "arxiv")
    (src, dst), e = graph["edge_index"], graph["edge_index"].shape[1]
    want_src, want_dst = (src, dst) if directed else \
        (np.concatenate([src, dst]), np.concatenate([dst, src]))
    np.testing.assert_array_equal(ds.src, want_src)
    np.testing.assert_array_equal(ds.dst, want_dst)
    np.testing.assert_array_equal(ds.feat, graph["node_feat"])
    np.testing.assert_array_equal(ds.label, labels[:, 0])
    for ours, theirs in (("train", "train"), ("val", "valid"), ("test", "test")):
        np.testing.assert_array_equal(np.flatnonzero(getattr(ds, ours)), np.sort(split[theirs]))
    assert ds.num_classes == 40 and ds.extra["split"] == "time" and ds.extra["source"] == "ogb"
    assert line["num_edges"] == (e if directed else 2 * e) and line["task"] == "node"
    assert line["split"] == {"train": 23, "val": 10, "test": 11}


def test_ogbn_mag_is_a_typed_dataset_with_the_split_of_its_papers(tmp_path):
    root = tmp_path / "ogb"
    mag_like(root)
    code, line = dglx("data", "import", "ogbn-mag", tmp_path / "mag", "--ogb-root", root)
    assert code == 0 and line["ntypes"] == sorted(MAG_NODES)
    ogb = ogb_loader("nodeproppred", "NodePropPredDataset")("ogbn-mag", root=str(root))
    graph, labels = ogb[0]
    split = ogb.get_idx_split()
    ds = read_dataset(tmp_path / "mag")
    assert ds.category == "paper" and ds.num_classes == 349
    assert {t: n.num_nodes for t, n in ds.nodes.items()} == graph["num_nodes_dict"]
    paper = ds.nodes["paper"]
    np.testing.assert_array_equal(paper.feat, graph["node_feat_dict"]["paper"])
    np.testing.assert_array_equal(paper.label, labels["paper"][:, 0])
    for ours, theirs in (("train", "train"), ("val", "valid"), ("test", "test")):
        np.testing.assert_array_equal(np.flatnonzero(getattr(paper, ours)),
                                      np.sort(split[theirs]["paper"]))
    assert all(ds.nodes[t].feat is None and not ds.nodes[t].labeled for t in MAG_NODES
               if t != "paper")
    assert len(ds.edges) == 8  # each relation and its rev- relation
    for etype, (src, dst) in graph["edge_index_dict"].items():
        s, rel, d = etype
        np.testing.assert_array_equal(ds.edges[etype].src, src)
        np.testing.assert_array_equal(ds.edges[(d, f"rev-{rel}", s)].src, dst)


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy-pt"])
def test_ogbl_collab_trains_on_its_training_edges_and_keeps_its_held_out_pairs(tmp_path,
                                                                                legacy):
    root = tmp_path / "ogb"
    collab_like(root, legacy=legacy)
    code, line = dglx("data", "import", "ogbl-collab", tmp_path / "collab", "--ogb-root", root)
    assert code == 0 and line["task"] == "link"
    ogb = ogb_loader("linkproppred", "LinkPropPredDataset")("ogbl-collab", root=str(root))
    split = ogb.get_edge_split()
    ds = read_dataset(tmp_path / "collab")
    u, v = split["train"]["edge"].T
    e = len(u)
    np.testing.assert_array_equal(ds.src, np.concatenate([u, v]))  # edge e's reverse: e + E/2
    np.testing.assert_array_equal(ds.dst, np.concatenate([v, u]))
    np.testing.assert_array_equal(ds.feat, ogb[0]["node_feat"])
    assert ds.num_edges == 2 * e and not ds.train.any()
    for part, prefix in (("valid", "val"), ("test", "test")):
        for end, col in (("u", 0), ("v", 1)):
            np.testing.assert_array_equal(np.load(tmp_path / "collab" / f"{prefix}_{end}.npy"),
                                          split[part]["edge"][:, col])


# -- partition and train take it ------------------------------------------------------------
@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """The three imports, once for the tests that use them."""
    tmp = tmp_path_factory.mktemp("imported")
    for name, make in (("ogbn-arxiv", arxiv_like), ("ogbn-mag", mag_like),
                       ("ogbl-collab", collab_like)):
        make(tmp / "ogb")
        import_ogb(name, tmp / name, tmp / "ogb")
    return tmp


@pytest.mark.parametrize("name", ["ogbn-arxiv", "ogbn-mag", "ogbl-collab"])
def test_dglx_partition_takes_it(imported, tmp_path, name):
    code, report = dglx("partition", imported / name, tmp_path / "parts", "--parts", 2)
    assert code == 0 and report["num_parts"] == 2


@pytest.mark.parametrize("name, task", [("ogbn-arxiv", ()), ("ogbn-mag", ()), (
    "ogbl-collab", ("--task", "link", "--eval-pairs", 10))])
def test_dglx_train_takes_it(imported, tmp_path, monkeypatch, name, task):
    """One process, two epochs: the node task (an R-GCN on the typed graph) and the link task
    (on OGB's split: nothing split into the cache). A job of one rank, meeting at a free port
    (a single process's default, 29500, may be another job's)."""
    from dglx_dist.runtime.env import free_local_port

    for key, value in {"RANK": 0, "WORLD_SIZE": 1, "LOCAL_RANK": 0, "LOCAL_WORLD_SIZE": 1,
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": free_local_port()}.items():
        monkeypatch.setenv(key, str(value))
    code, _ = dglx("train", "--data", imported / name, "--strategy", "distdgl", *task,
                   "--epochs", 2, "--no-progress", "--device", "cpu", "--cache-dir",
                   tmp_path / "cache", "--metrics-out", tmp_path / "m.jsonl")
    records = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert code == 0 and [r["epoch"] for r in records if "epoch" in r] == [0, 1]
    assert any(k.startswith("test_") for k in records[-1])
    made = [p.name for p in (tmp_path / "cache").iterdir() if p.is_dir()]
    assert len(made) == 1 and "metis" in made[0]  # the data's partitions: no split of its own


def test_the_link_task_takes_the_split_as_given(imported):
    """``dglx train --task link`` trains on the imported graph itself, ranking OGB's held-out
    pairs (no split of its own, so no session or cache is needed)."""
    from dglx_dist.tasks.link import reverse_ids, split_once

    data = imported / "ogbl-collab"
    train_dir, val, test = split_once(data, 0, None, None)
    assert train_dir == data
    for pair, names in ((val, ("val_u", "val_v")), (test, ("test_u", "test_v"))):
        for ids, name in zip(pair, names):
            np.testing.assert_array_equal(ids.numpy(), np.load(data / f"{name}.npy"))
    ds = read_dataset(data)
    rev = reverse_ids(ds.num_edges).numpy()
    np.testing.assert_array_equal(ds.src[rev], ds.dst)


# -- refusals, each one line ----------------------------------------------------------------
@pytest.mark.parametrize("name, error", [
    ("ogbn-nope", r"OGB 1\.3\.\d+ has no dataset 'ogbn-nope'; its ogbn-\* datasets: .*ogbn-arxiv"),
    ("ogbg-molhiv", r"'ogbg-molhiv' is no OGB node or link dataset: dglx imports ogbn-\* and "
                    r"ogbl-\*"),
    ("ogbn-proteins", r"ogbn-proteins: 112 binary classification tasks per node \(scored by "
                      r"rocauc\); dglx trains one class per node"),
    ("ogbl-ddi", r"ogbl-ddi: it has no node features"),
    ("ogbl-biokg", r"ogbl-biokg: a KG completion task over typed relations"),
    ("ogbl-wikikg2", r"ogbl-wikikg2: a KG completion task"),
])
def test_a_name_dglx_does_not_import_is_one_line(tmp_path, caplog, name, error):
    code, _ = dglx("data", "import", name, tmp_path / "out", "--ogb-root", tmp_path)
    assert code == 2 and not (tmp_path / "out").exists()
    assert __import__("re").search(error, one_error_line(caplog))


def _no_release(root):
    (arxiv_like(root) / "RELEASE_v1.txt").unlink()


def _no_edges(root):
    (arxiv_like(root) / "raw" / "edge.csv.gz").unlink()


def _bad_gzip(root):
    (arxiv_like(root) / "raw" / "node-feat.csv.gz").write_bytes(b"\x1f\x8b not gzip")


def _a_file(root):
    root.mkdir()
    (root / "ogbn_arxiv").write_text("not a folder")


def _root_a_file(root):
    root.write_text("not OGB's root")


def _hostile_split(root):
    class Hostile:  # what a hostile file would hold: a call that creates a file
        def __reduce__(self):
            return pathlib.Path.touch, (root / "ran",)
    split = collab_like(root) / "split" / "time"
    torch.save({"edge": Hostile()}, split / "train.pt")


@pytest.mark.parametrize("make, name, error", [
    (_no_release, "ogbn-arxiv", r"is not OGB's folder of ogbn-arxiv \(release 1\): it lacks "
                                r"RELEASE_v1\.txt"),
    (_no_edges, "ogbn-arxiv", r"it lacks raw/edge\.csv\.gz"),
    (_bad_gzip, "ogbn-arxiv", r"reading the graph failed \(.*\); are these OGB's files"),
    (_a_file, "ogbn-arxiv", r"ogbn_arxiv is not a directory"),
    (_root_a_file, "ogbn-arxiv", r"--ogb-root \S+ogb is not a directory"),
    (lambda root: root.mkdir(), "ogbn-arxiv", r"ogbn_arxiv does not exist \(OGB would "
                                              r"download ogbn-arxiv there; not with "
                                              r"--no-download\)"),
    (_hostile_split, "ogbl-collab", r"train\.pt: names \S+, which a file of numpy arrays does "
                                    r"not hold \(.*nothing in the file was run\)"),
], ids=["no-release", "no-edges", "bad-gzip", "a-file", "root-a-file", "missing", "hostile-pt"])
def test_a_root_that_is_not_ogbs_is_one_line(tmp_path, caplog, make, name, error):
    root = tmp_path / "ogb"
    make(root)
    code, _ = dglx("data", "import", name, tmp_path / "out", "--ogb-root", root,
                   "--no-download")
    assert code == 2 and not (tmp_path / "out").exists() and not (root / "ran").exists()
    assert __import__("re").search(error, one_error_line(caplog))


def test_a_missing_dataset_is_downloaded_as_ogbs_loaders_do(tmp_path, monkeypatch):
    """OGB's download functions, given a local zip laid out as OGB's (``arxiv/...``): the
    folder is renamed to ``ogbn_arxiv`` and imported; the zip is removed."""
    import shutil
    import zipfile

    ogb_package()  # first: a plain import of ogb asks PyPI whether it is outdated
    from ogb.utils import url as ogb_url

    folder = arxiv_like(tmp_path / "src")
    with zipfile.ZipFile(tmp_path / "arxiv.zip", "w") as z:
        for f in folder.rglob("*"):
            z.write(f, Path("arxiv") / f.relative_to(folder))
    asked = []

    def download_url(url, dest):
        asked.append(url)
        return shutil.copy(tmp_path / "arxiv.zip", dest)
    monkeypatch.setattr(ogb_url, "decide_download", lambda url: True)
    monkeypatch.setattr(ogb_url, "download_url", download_url)
    root = tmp_path / "ogb"
    import_ogb("ogbn-arxiv", tmp_path / "out", root)
    assert asked == ["http://snap.stanford.edu/ogb/data/nodeproppred/arxiv.zip"]
    assert sorted(p.name for p in root.iterdir()) == ["ogbn_arxiv"]
    assert read_dataset(tmp_path / "out").num_nodes == 50
    monkeypatch.setattr(ogb_url, "decide_download", lambda url: False)  # declined: one line
    with pytest.raises(DatasetFormatError, match="the download of .* was declined"):
        import_ogb("ogbn-mag", tmp_path / "mag", root)
    assert sorted(p.name for p in root.iterdir()) == ["ogbn_arxiv"]
    (root / "mag.zip").write_text("mine")  # a user's file where the download would land
    monkeypatch.setattr(ogb_url, "decide_download", lambda url: True)
    with pytest.raises(DatasetFormatError, match="mag.zip exists"):
        import_ogb("ogbn-mag", tmp_path / "mag", root)
    assert (root / "mag.zip").read_text() == "mine"


def test_without_the_ogb_package_it_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "ogb", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'dglx_dist\[ogb\]'"):
        import_ogb("ogbn-arxiv", tmp_path / "out", tmp_path)


# -- the output directory: dglx datagen's rules ---------------------------------------------
def test_the_output_directory_follows_datagens_rules(tmp_path):
    root = tmp_path / "ogb"
    arxiv_like(root)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    for overwrite in (False, True):  # a directory dglx did not write: never replaced
        with pytest.raises(OutputExistsError):
            import_ogb("ogbn-arxiv", mine, root, overwrite=overwrite)
    assert (mine / "notes.txt").read_text() == "mine" and len(list(mine.iterdir())) == 1
    (tmp_path / "empty").mkdir()  # an empty one is written
    import_ogb("ogbn-arxiv", tmp_path / "empty", root)
    with pytest.raises(OutputExistsError, match="already exists"):  # a dataset: --overwrite
        import_ogb("ogbn-arxiv", tmp_path / "empty", root, directed=True)
    import_ogb("ogbn-arxiv", tmp_path / "empty", root, overwrite=True, directed=True)
    assert read_dataset(tmp_path / "empty").extra["edges"] == "as OGB lists them"
    with pytest.raises(OutputExistsError, match="would hold the input"):
        import_ogb("ogbn-arxiv", root, root, overwrite=True)
    with pytest.raises(InvalidValueError, match="--directed not accepted"):
        collab_like(root)
        import_ogb("ogbl-collab", tmp_path / "c", root, directed=True)
