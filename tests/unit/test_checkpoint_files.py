"""The checkpoint format on disk: commit is all-or-nothing, damaged or half-written checkpoints
are skipped for the newest intact one, hostile manifests and archives are refused with
CheckpointError (fuzzed with hypothesis), and archives never unpickle code."""
import json
import shutil
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dglx_dist.checkpoint import files
from dglx_dist.errors import CheckpointError
from tests.doubles.fuzz import FUZZ, HOSTILE



def _checkpoint(root: Path, epoch: int, keep: int = 5) -> dict:
    staging = files.staging_dir(root, epoch)
    staging.mkdir(parents=True)
    state = {"w": torch.full((3, 2), float(epoch)), "epoch": epoch, "names": ["a", "b"]}
    entries = {"rank-00000.pt": files.write_file(staging, "rank-00000.pt", files.encode(state)),
               "rank-00001.pt": files.write_file(staging, "rank-00001.pt", files.encode([epoch]))}
    files.commit(root, epoch, {"format": files.FORMAT, "epoch": epoch, "step": 10 * epoch,
                               "world_size": 2, "strategy": "distdgl", "files": entries}, keep)
    return state


def _load(root: Path):
    found = files.find_latest(root)
    if found is None:
        return None
    path, manifest = found
    return manifest["epoch"], files.decode(files.read_file(path, manifest, "rank-00000.pt"), "x")


def test_commit_find_and_prune(tmp_path):
    for epoch in (1, 2, 3):
        _checkpoint(tmp_path, epoch, keep=2)
    assert [e for e, _ in files.list_checkpoints(tmp_path)] == [2, 3]
    epoch, state = _load(tmp_path)
    assert epoch == 3 and torch.equal(state["w"], torch.full((3, 2), 3.0))
    _checkpoint(tmp_path, 3, keep=2)  # the same epoch again replaces it whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-000002", "epoch-000003"]


def test_commit_and_pruning_leave_what_they_did_not_write(tmp_path):
    """A directory named like a checkpoint but without a manifest is the user's: pruning keeps
    it, and a commit of that epoch refuses to replace it."""
    mine = tmp_path / "epoch-000001"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    for epoch in (2, 3, 4):
        _checkpoint(tmp_path, epoch, keep=1)
    with pytest.raises(CheckpointError, match="holds notes.txt, which no checkpoint manifest "
                                              "lists"):
        _checkpoint(tmp_path, 1, keep=1)
    assert (mine / "notes.txt").read_text() == "keep"
    assert [e for e, _ in files.list_checkpoints(tmp_path)] == [1, 4]


def test_a_damaged_checkpoint_of_the_same_epoch_is_moved_aside_whole(tmp_path, caplog):
    """A resume skips a damaged newest checkpoint and trains that epoch again; its new
    checkpoint then takes the damaged one's place, which is kept whole beside it (issue 38:
    the save used to fail after the epoch, losing it)."""
    _checkpoint(tmp_path, 1)
    _checkpoint(tmp_path, 2)
    damaged = tmp_path / "epoch-000002" / "rank-00000.pt"
    damaged.write_bytes(damaged.read_bytes()[:100])
    assert _load(tmp_path)[0] == 1  # the resume's view: the damaged one is skipped
    with caplog.at_level("WARNING"):
        _checkpoint(tmp_path, 2)
    assert _load(tmp_path)[0] == 2
    (aside,) = tmp_path.glob("epoch-000002.kept-*/epoch-000002")
    assert (aside / "rank-00000.pt").stat().st_size == 100  # nothing deleted
    assert "rank-00000.pt changed since it was written" in caplog.text
    assert [e for e, _ in files.list_checkpoints(tmp_path)] == [1, 2]


@pytest.mark.parametrize("manifest", ["[]", "", '{"epoch": "2"}'])
def test_a_checkpoint_whose_manifest_is_damaged_is_moved_aside_whole(tmp_path, caplog,
                                                                     manifest):
    """The resume skips a checkpoint whose manifest is damaged and trains its epoch again;
    the new one takes its place and the old is kept whole (hostile re-pass of issue 77: the
    save was refused, "holds manifest.json, rank-00000.pt, rank-00001.pt, which no
    checkpoint manifest lists", and the job failed after training the epoch again)."""
    _checkpoint(tmp_path, 1)
    _checkpoint(tmp_path, 2)
    (tmp_path / "epoch-000002" / files.MANIFEST).write_text(manifest)
    assert _load(tmp_path)[0] == 1
    with caplog.at_level("WARNING"):
        _checkpoint(tmp_path, 2)
    assert _load(tmp_path)[0] == 2 and "its manifest cannot be read" in caplog.text
    (aside,) = tmp_path.glob("epoch-000002.kept-*/epoch-000002")
    assert (aside / files.MANIFEST).read_text() == manifest
    assert sorted(p.name for p in aside.iterdir()) == ["manifest.json", "rank-00000.pt",
                                                       "rank-00001.pt"]


def test_pruning_removes_only_the_files_a_manifest_lists(tmp_path):
    """A user's file inside a checkpoint, or a checkpoint file changed since, survives the
    pruning of its checkpoint (issue 40: only files provably written are deleted)."""
    _checkpoint(tmp_path, 1)
    _checkpoint(tmp_path, 2)
    (tmp_path / "epoch-000001" / "notes.txt").write_text("keep")
    with open(tmp_path / "epoch-000002" / "rank-00000.pt", "ab") as f:
        f.write(b"edited")
    _checkpoint(tmp_path, 3, keep=1)
    _checkpoint(tmp_path, 4, keep=1)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")
                  if p.is_file() and "epoch-000004" not in p.parts) == [
        "epoch-000001/notes.txt", "epoch-000002/rank-00000.pt"]


def test_a_root_holding_other_files_is_refused(tmp_path):
    _checkpoint(tmp_path / "ok", 1)
    files.check_contents(tmp_path / "ok")
    (tmp_path / "ok" / "thesis.tex").write_text("x")
    with pytest.raises(CheckpointError, match="holds thesis.tex, which are not checkpoints"):
        files.check_contents(tmp_path / "ok")


def _backup_of_epoch(tmp_path: Path, epoch: int) -> tuple[Path, dict]:
    """A user's copy of a checkpoint outside the root, and its files' bytes."""
    _checkpoint(tmp_path / "made", epoch)
    backup = tmp_path / "backup" / f"epoch-{epoch:06d}"
    backup.parent.mkdir()
    shutil.copytree(tmp_path / "made" / backup.name, backup)
    return backup, {p.name: p.read_bytes() for p in backup.iterdir()}


@pytest.mark.parametrize("epoch", [1, 3], ids=["pruned", "replaced"])
def test_a_link_under_a_checkpoints_name_is_never_deleted_through(tmp_path, epoch):
    """A symbolic link planted in the root under a checkpoint's name, to the user's copy of
    a checkpoint (absolute), is refused before the first epoch; pruning and a commit of its
    epoch never delete through it (hostile re-pass of issue 77: both deleted the copy's
    files, exit 0)."""
    backup, before = _backup_of_epoch(tmp_path, epoch)
    root = tmp_path / "ck"
    _checkpoint(root, 2)
    (root / backup.name).symlink_to(backup.resolve(), target_is_directory=True)
    with pytest.raises(CheckpointError, match=f"holds {backup.name}, a symbolic link "
                                              f"\\(to {backup.resolve()}\\)"):
        files.check_contents(root)
    if epoch == 1:  # the oldest: pruning passes it by
        _checkpoint(root, 3, keep=1)
    else:  # the commit of its epoch refuses to replace it
        with pytest.raises(CheckpointError, match="epoch-000003 is a symbolic link"):
            _checkpoint(root, 3, keep=1)
    assert {p.name: p.read_bytes() for p in backup.iterdir()} == before
    assert (root / backup.name).is_symlink()


def test_a_file_under_a_checkpoints_name_is_refused_not_hidden(tmp_path):
    """A user's file named like a checkpoint directory is refused before the first epoch, and
    a commit of its epoch leaves it where it was (it was moved into a hidden
    ``.epoch-N.old-*`` directory, without a word)."""
    _checkpoint(tmp_path, 2)
    (tmp_path / "epoch-000003").write_text("junk")
    with pytest.raises(CheckpointError, match="holds epoch-000003, not a directory"):
        files.check_contents(tmp_path)
    with pytest.raises(CheckpointError, match="epoch-000003 is not a directory"):
        _checkpoint(tmp_path, 3)
    assert (tmp_path / "epoch-000003").read_text() == "junk"


def test_a_save_cut_short_leaves_the_previous_one(tmp_path):
    _checkpoint(tmp_path, 1)
    staging = files.staging_dir(tmp_path, 2)  # crashed after writing a file, before commit
    staging.mkdir()
    files.write_file(staging, "rank-00000.pt", files.encode({"w": torch.zeros(1)}))
    assert _load(tmp_path)[0] == 1
    (tmp_path / "epoch-000003").mkdir()  # a directory without a manifest
    assert _load(tmp_path)[0] == 1


def test_damaged_newest_falls_back(tmp_path):
    _checkpoint(tmp_path, 1)
    _checkpoint(tmp_path, 2)
    f = tmp_path / "epoch-000002" / "rank-00001.pt"
    data = f.read_bytes()
    f.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    assert _load(tmp_path)[0] == 1
    with pytest.raises(CheckpointError, match="SHA-256"):
        files.verify(tmp_path / "epoch-000002", files.read_manifest(tmp_path / "epoch-000002"))


@FUZZ
@given(name=st.sampled_from(["manifest.json", "rank-00000.pt", "rank-00001.pt"]),
       truncate=st.booleans(), where=st.floats(0, 1), junk=st.binary(min_size=1, max_size=16))
def test_damaged_file(tmp_path, name, truncate, where, junk):
    root = tmp_path / "c"
    shutil.rmtree(root, ignore_errors=True)
    _checkpoint(root, 1)
    newest = _checkpoint(root, 2)
    f = root / "epoch-000002" / name
    data = f.read_bytes()
    at = int(where * len(data))
    f.write_bytes(data[:at] if truncate else data[:at] + junk + data[at + len(junk):])
    epoch, state = _load(root)  # never any other exception
    if epoch == 2:  # the damage left the checkpoint intact (e.g. JSON whitespace)
        assert torch.equal(state["w"], newest["w"])


@FUZZ
@given(field=st.sampled_from(["format", "epoch", "step", "world_size", "strategy", "files",
                              "files.bytes", "files.sha256", "files.name"]), value=HOSTILE)
def test_hostile_manifest_field(tmp_path, field, value):
    root = tmp_path / "c"
    shutil.rmtree(root, ignore_errors=True)
    _checkpoint(root, 1)
    path = root / "epoch-000001"
    doc = json.loads((path / files.MANIFEST).read_text())
    if field == "files.name":
        doc["files"][str(value)] = doc["files"].pop("rank-00001.pt")
    elif field.startswith("files."):
        doc["files"]["rank-00000.pt"][field[6:]] = value
    else:
        doc[field] = value
    (path / files.MANIFEST).write_text(json.dumps(doc))
    try:
        manifest = files.read_manifest(path)
        files.verify(path, manifest)
    except CheckpointError:
        assert files.find_latest(root) is None
        return
    assert _load(root)[0] == 1  # a harmless value (e.g. the same one) still loads


class _Gadget:
    def __reduce__(self):
        return (shutil.rmtree, ("/nonexistent-dglx",))


class _Record:
    """A harmless class, but not plain data: no torch allows it in a weights-only load."""

    def __init__(self):
        self.x = 1


def test_archives_never_unpickle_code(tmp_path):
    # (collections.Counter was the harmless example until torch put it on its weights-only
    # allowlist; a class of this module never will be)
    for obj in (_Gadget(), _Record()):
        with pytest.raises(CheckpointError, match="plain data"):
            files.decode(files.encode(obj), "rank-00000.pt")
