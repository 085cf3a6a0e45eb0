"""A manifest edited around the check (issue 77, item 3): chunk sums are bound to their file's
SHA-256 (a full check confirms both), a missing or stale chunk list means a full check at
every load, and a manifest changed since this host's full check brings the full check back."""
import hashlib
import json
import logging
import os

import pytest

from dglx_dist.cli import main
from dglx_dist.cli.files import verify_path
from dglx_dist.errors import PartitionFormatError
from dglx_dist.partition import PartitionDir, checksums, partition_dataset
from dglx_dist.partition import io as pio
from dglx_dist.testing import tiny_dataset


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A partition whose part 0 ``feat.arrow`` has 2 chunks (about 1.9 MiB), to be copied."""
    out = tmp_path_factory.mktemp("written") / "P"
    partition_dataset(tiny_dataset(num_nodes=2000, feat_dim=512), out, "hash", 2)
    return out


@pytest.fixture
def out(written, tmp_path):
    import shutil

    return shutil.copytree(written, tmp_path / "P")


def _feat(out):
    return out / "part-00000" / "feat.arrow"


def _rot(file, offset):
    """Damage in place: same size, inode and modification time."""
    st = file.stat()
    with open(file, "r+b") as f:
        f.seek(offset)
        f.write(b"\xff" * 32)
    os.utime(file, ns=(st.st_atime_ns, st.st_mtime_ns))


def _edit(out, fn, keep_time=False):
    """Edits ``out``'s manifest entry of part 0's ``feat.arrow``; ``keep_time``: with the
    manifest's modification time put back, so that only the chunk list can bring the full
    check back."""
    file = out / pio.MANIFEST
    st = file.stat()
    m = json.loads(file.read_text())
    fn(m["parts"][0]["files"]["feat.arrow"])
    file.write_text(json.dumps(m))
    if keep_time:
        os.utime(file, ns=(st.st_atime_ns, st.st_mtime_ns))


def _match_damaged_chunk(out, chunk):
    """Rewrites chunk ``chunk``'s sum in the manifest to the damaged chunk's."""
    with open(_feat(out), "rb") as f:
        f.seek(chunk * checksums.CHUNK_BYTES)
        digest = hashlib.sha256(f.read(checksums.CHUNK_BYTES)).hexdigest()
    _edit(out, lambda info: info["chunks"]["sha256"].__setitem__(chunk, digest))


@pytest.mark.parametrize("edit", [
    lambda info: info.pop("chunks"),  # deleted
    lambda info: info["chunks"].update(of_sha256="0" * 64),  # stale: of another file
], ids=["deleted", "stale"])
def test_damage_with_its_chunk_sums_unusable_is_caught_at_every_load(out, edit):
    """After this host's full check, damage in place (stamp still matching) and the file's
    chunk sums deleted or made stale: every load hashes the file whole and refuses it, in
    one line naming the file (before: a stamped load hashed nothing and trained)."""
    assert len(json.loads((out / pio.MANIFEST).read_text())["parts"][0]["files"]
               ["feat.arrow"]["chunks"]["sha256"]) == 2
    PartitionDir(out).load_part(0)  # this host's full check: stamped
    _rot(_feat(out), 1 << 20)  # in chunk 1
    _edit(out, edit, keep_time=True)
    assert pio.still_verified(_feat(out).parent, pio.PART_FILES)  # the stamp cannot see it
    for _ in range(3):
        with pytest.raises(PartitionFormatError, match=r"part-00000/feat\.arrow: sha256 "
                                                       r"\w+\.\.\. does not match") as err:
            PartitionDir(out).load_part(0)
        assert "\n" not in str(err.value)
    assert main(["verify", str(out)]) == 2


def test_an_empty_chunk_list_is_refused(out):
    _edit(out, lambda info: info["chunks"].update(sha256=[]))
    with pytest.raises(PartitionFormatError, match=r"parts\[0\]\.files\['feat\.arrow'\]\.chunks "
                                                   r"lists 0 chunk sums; expected 2"):
        PartitionDir(out)


def test_a_chunk_size_too_large_to_read_is_refused(out):
    """1 TiB chunks (one sum for the file) would be read into memory whole: refused."""
    _edit(out, lambda info: info["chunks"].update(chunk_bytes=1 << 40,
                                                  sha256=info["chunks"]["sha256"][:1]))
    with pytest.raises(PartitionFormatError, match=r"feat\.arrow'\]\.chunks = .*expected "
                                                   r"\{chunk_bytes: int in \[1, 67108864\]"):
        PartitionDir(out)


def test_a_chunk_sum_rewritten_to_match_damage_fails_the_full_check_and_verify(out):
    """Damage in chunk 1, and chunk 1's sum rewritten to the damaged chunk's: every chunk
    matches, the whole file does not match its SHA-256; the first (full) load and ``dglx
    verify`` refuse it."""
    _rot(_feat(out), (1 << 20) + 100)
    _match_damaged_chunk(out, 1)
    expected = (r"part-00000/feat\.arrow: sha256 \w+\.\.\. does not match the manifest's .*its "
                r"chunk sums in the manifest match it")
    with pytest.raises(PartitionFormatError, match=expected) as err:
        PartitionDir(out).load_part(0)
    assert "\n" not in str(err.value)
    with pytest.raises(PartitionFormatError, match=expected):
        verify_path(out)
    assert main(["verify", str(out)]) == 2
    assert PartitionDir(out).load_part(1).num_core > 0  # the other part still loads


def test_chunk_sums_edited_after_a_hosts_full_check_bring_the_full_check_back(out):
    """After this host's full check, damage in place and the damaged chunk's sum rewritten
    to match: a sample would find every chunk matching; a manifest changed since the host's
    full check means a full check, which refuses it."""
    PartitionDir(out).load_part(0)
    _rot(_feat(out), 50)
    _match_damaged_chunk(out, 0)
    with pytest.raises(PartitionFormatError, match=r"feat\.arrow: sha256 \w+\.\.\. does not"):
        PartitionDir(out).load_part(0)


def test_chunk_sums_that_an_intact_file_does_not_match_are_refused(out):
    """The file matches its SHA-256 but not a chunk sum: the manifest's chunk sums do not
    describe it (a later sample would refuse it), so the full check says so."""
    _edit(out, lambda info: info["chunks"]["sha256"].__setitem__(1, "0" * 64))
    with pytest.raises(PartitionFormatError, match=r"feat\.arrow: sha256 of chunk 1 .* the "
                                                   r"whole file matches its sha256"):
        verify_path(out)


def test_manifests_without_chunk_sums_are_hashed_whole_at_every_load(out, monkeypatch):
    """An older directory (no chunk sums anywhere): every load is a full check."""
    m = json.loads((out / pio.MANIFEST).read_text())
    for entry in m["parts"]:
        for info in entry["files"].values():
            del info["chunks"]
    (out / pio.MANIFEST).write_text(json.dumps(m))
    hashed = []
    real = checksums.verify_file
    monkeypatch.setattr(checksums, "verify_file", lambda f, i: hashed.append(f) or real(f, i))
    for _ in range(3):
        PartitionDir(out).load_part(0)
    assert len(hashed) == 3 * len(pio.PART_FILES)


def test_the_load_says_what_it_checked(out, caplog):
    """A load logs one line (at DEBUG: ``-v``): the full check, or the sample that loads
    after this host's full check hash."""
    with caplog.at_level(logging.DEBUG, logger="dglx_dist.partition.load"):
        PartitionDir(out).load_part(0)
        PartitionDir(out).load_part(0)
    said = [r.getMessage() for r in caplog.records if r.name == "dglx_dist.partition.load"]
    assert len(said) == 2, said
    assert "part-00000: full check" in said[0] and "SHA-256 and every chunk sum" in said[0]
    assert "part-00000: sampled check of" in said[1]
    assert "loads after this host's first full check hash a sample" in said[1]
