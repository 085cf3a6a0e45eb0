"""``dglx verify``: a full hash of everything dglx wrote, whatever earlier loads stamped
(issue 40, case 5)."""
import json
import os

import pytest
import torch

from dglx_dist.checkpoint import files as ckfiles
from dglx_dist.cli import main
from dglx_dist.cli.files import verify_path
from dglx_dist.data import write_dataset
from dglx_dist.errors import CheckpointError, InvalidValueError, PartitionFormatError
from dglx_dist.partition import PartitionDir, partition_dataset


def _rot(file, offset=0):
    """Damage in place: same size, inode and modification time."""
    st = file.stat()
    with open(file, "r+b") as f:
        f.seek(offset or st.st_size // 2)
        f.write(b"\xff" * 32)
    os.utime(file, ns=(st.st_atime_ns, st.st_mtime_ns))


def _drop_chunk_sums(out):
    """Makes ``out``'s manifest one written before chunk sums existed."""
    m = json.loads((out / "partition.json").read_text())
    for entry in m["parts"]:
        for info in entry["files"].values():
            del info["chunks"]
    (out / "partition.json").write_text(json.dumps(m))


def test_without_chunk_sums_every_load_and_verify_hash_every_file(tiny, tmp_path):
    """A manifest without chunk sums (an older directory) loads, and every load hashes its
    files whole, stamp or not (issue 77: before, a stamped load hashed nothing); ``dglx
    verify`` hashes every file."""
    out = tmp_path / "P"
    partition_dataset(tiny, out, "hash", 2)
    _drop_chunk_sums(out)
    PartitionDir(out).load_part(0)  # this host's full check: stamped
    assert verify_path(out)["kind"] == "partition"
    _rot(out / "part-00000" / "feat.arrow")
    with pytest.raises(PartitionFormatError, match=r"part-00000/feat.arrow: sha256"):
        PartitionDir(out).load_part(0)  # the stamp still matches; no chunks to sample
    with pytest.raises(PartitionFormatError, match=r"part-00000/feat.arrow: sha256"):
        verify_path(out)
    assert main(["verify", str(out)]) == 2


def test_a_stamped_load_samples_chunks_and_verify_names_the_chunk(tiny, tmp_path):
    """With chunk sums, the load after this host's full check hashes a sample of chunks (a
    small file: all of them) and refuses in-place damage; ``dglx verify`` names the chunk."""
    out = tmp_path / "P"
    partition_dataset(tiny, out, "hash", 2)
    PartitionDir(out).load_part(0)
    _rot(out / "part-00000" / "feat.arrow")
    with pytest.raises(PartitionFormatError, match=r"feat.arrow: sha256 of chunk 0 .*sampled"):
        PartitionDir(out).load_part(0)
    with pytest.raises(PartitionFormatError, match=r"feat.arrow: sha256 of chunk 0 \(bytes"):
        verify_path(out)


def test_verify_checkpoints_and_recorded_directories(tiny, tmp_path):
    root = tmp_path / "ckpt"
    for epoch in (1, 2):
        staging = ckfiles.staging_dir(root, epoch)
        staging.mkdir(parents=True)
        entry = ckfiles.write_file(staging, "rank-00000.pt", ckfiles.encode({"w": torch.ones(9)}))
        ckfiles.commit(root, epoch, {"format": 1, "epoch": epoch, "step": 0, "world_size": 1,
                                     "strategy": "distdgl", "files": {"rank-00000.pt": entry}},
                       keep=2)
    assert verify_path(root)["checkpoints"] == 2
    _rot(root / "epoch-000001" / "rank-00000.pt", 40)
    with pytest.raises(CheckpointError, match="SHA-256 differs"):
        verify_path(root)
    data = write_dataset(tiny, tmp_path / "d")
    assert verify_path(data) == {"path": str(data), "kind": "dataset", "files": 3,
                                 "bytes": verify_path(data)["bytes"], "ok": True}
    _rot(data / "nodes.parquet")
    with pytest.raises(InvalidValueError, match=r"1 file\(s\) changed .*\(nodes.parquet\)"):
        verify_path(data)
    (tmp_path / "plain").mkdir()
    with pytest.raises(InvalidValueError, match="nothing to verify against"):
        verify_path(tmp_path / "plain")
