"""Partition directories: refusing bad input, surviving interruption, detecting damage."""
import json

import numpy as np
import pytest

from dglx_dist.errors import InsufficientMemoryError, PartitionError, PartitionFormatError
from dglx_dist.partition import PartitionDir, partition_dataset
from dglx_dist.partition import io as pio


@pytest.fixture
def pdir_path(tiny, tmp_path):
    out = tmp_path / "parts"
    # METIS with its default constraints, through the METIS library: these tests run without
    # DGL too (make test-core)
    partition_dataset(tiny, out, "metis", 3)
    return out


def test_interrupted_partitioning_leaves_nothing_loadable(tiny, tmp_path, monkeypatch):
    real = pio._write_part

    def dies_on_part_1(pc, folder):
        if pc.part == 1:
            raise KeyboardInterrupt("simulated kill")
        return real(pc, folder)

    monkeypatch.setattr(pio, "_write_part", dies_on_part_1)
    with pytest.raises(KeyboardInterrupt):
        partition_dataset(tiny, tmp_path / "parts", "hash", 3)
    assert list(tmp_path.iterdir()) == []


def test_interrupted_overwrite_keeps_previous(pdir_path, tiny, monkeypatch):
    before = json.loads((pdir_path / pio.MANIFEST).read_text())
    monkeypatch.setattr(pio, "_write_part", lambda pc, folder: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        partition_dataset(tiny, pdir_path, "hash", 2, overwrite=True)
    assert json.loads((pdir_path / pio.MANIFEST).read_text()) == before
    PartitionDir(pdir_path).load_part(2)
    assert sorted(p.name for p in pdir_path.parent.iterdir()) == ["parts"]


def test_existing_output_is_refused_untouched(pdir_path, tiny):
    before = (pdir_path / pio.MANIFEST).read_bytes()
    with pytest.raises(PartitionError, match="already exists"):
        partition_dataset(tiny, pdir_path, "hash", 2)
    assert (pdir_path / pio.MANIFEST).read_bytes() == before
    partition_dataset(tiny, pdir_path, "hash", 2, overwrite=True)
    assert PartitionDir(pdir_path).num_parts == 2


def test_memory_estimate_refuses_before_work(tiny, tmp_path):
    with pytest.raises(InsufficientMemoryError, match=r"needs about .* MiB .* only 0 MiB"):
        partition_dataset(tiny, tmp_path / "p", "metis", 2, memory_limit=1000)
    assert not (tmp_path / "p").exists()


def test_estimate_grows_with_graph():
    from dglx_dist.partition import PARTITIONERS, GraphTypes
    small, big = GraphTypes.one_type(10**4, 10**5, 16), GraphTypes.one_type(10**6, 2 * 10**7, 128)
    for name in PARTITIONERS.names():
        part = PARTITIONERS.build(name)
        assert part.estimate_peak_bytes(big, 4) > 50 * part.estimate_peak_bytes(small, 4)
    assert (PARTITIONERS.build("metis").estimate_peak_bytes(big, 4)
            > PARTITIONERS.build("hash").estimate_peak_bytes(big, 4))


def test_damaged_part_is_detected_and_others_still_load(pdir_path):
    victim = pdir_path / "part-00001" / "edges.arrow"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    pdir = PartitionDir(pdir_path)
    with pytest.raises(PartitionFormatError, match=r"edges\.arrow: sha256 .* does not match"):
        pdir.load_part(1)
    # loading one part never reads another's files
    for name in pio.PART_FILES:
        (pdir_path / "part-00002" / name).unlink()
    assert pdir.load_part(0).num_core > 0
    with pytest.raises(PartitionFormatError, match=r"part-00002/nodes\.arrow: missing"):
        pdir.load_part(2)


def test_each_host_hashes_a_partition_in_full_once(pdir_path, tmp_path, monkeypatch):
    """Writing is not verifying: the first load on a host hashes the part's files, later
    loads of the same files do not; a copy (new inodes, times kept) is hashed again, and so
    is a part another host verified (issue 40, case 5)."""
    import shutil

    from dglx_dist.partition import checksums

    hashed = []
    real = checksums.verify_file
    monkeypatch.setattr(checksums, "verify_file", lambda f, i: hashed.append(f) or real(f, i))
    PartitionDir(pdir_path).load_part(0)
    assert sorted(f.name for f in hashed) == sorted(pio.PART_FILES)
    PartitionDir(pdir_path).load_part(0)  # a new reader: this host's stamp stands
    assert len(hashed) == len(pio.PART_FILES)
    copy = tmp_path / "copy"
    shutil.copytree(pdir_path, copy)  # copy2: the modification times are kept
    PartitionDir(copy).load_part(0)
    assert len(hashed) == 2 * len(pio.PART_FILES)
    monkeypatch.setattr(pio.socket, "gethostname", lambda: "another-host")
    PartitionDir(copy).load_part(0)
    assert len(hashed) == 3 * len(pio.PART_FILES)


def test_damage_in_place_with_the_times_kept_is_caught(pdir_path):
    """Bit rot or a bad copy: same size, inode and modification time; never loaded since it
    was written, so the load hashes it and refuses it."""
    import os

    feat = pdir_path / "part-00001" / "feat.arrow"
    st = feat.stat()
    with open(feat, "r+b") as f:
        f.seek(st.st_size // 2)
        f.write(bytes(64))
    os.utime(feat, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(PartitionFormatError, match="does not match the manifest"):
        PartitionDir(pdir_path).load_part(1)


def test_damage_after_a_hosts_first_load_is_caught_by_the_sampled_check(tmp_path):
    """Issue 61, case 2g: after this host's full check, 5 MiB zeroed at offset 1 MiB with
    the size and times kept (its stamp still matches) is refused at the next load by the
    sampled chunk check, in one line naming the file and chunk. The file has 8 chunks, all
    in every load's sample, so the damage is found with certainty, not by luck."""
    import os

    from dglx_dist.partition import checksums
    from dglx_dist.testing import tiny_dataset

    out = tmp_path / "P"
    partition_dataset(tiny_dataset(num_nodes=8000, feat_dim=512), out, "hash", 2)
    PartitionDir(out).load_part(0)  # this host's full check: stamped
    feat = out / "part-00000" / "feat.arrow"
    st = feat.stat()
    assert checksums.catch_probability(-(-st.st_size // checksums.CHUNK_BYTES), 5) == 1.0
    with open(feat, "r+b") as f:
        f.seek(1 << 20)
        f.write(bytes(5 << 20))
    os.utime(feat, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert pio.still_verified(feat.parent, pio.PART_FILES)  # the stamp cannot see it
    with pytest.raises(PartitionFormatError, match=r"part-00000/feat\.arrow: sha256 of chunk "
                                                   r"[1-5] .*sampled check") as err:
        PartitionDir(out).load_part(0)
    assert "\n" not in str(err.value)
    assert PartitionDir(out).load_part(1).num_core > 0  # an undamaged part still loads


def test_catch_probability_and_sample_size():
    from dglx_dist.partition import checksums

    assert [checksums.sample_size(n) for n in (0, 3, 8, 100, 1000)] == [0, 3, 8, 8, 63]
    assert checksums.catch_probability(10, 1, 1) == pytest.approx(0.1)
    assert checksums.catch_probability(10, 3, 2) == pytest.approx(1 - 21 / 45)
    assert checksums.catch_probability(8, 1) == 1.0  # a small file is checked whole


def _edit_manifest(path, fn):
    m = json.loads((path / pio.MANIFEST).read_text())
    fn(m)
    (path / pio.MANIFEST).write_text(json.dumps(m))


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.update(version=3), r"version 3; this dglx_dist reads versions 1 and 2"),
    (lambda m: m.update(version=0), r"version 0; this dglx_dist reads versions 1 and 2"),
    (lambda m: m.update(version=1), r"parts\[0\]\.files lists .*nodes\.parquet"),
    (lambda m: m.update(format="dgl"), r"format 'dgl'; expected 'dglx-partition'"),
    (lambda m: m.pop("node_book"), r"field 'node_book' = None; expected dict"),
    (lambda m: m.update(num_parts=5), r"3 part entries for num_parts = 5"),
    (lambda m: m["parts"][0].update(num_core=-3), r"parts\[0\]\.num_core = -3"),
    (lambda m: m["parts"][1]["files"].pop("feat.arrow"), r"parts\[1\]\.files lists"),
    (lambda m: m["node_book"].update(offsets=[0, 5, 10]), r"node_book covers 10 nodes in 2"),
    (lambda m: m.update(feature_slices=[0, 3]), r"slices ending at feat_dim = 8"),
    (lambda m: m["node_book"].update(kind="grid"), r"unknown node book kind 'grid'"),
    (lambda m: m["parts"][0]["files"]["feat.arrow"]["chunks"].update(sha256=["x"]),
     r"parts\[0\]\.files\['feat\.arrow'\]\.chunks = .*expected \{chunk_bytes"),
    (lambda m: m["parts"][0]["files"]["feat.arrow"]["chunks"]["sha256"].append("0" * 64),
     r"parts\[0\]\.files\['feat\.arrow'\]\.chunks lists 2 chunk sums; expected 1"),
])
def test_bad_manifest_is_named(pdir_path, edit, message):
    _edit_manifest(pdir_path, edit)
    with pytest.raises(PartitionFormatError, match=message):
        PartitionDir(pdir_path)


def test_missing_manifest(tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(PartitionFormatError, match="missing; not a partition directory"):
        PartitionDir(tmp_path / "x")


def test_part_from_another_partitioning_is_rejected(tiny, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    partition_dataset(tiny, a, "hash", 2, {"seed": 1})
    partition_dataset(tiny, b, "hash", 2, {"seed": 2})
    # swap part 0 together with its manifest entry: checksums agree, ownership does not
    ma, mb = (json.loads((d / pio.MANIFEST).read_text()) for d in (a, b))
    ma["parts"][0] = mb["parts"][0]
    (a / pio.MANIFEST).write_text(json.dumps(ma))
    for name in pio.PART_FILES:
        (a / "part-00000" / name).write_bytes((b / "part-00000" / name).read_bytes())
    with pytest.raises(PartitionFormatError, match="does not list the core ids"):
        PartitionDir(a).load_part(0)


def test_out_of_range_local_ids_are_rejected(pdir_path):
    import pyarrow as pa
    from dglx_dist.data.owned import sha256_file
    from dglx_dist.data.checked import write_arrow
    f = pdir_path / "part-00000" / "edges.arrow"
    t = pa.ipc.open_file(f).read_all()
    src = t.column("src").to_numpy().copy()
    src[0] = 10**6
    write_arrow(t.set_column(0, "src", pa.array(src)), f)
    _edit_manifest(pdir_path, lambda m: m["parts"][0]["files"]["edges.arrow"].update(
        bytes=f.stat().st_size, sha256=sha256_file(f)))
    with pytest.raises(PartitionFormatError, match=r"field 'src' row 0 = 1000000"):
        PartitionDir(pdir_path).load_part(0)


def test_version_1_parquet_parts_still_load(pdir_path, tmp_path):
    """Directories written before the parts became Arrow IPC files (format version 1, the
    same tables as Parquet) load unchanged: nothing a user partitioned has to be redone."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq
    from dglx_dist.data.owned import sha256_file
    from dglx_dist.data.checked import WRITE_OPTIONS

    old = tmp_path / "v1"
    shutil.copytree(pdir_path, old)
    m = json.loads((old / pio.MANIFEST).read_text())
    for entry in m["parts"]:
        files = {}
        for table in pio.PART_TABLES:
            arrow = old / entry["dir"] / pio.part_file_name(table)
            parquet = old / entry["dir"] / pio.part_file_name(table, 1)
            pq.write_table(pa.ipc.open_file(arrow).read_all(), parquet, **WRITE_OPTIONS)
            arrow.unlink()
            files[parquet.name] = {"bytes": parquet.stat().st_size,
                                   "sha256": sha256_file(parquet)}
        entry["files"] = files
    m["version"] = 1
    (old / pio.MANIFEST).write_text(json.dumps(m))
    new_dir, old_dir = PartitionDir(pdir_path), PartitionDir(old)
    for p in range(new_dir.num_parts):
        a, b = new_dir.load_part(p), old_dir.load_part(p)
        for field in ("core_gid", "halo_gid", "src", "dst", "eid", "label", "train", "feat"):
            assert np.array_equal(getattr(a, field), getattr(b, field)), field
        assert np.array_equal(new_dir.halo_ids(p), old_dir.halo_ids(p))
    assert np.array_equal(new_dir.edge_part_ids(), old_dir.edge_part_ids())


def test_to_original_round_trip(pdir_path, tiny):
    pdir = PartitionDir(pdir_path)
    gids = np.arange(tiny.num_nodes)
    orig = pdir.to_original(gids)
    assert np.array_equal(np.sort(orig), gids)
    assert np.array_equal(tiny.label[orig], np.concatenate(
        [pdir.load_part(p).label for p in range(3)]))


def test_nonfinite_features_stop_partitioning_unless_warned(tiny, tmp_path):
    from dglx_dist.data import write_dataset
    from dglx_dist.errors import DatasetFormatError

    feat = tiny.feat.copy()
    feat[5, 1] = np.nan
    data = write_dataset(tiny.replace(feat=feat), tmp_path / "d")
    with pytest.raises(DatasetFormatError, match=r"row 5 column 1 = nan"):
        partition_dataset(data, tmp_path / "parts", "hash", 2)
    assert not (tmp_path / "parts").exists()
    partition_dataset(data, tmp_path / "parts", "hash", 2, nonfinite="warn")
    assert PartitionDir(tmp_path / "parts").num_parts == 2


@pytest.mark.parametrize("method", ["metis", "hash", "feature_dim"])
def test_edge_data_is_stored_with_its_edge(tiny, tmp_path, method):
    """Every edge's row lands in the part that stores the edge, and the partitioned edge ids
    lead back to it."""
    rng = np.random.default_rng(0)
    edata = {"w": rng.random(tiny.num_edges).astype(np.float32),
             "pair": rng.integers(0, 9, (tiny.num_edges, 2))}
    partition_dataset(tiny.replace(edata=edata), tmp_path / "p", method, 3)
    pdir = PartitionDir(tmp_path / "p")
    assert pdir.edge_data == {"w": {"dtype": "float32", "shape": []},
                              "pair": {"dtype": "int64", "shape": [2]}}
    stored = {name: np.concatenate([pdir.load_edge_data(p)[name] for p in range(3)])
              for name in edata}
    part_ids = pdir.edge_part_ids()
    for p in range(3):
        lo, hi = pdir.edge_offsets[p], pdir.edge_offsets[p + 1]
        assert np.array_equal(np.sort(part_ids[pdir.load_part(p).eid]), np.arange(lo, hi))
    for name, values in edata.items():
        assert np.array_equal(stored[name][part_ids], values)


def test_partitions_without_edge_data_have_none(pdir_path):
    pdir = PartitionDir(pdir_path)
    assert pdir.edge_data == {} and pdir.load_edge_data(0) == {}
    assert "edge_data" not in json.loads((pdir_path / pio.MANIFEST).read_text())


def test_overwrite_replaces_only_partitions_that_do_not_hold_the_input(tiny, tmp_path):
    """`dglx partition DATA OUT --overwrite` never deletes the input or a directory that is
    not a partition directory; it does replace an earlier partition directory."""
    from dglx_dist.data import write_dataset

    data = write_dataset(tiny, tmp_path / "data")
    for out in (data, tmp_path):  # the input itself, the input's parent
        with pytest.raises(PartitionError, match="would hold the input"):
            partition_dataset(data, out, "hash", 2, overwrite=True)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(PartitionError, match="holds files no dglx command recorded writing"):
        partition_dataset(data, mine, "hash", 2, overwrite=True)
    with pytest.raises(FileExistsError, match="holds files no dglx command recorded writing"):
        write_dataset(tiny, mine, overwrite=True)
    assert (mine / "notes.txt").read_text() == "keep"
    assert sorted(p.name for p in data.iterdir()) == [".dglx-written.json", "edges.parquet",
                                                       "meta.json", "nodes.parquet"]
    with pytest.raises(PartitionError, match="is a dglx dataset directory, not a dglx "
                                             "partition directory"):
        partition_dataset(tiny, data, "hash", 2, overwrite=True)
    partition_dataset(data, tmp_path / "parts", "hash", 2)
    partition_dataset(data, tmp_path / "parts", "metis", 3, overwrite=True)
    assert PartitionDir(tmp_path / "parts").num_parts == 3


def test_stale_temporaries_of_dead_writers_are_removed(tiny, tmp_path):
    """A partitioning killed with SIGKILL leaves its temporary; the next run into the same
    directory removes it, but not one whose writer still runs or ran on another host."""
    import os
    import socket
    import subprocess

    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that no longer runs
    host = socket.gethostname()
    dead = tmp_path / f".parts.tmp-{gone.pid}@{host}.x1"
    live = tmp_path / f".parts.tmp-{os.getpid()}@{host}.x2"
    remote = tmp_path / f".parts.old-{gone.pid}@elsewhere.x3"
    for d in (dead, live, remote):
        (d / "part-00000").mkdir(parents=True)
    partition_dataset(tiny, tmp_path / "parts", "hash", 2)
    assert not dead.exists() and live.exists() and remote.exists()


def test_a_full_disk_names_the_directory_and_leaves_nothing(tiny, tmp_path, monkeypatch):
    import errno

    from dglx_dist.errors import DiskFullError

    from dglx_dist.data import write_dataset

    data = write_dataset(tiny, tmp_path / "data")  # compressed Parquet: once taken as the size
    real = pio._write_part

    def fills_the_disk(pc, folder):
        if pc.part == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(pc, folder)

    monkeypatch.setattr(pio, "_write_part", fills_the_disk)
    with pytest.raises(DiskFullError, match=r"no space left on the device of .* while writing "
                                            r".*parts: .* KiB were written .* it needs about "
                                            r"(\d+) KiB") as info:
        partition_dataset(data, tmp_path / "parts", "hash", 3)
    assert [p.name for p in tmp_path.iterdir()] == ["data"]
    monkeypatch.undo()  # what it needs, said beside what a whole run writes (once "0 MiB")
    partition_dataset(data, tmp_path / "parts", "hash", 3)
    written = sum(f.stat().st_size for f in (tmp_path / "parts").rglob("*") if f.is_file())
    import re
    needs = int(re.search(r"it needs about (\d+) KiB", str(info.value)).group(1))
    assert written / 3 < 1024 * needs < 3 * written, (needs, written)


@pytest.mark.parametrize("field,value", [("num_nodes", 10**15), ("num_classes", 10**12)])
def test_implausible_declared_sizes_are_named(pdir_path, tiny, tmp_path, field, value):
    from dglx_dist.data import write_dataset
    from dglx_dist.data.format import read_meta
    from dglx_dist.errors import DatasetFormatError

    manifest = json.loads((pdir_path / pio.MANIFEST).read_text())
    manifest[field] = value
    (pdir_path / pio.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(PartitionFormatError, match=f"field '{field}' = {value} is implausible"):
        PartitionDir(pdir_path)
    data = write_dataset(tiny, tmp_path / "data")
    meta = json.loads((data / "meta.json").read_text())
    meta[field] = value
    (data / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DatasetFormatError, match=f"field '{field}' = {value} is implausible"):
        read_meta(data)
