"""No file dglx creates or rewrites in a directory a user names is written through a link it
did not make (issue 77, item 1): a symbolic or hard link planted under a name dglx uses (a
lock, a record, a stamp, a probe, a result) is refused in one line, and the file it points to
keeps its bytes. The two-rank job of the issue's case: tests/e2e/test_checkpoint_jobs.py."""
import json
import os

import pytest

from dglx_dist.bench.suite import replot
from dglx_dist.cache import _drop_lock, making
from dglx_dist.checkpoint import files
from dglx_dist.checkpoint.lock import LOCK_FILE, JobLock
from dglx_dist.data.nolinks import create_new, open_own, replace_file
from dglx_dist.data.owned import RECORD, add_to_record, write_record
from dglx_dist.errors import CheckpointError, LinkedFileError
from dglx_dist.partition import partition_dataset
from dglx_dist.partition.io import VERIFIED, part_dir_name, record_verified

NOTES = b"the user's notes\n"
LINKS = ("symbolic", "hard", "dangling")


def _plant(kind: str, at, victim) -> None:
    """A link of ``kind`` at ``at`` to the user's file ``victim`` (a dangling one to a file
    that does not exist yet)."""
    if kind == "hard":
        os.link(victim, at)
    else:
        os.symlink(os.path.relpath(victim.with_name("new.txt") if kind == "dangling" else victim,
                                   at.parent), at)


@pytest.fixture
def victim(tmp_path):
    folder = tmp_path / "victim"
    folder.mkdir()
    (folder / "notes.txt").write_bytes(NOTES)
    return folder / "notes.txt"


def _untouched(victim, link) -> None:
    """The user's file kept its bytes, nothing appeared at a dangling link's target, and the
    link is still there."""
    assert victim.read_bytes() == NOTES
    assert not victim.with_name("new.txt").exists()
    assert os.path.lexists(link)


@pytest.mark.parametrize("kind", LINKS)
def test_a_planted_lock_of_a_checkpoint_dir_is_refused(tmp_path, victim, kind):
    root = tmp_path / "ck"
    root.mkdir()
    _plant(kind, root / LOCK_FILE, victim)
    what = "a hard link: the same file has 2 names" if kind == "hard" else "a symbolic link"
    with pytest.raises(CheckpointError, match=f"--checkpoint-dir {root}: its lock file: "
                                              f"{root / LOCK_FILE} is {what}") as refused:
        JobLock.take(root)
    assert "\n" not in str(refused.value)
    _untouched(victim, root / LOCK_FILE)


@pytest.mark.parametrize("kind", LINKS)
def test_a_planted_lock_of_a_cache_entry_is_refused(tmp_path, victim, kind):
    cache = tmp_path / "cache"
    cache.mkdir()
    _plant(kind, cache / ".entry.lock", victim)
    with pytest.raises(LinkedFileError, match=r"\.entry\.lock is (a symbolic|a hard) link"):
        with making(cache / "entry", timeout=1):
            pytest.fail("made an entry under a planted lock")
    _drop_lock(cache / "entry")  # pruning the entry leaves a planted lock where it is
    _untouched(victim, cache / ".entry.lock")


def test_the_write_probe_of_a_checkpoint_root_never_truncates_a_linked_file(tmp_path, victim):
    root = tmp_path / "ck"
    root.mkdir()
    _plant("symbolic", root / f".write-probe-{os.getpid()}", victim)
    with pytest.raises(LinkedFileError, match="write-probe"):
        files.make_root(root)
    _untouched(victim, root / f".write-probe-{os.getpid()}")


def test_a_checkpoint_file_is_never_written_through_a_link(tmp_path, victim):
    staging = tmp_path / "staging"
    staging.mkdir()
    _plant("hard", staging / "model.pt", victim)
    with pytest.raises(LinkedFileError, match="model.pt is a hard link"):
        files.write_file(staging, "model.pt", b"weights")
    _untouched(victim, staging / "model.pt")


@pytest.mark.parametrize("kind", LINKS)
def test_a_record_is_replaced_never_written_through(tmp_path, victim, kind):
    """A directory's record under a planted symbolic link is refused; a hard link's other name
    keeps its bytes (the record is a new file); the names records were once written under
    first (``NAME.PID``) are not used."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("a")
    _plant("symbolic", out / f"{RECORD}.{os.getpid()}", victim)
    _plant(kind, out / RECORD, victim)
    if kind == "hard":
        write_record(out, "bench")
        assert json.loads((out / RECORD).read_text())["kind"] == "bench"
        assert os.stat(out / RECORD).st_nlink == 1
    else:
        with pytest.raises(LinkedFileError, match=f"{RECORD} is a symbolic link"):
            write_record(out, "bench")
    _untouched(victim, out / f"{RECORD}.{os.getpid()}")


def test_adding_to_a_record_never_writes_through_its_temporary(tmp_path, victim):
    out = tmp_path / "out"
    out.mkdir()
    write_record(out, "bench")
    (out / "late.txt").write_text("late")
    _plant("symbolic", out / f"{RECORD}.{os.getpid()}", victim)  # the name it once used
    assert add_to_record(out, ("late.txt",))
    _untouched(victim, out / f"{RECORD}.{os.getpid()}")


def test_a_parts_verified_stamp_under_a_planted_link_is_refused(tiny, tmp_path, victim):
    partition_dataset(tiny, tmp_path / "P", "hash", 2)
    folder = tmp_path / "P" / part_dir_name(0)
    (folder / VERIFIED).unlink(missing_ok=True)
    _plant("symbolic", folder / VERIFIED, victim)
    names = sorted(p.name for p in folder.iterdir() if p.name != VERIFIED)
    with pytest.raises(LinkedFileError, match=r"\.verified\.json is a symbolic link"):
        record_verified(folder, names)
    _untouched(victim, folder / VERIFIED)


def test_replot_never_creates_a_file_through_a_dangling_link(tmp_path, victim):
    out = tmp_path / "B"
    out.mkdir()
    (out / "results.jsonl").write_text(json.dumps({"system": "dgl", "epoch_time": 1.0}) + "\n")
    setup = {"model": "sage", "layers": 2, "hidden": 16, "servers": 1, "ranks_per_server": 2,
             "epochs": 1}
    (out / "meta.json").write_text(json.dumps({
        "command": "dglx bench", "dataset": "d", "setup": setup, "table": "node",
        "target_acc": 0.5, "target_fraction": 0.9}))
    write_record(out, "bench")
    _plant("dangling", out / "results.md", victim)
    with pytest.raises(LinkedFileError, match="results.md is a symbolic link"):
        replot(out, figure=False)
    _untouched(victim, out / "results.md")


def test_the_helpers_write_new_files_and_replace_whole_ones(tmp_path):
    """What the helpers do where no link is planted: a new file is made with the umask's mode,
    a replaced one is whole and leaves no temporary, a lock file is created once and kept."""
    os.close(create_new(tmp_path / "new"))
    with pytest.raises(FileExistsError):
        create_new(tmp_path / "new")
    replace_file(tmp_path / "r.json", "one")
    replace_file(tmp_path / "r.json", b"two")
    assert (tmp_path / "r.json").read_text() == "two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "r.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o666 & ~umask
    for _ in range(2):
        os.close(open_own(tmp_path / "lock"))
    assert (tmp_path / "lock").is_file()
