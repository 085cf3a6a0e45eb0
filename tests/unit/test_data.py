import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from dglx_dist.data import builtin_path, from_dgl, read_dataset, read_meta, to_dgl, write_dataset
from dglx_dist.errors import DatasetFormatError


def test_cora_is_shipped_with_the_planetoid_split(cora):
    assert (cora.num_nodes, cora.num_edges, cora.feat_dim, cora.num_classes) == \
        (2708, 10556, 1433, 7)
    assert (cora.train.sum(), cora.val.sum(), cora.test.sum()) == (140, 500, 1000)
    assert cora.feat.dtype == np.float32 and cora.feat.flags.writeable


def _same(a, b):
    for f in ("src", "dst", "feat", "label", "train", "val", "test"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert a.num_classes == b.num_classes


@pytest.mark.dgl
def test_round_trip_directory_and_dgl(tiny, tmp_path):
    write_dataset(tiny, tmp_path / "d")
    back = read_dataset(tmp_path / "d")
    _same(tiny, back)
    assert back.extra == tiny.extra
    g = to_dgl(back)
    assert g.num_nodes() == tiny.num_nodes and g.num_edges() == tiny.num_edges
    assert torch.equal(g.ndata["train_mask"], torch.from_numpy(tiny.train))
    _same(tiny, from_dgl(g, num_classes=tiny.num_classes))


def test_write_refuses_existing_and_overwrite_replaces(tiny, tmp_path):
    out = tmp_path / "d"
    write_dataset(tiny, out)
    with pytest.raises(FileExistsError):
        write_dataset(tiny, out)
    assert read_dataset(out).num_nodes == tiny.num_nodes
    write_dataset(tiny, out, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


@pytest.fixture
def ddir(tiny, tmp_path):
    return write_dataset(tiny, tmp_path / "d")


def _rewrite(path, name, **columns):
    table = pq.read_table(path / name)
    for col, arr in columns.items():
        i = table.schema.get_field_index(col)
        table = (table.set_column(i, col, arr) if i >= 0 else table.append_column(col, arr))
    pq.write_table(table, path / name)


def _meta(path, **changes):
    meta = json.loads((path / "meta.json").read_text())
    meta.update(changes)
    (path / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("breakage, message", [
    (lambda p: (p / "edges.parquet").unlink(), r"edges\.parquet: missing"),
    (lambda p: (p / "meta.json").unlink(), r"meta\.json: missing"),
    (lambda p: (p / "meta.json").write_text("{nope"), r"not valid JSON"),
    (lambda p: _meta(p, num_nodes=-1), r"field 'num_nodes' = -1; expected an integer >= 0"),
    (lambda p: _meta(p, num_edges=5), r"edges\.parquet: \d+ rows; expected 5"),
    (lambda p: _meta(p, feat_dim=9), r"field 'feat' has width 8; expected 9"),
    (lambda p: _meta(p, num_classes=2), r"field 'label' row \d+ = 2; expected a class in \[0, 2\)"),
    (lambda p: _rewrite(p, "edges.parquet", src=pa.array(np.zeros(
        pq.read_metadata(p / "edges.parquet").num_rows), pa.float64())),
     r"field 'src' has type double; expected integer"),
    (lambda p: _rewrite(p, "edges.parquet", dst=pa.array(np.full(
        pq.read_metadata(p / "edges.parquet").num_rows, 60), pa.int64())),
     r"field 'dst' row 0 = 60; expected a node id in \[0, 60\)"),
    (lambda p: pq.write_table(pq.read_table(p / "nodes.parquet").drop_columns(["train"]),
                              p / "nodes.parquet"), r"missing field 'train'"),
    (lambda p: (p / "nodes.parquet").write_bytes(b"PAR1 not really"), r"not a readable Parquet"),
])
def test_bad_dataset_is_named(ddir, breakage, message):
    breakage(ddir)
    with pytest.raises(DatasetFormatError, match=message):
        read_dataset(ddir)


def test_ragged_feature_rows_are_rejected(tiny, tmp_path):
    out = write_dataset(tiny, tmp_path / "d")
    rows = [list(r) for r in tiny.feat]
    rows[7] = rows[7][:-1]
    _rewrite(out, "nodes.parquet", feat=pa.array(rows, pa.list_(pa.float32())))
    with pytest.raises(DatasetFormatError, match=r"field 'feat' row 7 has 7 values; expected 8"):
        read_dataset(out)


def test_read_meta_is_cheap_and_keeps_provenance():
    meta = read_meta(builtin_path("cora"))
    assert meta.num_nodes == 2708 and meta.extra["name"] == "cora"


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_features_are_refused_or_warned(tiny, tmp_path, caplog, bad):
    feat = tiny.feat.copy()
    feat[11, 3] = bad
    feat[40, 0] = bad
    ds = tiny.replace(feat=feat)
    out = write_dataset(ds, tmp_path / "d")
    with pytest.raises(DatasetFormatError, match=r"field 'feat' row 11 column 3 = .*expected "
                                                 r"finite values \(NaN or Inf in 2 cells"):
        read_dataset(out)
    with caplog.at_level("WARNING"):
        got = read_dataset(out, nonfinite="warn")
    assert "2 cells are NaN or Inf" in caplog.text
    np.testing.assert_array_equal(got.feat, feat)
    with pytest.raises(ValueError, match=r"nonfinite='ignore'; expected one of"):
        read_dataset(out, nonfinite="ignore")


def _with_edge_data(ds):
    rng = np.random.default_rng(3)
    edata = {"w": rng.random(ds.num_edges).astype(np.float64),
             "kind": rng.integers(0, 5, (ds.num_edges, 2)),
             "seen": rng.random(ds.num_edges) < 0.5}
    return ds.replace(edata=edata)


@pytest.mark.dgl
def test_edge_data_survives_the_directory_and_dgl(tiny, tmp_path):
    ds = _with_edge_data(tiny)
    write_dataset(ds, tmp_path / "d")
    back = read_dataset(tmp_path / "d")
    g = to_dgl(back)
    for name, values in ds.edata.items():
        assert back.edata[name].dtype == values.dtype and np.array_equal(back.edata[name], values)
        assert torch.equal(g.edata[name], torch.from_numpy(values))
        assert np.array_equal(from_dgl(g).edata[name], values)


@pytest.mark.dgl
def test_edge_data_that_is_not_per_edge_numbers_is_named(tiny, tmp_path):
    g = to_dgl(tiny)
    g.edata["cube"] = torch.zeros(g.num_edges(), 2, 2)
    with pytest.raises(DatasetFormatError, match=r"g.edata\['cube'\] has shape"):
        from_dgl(g)
    ds = _with_edge_data(tiny)
    ds.edata["w"][3] = np.nan
    write_dataset(ds, tmp_path / "d")
    with pytest.raises(DatasetFormatError, match=r"field 'w' row 3"):
        read_dataset(tmp_path / "d")


@pytest.mark.parametrize("values", [np.arange(7, dtype=np.int64), np.arange(5, dtype=np.int32),
                                    np.linspace(0, 1, 6, dtype=np.float32),
                                    np.array([True, False, True, True])])
def test_arrow_columns_read_as_to_numpy_reads_them(values):
    """arrow_numpy: one chunk, several, a slice and none give to_numpy's values and dtype."""
    from dglx_dist.data.checked import arrow_numpy

    one = pa.array(values)
    for arr in (one, pa.chunked_array([one, one.slice(1, 2)]), one.slice(1, 3),
                pa.chunked_array([], type=one.type)):
        got = arrow_numpy(arr)
        want = arr.to_numpy() if isinstance(arr, pa.ChunkedArray) else \
            arr.to_numpy(zero_copy_only=False)
        assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("values", [np.arange(7, dtype=np.int64), np.arange(5, dtype=np.int32),
                                    np.linspace(0, 1, 6, dtype=np.float32),
                                    np.arange(4, dtype=np.float16), np.arange(3, dtype=np.uint8),
                                    np.array([True, False, True, True, False, False, True,
                                              True, True, False, True]),
                                    np.zeros(0, bool), np.zeros(0, np.int64),
                                    np.arange(12, dtype=np.float32).reshape(4, 3),
                                    np.arange(12, dtype=np.int64).reshape(6, 2)[::2],
                                    np.array([[True, False], [False, True], [True, True]])])
def test_numpy_columns_are_what_pa_array_makes_of_them(values):
    """to_arrow: the type and values pa.array gives (2-D: its fixed-size list per row),
    booleans across a byte's boundary, empty and strided arrays too; and back through
    arrow_numpy."""
    from dglx_dist.data.checked import arrow_numpy, to_arrow

    got = to_arrow(values)
    flat = pa.array(np.ascontiguousarray(values).reshape(-1))
    want = flat if values.ndim == 1 else pa.FixedSizeListArray.from_arrays(flat,
                                                                          values.shape[1])
    got.validate(full=True)
    assert got.type == want.type and got.equals(want) and got.null_count == 0
    back = arrow_numpy(got if values.ndim == 1 else got.flatten())
    assert np.array_equal(back.reshape(values.shape), values)


def test_reading_and_writing_datasets_and_partitions_do_not_import_pandas(tmp_path):
    """pyarrow's to_numpy and pa.array import pandas (0.5-0.75 s of a process's CPU); the
    readers and writers of datasets and partitions do not."""
    import subprocess
    import sys

    code = ("import sys; from dglx_dist.data import builtin_path, read_dataset, write_dataset; "
            "from dglx_dist.partition import partition_dataset; "
            "ds = read_dataset(builtin_path('cora')); write_dataset(ds, sys.argv[1] + '/d'); "
            "partition_dataset(sys.argv[1] + '/d', sys.argv[1] + '/p', 'metis', 2); "
            "print('pandas' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["False"], r.stderr[-2000:]
