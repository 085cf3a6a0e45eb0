"""Nothing a user had is deleted: writers replace or remove only the files their record
proves they wrote (issue 40, cases 1-3 and the rule for every command that writes)."""
import json
import socket
import subprocess
import sys

import pytest

from dglx_dist.bench.suite import _clear_results, check_out, replot
from dglx_dist.data import write_dataset
from dglx_dist.data.atomic import atomic_directory, remove_stale_temporaries
from dglx_dist.data.format import DATASET_DIR
from dglx_dist.data.owned import RECORD, read_record, remove_recorded, unproven, write_record
from dglx_dist.errors import InvalidValueError, OutputExistsError, PartitionError
from dglx_dist.partition import PartitionDir, partition_dataset


def _tree(path):
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}


def test_a_users_meta_json_does_not_make_a_dataset(tiny, tmp_path):
    """Case 1: a directory of the user's holding a file named meta.json is not replaced."""
    mine = tmp_path / "U"
    mine.mkdir()
    (mine / "meta.json").write_text('{"mine": 1}')
    (mine / "thesis.txt").write_text("thesis")
    before = _tree(mine)
    with pytest.raises(OutputExistsError, match=r"U holds files no dglx command recorded "
                                                r"writing \(meta.json, thesis.txt; no "):
        write_dataset(tiny, mine, overwrite=True)
    assert _tree(mine) == before and sorted(p.name for p in tmp_path.iterdir()) == ["U"]


def test_a_file_added_to_a_partition_directory_is_never_deleted(tiny, tmp_path):
    """Case 2: a real partition directory with the user's NOTES.md, and a planted
    partition.json, are both refused by --overwrite with everything kept."""
    out = tmp_path / "P"
    partition_dataset(tiny, out, "hash", 2)
    (out / "NOTES.md").write_text("my notes")
    before = _tree(out)
    with pytest.raises(PartitionError, match=r"holds 1 file\(s\) dglx did not write or that "
                                             r"changed since \(NOTES.md\)"):
        partition_dataset(tiny, out, "hash", 3, overwrite=True)
    assert _tree(out) == before
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "partition.json").write_text(json.dumps({"format": "dglx-partition"}))
    (planted / "data.csv").write_text("1,2")
    with pytest.raises(PartitionError, match="no dglx command recorded writing"):
        partition_dataset(tiny, planted, "hash", 2, overwrite=True)
    assert (planted / "data.csv").read_text() == "1,2"


def test_an_edited_file_is_not_ours_any_more(tiny, tmp_path):
    out = write_dataset(tiny, tmp_path / "d")
    with open(out / "meta.json", "a") as f:
        f.write(" ")  # the user's edit: no longer the bytes dglx wrote
    with pytest.raises(OutputExistsError, match=r"1 file\(s\) .*\(meta.json\)"):
        write_dataset(tiny, out, overwrite=True)
    assert unproven(out, read_record(out)) == ["meta.json"]


def test_overwrite_replaces_what_the_record_lists(tiny, tmp_path):
    out = tmp_path / "P"
    partition_dataset(tiny, out, "hash", 3)
    PartitionDir(out).load_part(0)  # a load adds a verification stamp, and records it
    stamp = "part-00000/.verified.json"
    assert (out / stamp).is_file() and "sha256" in read_record(out).files[stamp]
    assert unproven(out, read_record(out)) == []
    partition_dataset(tiny, out, "hash", 2, overwrite=True)
    assert PartitionDir(out).num_parts == 2 and not (out / "part-00002").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["P"]


def test_an_empty_directory_is_written_without_overwrite(tiny, tmp_path):
    (tmp_path / "empty").mkdir()
    write_dataset(tiny, tmp_path / "empty")
    assert read_record(tmp_path / "empty").kind == "dataset"
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputExistsError, match="exists and is not a directory"):
        write_dataset(tiny, tmp_path / "file", overwrite=True)


def test_a_file_that_appears_during_the_write_is_kept(tiny, tmp_path):
    """Checked before the work, and again file by file when the old directory goes: what the
    user put there meanwhile moves to a visible NAME.kept-* directory."""
    out = write_dataset(tiny, tmp_path / "d")
    with atomic_directory(out, True, kind=DATASET_DIR) as tmp:
        (out / "late.txt").write_text("written while dglx worked")
        (tmp / "x").write_text("new")
    assert sorted(p.name for p in out.iterdir()) == [RECORD, "x"]
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("d.kept-")]
    assert len(kept) == 1 and _tree(kept[0]) == {"d/late.txt": b"written while dglx worked"}


def test_a_nested_record_speaks_for_its_own_directory(tiny, tmp_path):
    top = tmp_path / "out"
    write_dataset(tiny, top / "work" / "data")
    (top / "results.jsonl").write_text("{}\n")
    write_record(top, "bench")
    assert "work/data/meta.json" not in read_record(top).files
    assert unproven(top, read_record(top)) == []
    (top / "work" / "data" / "mine.txt").write_text("x")
    assert unproven(top, read_record(top)) == ["work/data/mine.txt"]
    assert remove_recorded(top, read_record(top)) == ["work/data/mine.txt"]
    assert _tree(top) == {"work/data/mine.txt": b"x"}


def test_a_dead_writers_old_directory_loses_only_recorded_files(tiny, tmp_path):
    """A replacement killed between its renames leaves ``.NAME.old-*``; the next writer
    removes what its record proves and keeps the rest where the user can see it."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    old = tmp_path / f".d.old-{gone.pid}@{socket.gethostname()}.x"
    write_dataset(tiny, old / "d")
    (old / "d" / "mine.txt").write_text("keep")
    assert remove_stale_temporaries(tmp_path / "d") == [old]
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("d.kept-")]
    assert not old.exists() and _tree(kept[0]) == {"d/mine.txt": b"keep"}


def test_nothing_is_removed_through_a_link_in_place_of_a_directory(tiny, tmp_path):
    """A link (absolute) to a recorded directory of the user's, where dglx replaces or prunes
    a directory: nothing behind it is removed, and what was there (a link or a file) is kept
    in a visible ``NAME.kept-*`` (hostile re-pass of issue 77: the files behind the link were
    deleted, a file was hidden in ``.NAME.old-*``)."""
    from dglx_dist.data.atomic import replace_directory

    backup = tmp_path / "backup"
    write_dataset(tiny, backup)
    before = _tree(backup)
    assert remove_recorded(tmp_path / "nowhere", None) == []
    for name, plant in (("linked", lambda p: p.symlink_to(backup.resolve())),
                        ("filed", lambda p: p.write_text("junk"))):
        out = tmp_path / "root" / name
        out.parent.mkdir(exist_ok=True)
        plant(out)
        assert remove_recorded(out, read_record(backup)) == ["."]
        new = tmp_path / "root" / f".{name}.tmp"
        new.mkdir()
        replace_directory(new, out)
        (kept,) = [p for p in out.parent.iterdir() if p.name.startswith(f"{name}.kept-")]
        assert out.is_dir() and not out.is_symlink()
        assert (kept / name).is_symlink() or (kept / name).read_text() == "junk"
    assert _tree(backup) == before
    assert not [p for p in (tmp_path / "root").iterdir() if p.name.startswith(".")]


def test_datagen_overwrite_on_a_users_directory_is_one_line(tmp_path):
    """The issue's command line, exactly: exit 2, one line, every file still there."""
    mine = tmp_path / "U"
    mine.mkdir()
    (mine / "meta.json").write_text('{"mine":1}\n')
    (mine / "thesis.txt").write_text("thesis\n")
    r = _dglx("datagen", mine, "--num-nodes", "1000", "--num-edges", "5000", "--overwrite")
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "refusing to replace it" in r.stderr
    assert _tree(mine) == {"meta.json": b'{"mine":1}\n', "thesis.txt": b"thesis\n"}


@pytest.mark.parametrize("planted", [
    {"derived": ["*"], "files": {}},  # a pattern
    {"derived": ["meta.json", "thesis.txt"],  # names without checksums
     "files": {"meta.json": {"bytes": 11}, "thesis.txt": {"bytes": 7}}},
])
def test_a_planted_record_without_checksums_proves_nothing(tmp_path, planted):
    """Issue 61, case 2f: removal rests on listed names with their checksums, never on a
    pattern: ``--overwrite`` refuses in one line and keeps every file."""
    mine = tmp_path / "U"
    mine.mkdir()
    (mine / "meta.json").write_text('{"mine":1}\n')
    (mine / "thesis.txt").write_text("thesis\n")
    (mine / RECORD).write_text(json.dumps({"format": "dglx-written", "kind": "dataset",
                                           **planted}))
    before = _tree(mine)
    assert unproven(mine, read_record(mine)) == ["meta.json", "thesis.txt"]
    r = _dglx("datagen", mine, "--num-nodes", "1000", "--num-edges", "5000", "--overwrite")
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "2 file(s) dglx did not write" in r.stderr and "refusing to replace it" in r.stderr
    assert _tree(mine) == before and sorted(p.name for p in tmp_path.iterdir()) == ["U"]


def test_a_stamp_under_an_older_records_pattern_is_recorded_at_the_next_load(tiny, tmp_path):
    """An earlier version's record named the stamps by a pattern: that proves nothing now
    (``--overwrite`` would keep the stamp), and the next load records the stamp's checksum."""
    out = tmp_path / "P"
    partition_dataset(tiny, out, "hash", 2)
    PartitionDir(out).load_part(0)
    body = json.loads((out / RECORD).read_text())
    del body["files"]["part-00000/.verified.json"]
    body["derived"] = ["part-*/.verified.json"]
    (out / RECORD).write_text(json.dumps(body))
    assert unproven(out, read_record(out)) == ["part-00000/.verified.json"]
    PartitionDir(out).load_part(0)  # stamped already: a sampled check, and the record healed
    assert unproven(out, read_record(out)) == []
    partition_dataset(tiny, out, "hash", 3, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["P"]


def _dglx(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "dglx_dist", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def test_bench_out_holding_results_is_refused(tmp_path):
    """Case 3: `dglx bench --out B` on the user's (or an earlier run's) results.jsonl and
    meta.json: refused in one line, with and without --overwrite, nothing changed."""
    out = tmp_path / "B"
    out.mkdir()
    (out / "results.jsonl").write_text('{"mine": 1}\n')
    (out / "meta.json").write_text('{"mine": 2}\n')
    before = _tree(out)
    for extra in ((), ("--overwrite",)):
        r = _dglx("bench", "--no-plot", "--out", out, *extra)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "refusing to replace it" in r.stderr or "already exists" in r.stderr
    assert _tree(out) == before


def test_bench_out_of_an_earlier_run(tiny, tmp_path):
    out = tmp_path / "B"
    cached = out / "work" / "synthetic-x"
    write_dataset(tiny, cached)
    (out / "results.jsonl").write_text(json.dumps({"system": "dgl", "epoch_time": 1.0}) + "\n")
    (out / "meta.json").write_text(json.dumps({"command": "dglx bench", "setup": {}}))
    write_record(out, "bench")
    with pytest.raises(OutputExistsError, match="already exists"):
        check_out(out, False, False)
    check_out(out, True, False)
    check_out(out, False, True)  # --replot rewrites an earlier run's outputs
    _clear_results(out)
    assert sorted(p.name for p in out.iterdir()) == [RECORD, "work"]
    assert (cached / "meta.json").is_file()  # the cache stays for the new run
    (out / "results.jsonl").write_text('{"system": "dgl"}\n{"syst')  # truncated
    (out / "meta.json").write_text(json.dumps({"command": "dglx bench", "setup": {}}))
    with pytest.raises(InvalidValueError, match=r"results.jsonl line 2: not a result row"):
        replot(out, figure=False)
    (tmp_path / "F").write_text("x")
    with pytest.raises(OutputExistsError, match="exists and is not a directory"):
        check_out(tmp_path / "F", True, False)
