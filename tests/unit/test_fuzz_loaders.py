"""Fuzzing the loaders with hypothesis (issue 8): a dataset directory or a partition directory
with a damaged file (truncated, bytes overwritten, a manifest field replaced by a hostile
value) is either still read correctly or refused with the loader's own error class: never
another exception, never a crash of the interpreter."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dglx_dist.data import read_dataset, write_dataset
from dglx_dist.errors import DatasetFormatError, PartitionFormatError
from dglx_dist.partition import PartitionDir, partition_dataset
from dglx_dist.testing import tiny_dataset
from tests.doubles.fuzz import FUZZ, HOSTILE



@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    ds = tiny_dataset()
    write_dataset(ds, root / "data")
    partition_dataset(ds, root / "parts", "metis", 2)  # the METIS library: no DGL needed
    return root, ds


def _copy(src: Path, dst: Path) -> Path:
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    return dst


def _damage(file: Path, how: str, where: float, junk: bytes) -> None:
    data = file.read_bytes()
    at = int(where * len(data))
    if how == "truncate":
        file.write_bytes(data[:at])
    else:  # overwrite bytes in place
        file.write_bytes(data[:at] + junk + data[at + len(junk):])


def _replace_field(file: Path, pick: int, value) -> None:
    doc = json.loads(file.read_text())
    doc[sorted(doc)[pick % len(doc)]] = value
    file.write_text(json.dumps(doc))


def _same_dataset(a, b) -> bool:
    return (a.num_nodes == b.num_nodes and np.array_equal(a.src, b.src)
            and np.array_equal(a.dst, b.dst) and np.array_equal(a.feat, b.feat)
            and np.array_equal(a.label, b.label))


def _refused_or_unchanged(load, error, unchanged) -> None:
    """``load()`` raises ``error`` with a message, or returns what ``unchanged`` accepts."""
    try:
        got = load()
    except error as exc:
        assert str(exc)
        return
    assert unchanged(got)


def _dataset_check(d: Path, ds):
    return lambda: read_dataset(d), DatasetFormatError, lambda got: _same_dataset(got, ds)


def _partition_check(d: Path, ref: Path):
    def load():
        pdir = PartitionDir(d)
        return pdir, [pdir.load_part(p) for p in range(pdir.num_parts)]

    def unchanged(got) -> bool:
        pdir, parts = got
        want = PartitionDir(ref)
        return pdir.num_parts == want.num_parts and all(
            np.array_equal(a.core_gid, b.core_gid) and np.array_equal(a.feat, b.feat)
            for a, b in zip((want.load_part(p) for p in range(want.num_parts)), parts))

    return load, PartitionFormatError, unchanged


@FUZZ
@given(name=st.sampled_from(["meta.json", "nodes.parquet", "edges.parquet"]),
       how=st.sampled_from(["truncate", "overwrite"]), where=st.floats(0, 1),
       junk=st.binary(min_size=1, max_size=16))
def test_damaged_dataset_file(pristine, tmp_path, name, how, where, junk):
    root, ds = pristine
    d = _copy(root / "data", tmp_path / "d")
    _damage(d / name, how, where, junk)
    _refused_or_unchanged(*_dataset_check(d, ds))


@FUZZ
@given(pick=st.integers(0, 100), how=st.sampled_from(["truncate", "overwrite"]),
       where=st.floats(0, 1), junk=st.binary(min_size=1, max_size=16))
def test_damaged_partition_file(pristine, tmp_path, pick, how, where, junk):
    root, _ = pristine
    d = _copy(root / "parts", tmp_path / "p")
    files = sorted(f for f in d.rglob("*") if f.is_file())
    _damage(files[pick % len(files)], how, where, junk)
    _refused_or_unchanged(*_partition_check(d, root / "parts"))


@pytest.mark.parametrize("kind", ["dataset", "partition"])
@FUZZ
@given(pick=st.integers(0, 100), value=HOSTILE)
def test_hostile_manifest_field(pristine, tmp_path, kind, pick, value):
    """A field of the dataset's meta.json or the partition manifest replaced."""
    root, ds = pristine
    src, manifest, check = {
        "dataset": ("data", "meta.json", lambda d: _dataset_check(d, ds)),
        "partition": ("parts", "partition.json", lambda d: _partition_check(d, root / "parts")),
    }[kind]
    d = _copy(root / src, tmp_path / "d")
    _replace_field(d / manifest, pick, value)
    _refused_or_unchanged(*check(d))


def test_a_changed_feature_byte_is_refused(pristine, tmp_path):
    """The example hypothesis found before data pages carried checksums: one byte of
    nodes.parquet's feature page zeroed was read back as different features."""
    root, _ = pristine
    d = _copy(root / "data", tmp_path / "d")
    _damage(d / "nodes.parquet", "overwrite", 0.5, b"\x00")
    with pytest.raises(DatasetFormatError, match=r"nodes\.parquet.*(CRC|checksum)"):
        read_dataset(d)
