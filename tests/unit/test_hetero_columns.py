"""Typed partitions by feature columns (``feature_dim`` over a typed dataset, for ``p3``):
each part holds its column slice of every node of each featured type, the manifest records
the slices and is checked on load, and bad input is refused in one line."""
import json

import numpy as np
import pytest

from dglx_dist.errors import NotSupportedError, PartitionError, PartitionFormatError
from dglx_dist.partition import PartitionDir, partition_dataset
from dglx_dist.partition import io as pio
from test_hetero_partition import _toy


@pytest.fixture(scope="module")
def columns_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("columns") / "p"
    partition_dataset(_toy(), out, "feature_dim", 2)
    return out


@pytest.mark.parametrize("parts", [2, 3])
def test_each_part_holds_its_columns_of_every_node_of_each_type(tmp_path, parts):
    ds = _toy(seed=parts)
    partition_dataset(ds, tmp_path / "c", "feature_dim", parts)
    partition_dataset(ds, tmp_path / "h", "hash", parts)
    pdir, rows = PartitionDir(tmp_path / "c"), PartitionDir(tmp_path / "h")
    assert pdir.feature_layout == "columns" and pdir.feat_dim == 0
    assert sorted(pdir.type_slices) == ["field", "paper"]  # author has no features
    for ntype, width in (("field", 3), ("paper", 5)):
        bounds = pdir.manifest["type_feature_slices"][ntype]
        assert bounds[0] == 0 and bounds[-1] == width and len(bounds) == parts + 1
        widths = np.diff(bounds)
        assert widths.max() - widths.min() <= 1  # even slices
        got = np.concatenate([pdir.load_type_feat(p, ntype) for p in range(parts)], axis=1)
        np.testing.assert_array_equal(got, ds.nodes[ntype].feat)
        # the stores' row order: by part, then local id; the same nodes as hash's rows
        order = pdir.type_rows(ntype)
        assert sorted(order) == list(range(ds.nodes[ntype].num_nodes))
        by_rows = np.concatenate([rows.load_type_feat(p, ntype) for p in range(parts)])
        np.testing.assert_array_equal(ds.nodes[ntype].feat[order], by_rows)
    for p in range(parts):  # the structure is hash's
        np.testing.assert_array_equal(pdir.load_part(p).core_orig, rows.load_part(p).core_orig)


def _edit(path, fn):
    m = json.loads((path / pio.MANIFEST).read_text())
    fn(m)
    (path / pio.MANIFEST).write_text(json.dumps(m))


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.pop("type_feature_slices"), r"field 'type_feature_slices' = None; expected, "
                                             r"for each of the featured node types"),
    (lambda m: m["type_feature_slices"].update(paper=[0, 2, 4]),
     r"'type_feature_slices' = .*from 0 to its width"),
    (lambda m: m["type_feature_slices"].update(paper=[0, 5]), r"expected, for each of the "
                                                              r"featured node types .* 3 "
                                                              r"non-decreasing"),
    (lambda m: m["type_feature_slices"].pop("field"), r"'type_feature_slices' = "),
    (lambda m: m.update(feature_layout="rows"), r"field 'type_feature_slices' in a manifest "
                                                r"whose feature_layout is 'rows'"),
    (lambda m: m.update(feature_layout="cols"), r"feature_layout 'cols'; expected version 2, "
                                                r"feat_dim 0 and 'rows' or 'columns'"),
])
def test_bad_column_manifests_are_refused_naming_the_field(columns_dir, tmp_path, edit,
                                                           message):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(columns_dir, copy)
    _edit(copy, edit)
    with pytest.raises(PartitionFormatError, match=message):
        PartitionDir(copy)


def test_a_column_file_of_the_wrong_width_is_refused(columns_dir, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(columns_dir, copy)
    # part 0 of paper holds 3 of its 5 columns; say it holds 2
    _edit(copy, lambda m: m["type_feature_slices"].update(paper=[0, 2, 5]))
    with pytest.raises(PartitionFormatError, match=r"feat-2.arrow: field 'feat' has width 3; "
                                                   r"expected 2"):
        PartitionDir(copy).load_type_feat(0, "paper")


def test_p3_takes_typed_column_partitions_and_refuses_what_does_not_apply(columns_dir,
                                                                          tmp_path):
    from dglx_dist.runtime.topology import Topology
    from dglx_dist.strategies import STRATEGIES
    from dglx_dist.strategies.base import check_partitions

    check_partitions(STRATEGIES.build("p3"), PartitionDir(columns_dir), Topology(2, 1))
    partition_dataset(_toy(), tmp_path / "rows", "hash", 2)
    with pytest.raises(PartitionError, match=r"stores features as rows .* strategy 'p3' needs "
                                             r"columns"):
        check_partitions(STRATEGIES.build("p3"), PartitionDir(tmp_path / "rows"),
                         Topology(2, 1))
    for option, value, shown in (("pipeline", True, "False"), ("cache_mb", 64.0, "0.0")):
        with pytest.raises(NotSupportedError, match=rf"p3 on a graph with node types \(.*\): "
                                                    rf"option {option}={value} does not apply "
                                                    rf".*expected {option}={shown}$"):
            check_partitions(STRATEGIES.build("p3", **{option: value}),
                             PartitionDir(columns_dir), Topology(2, 1))
    with pytest.raises(NotSupportedError, match=r"strategy 'dorylus' trains graphs without "
                                                r"types only so far \(distdgl, fullgraph, granndis, p3 train"):
        check_partitions(STRATEGIES.build("dorylus"), PartitionDir(columns_dir),
                         Topology(2, 1))
