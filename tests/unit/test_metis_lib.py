"""Our METIS binding (dglx_dist.partition.metis_lib) and the metis partitioner on it: the same
input and seed give the same parts, in one process and in two; several constraints are
balanced; bad input is one line. No DGL, except the comparison with DGL's own call."""
import json
import subprocess
import sys

import numpy as np
import pytest

from dglx_dist.data import builtin_path, read_dataset
from dglx_dist.errors import InvalidValueError, MissingDependencyError, PartitionError
from dglx_dist.partition import PartitionDir, partition_dataset
from dglx_dist.partition import metis_lib
from dglx_dist.partition.metis_lib import part_graph, symmetric_csr


@pytest.fixture(scope="module")
def cora():
    return read_dataset(builtin_path("cora"))


def _assignment(pdir: PartitionDir) -> list[int]:
    """Each original node's part."""
    owner = np.asarray(pdir.owner(np.arange(pdir.num_nodes)))
    out = np.empty(pdir.num_nodes, dtype=np.int64)
    out[pdir.to_original(np.arange(pdir.num_nodes))] = owner
    return out.tolist()


_CHILD = """
import json, sys
import numpy as np
from dglx_dist.data import builtin_path, read_dataset
from dglx_dist.partition.metis_lib import part_graph, symmetric_csr
ds = read_dataset(builtin_path("cora"))
indptr, indices = symmetric_csr(ds.src, ds.dst, ds.num_nodes)
weights = np.stack([ds.train, ~ds.train], 1).astype(np.int64)
print(json.dumps(part_graph(indptr, indices, 4, vwgt=weights, seed=5).tolist()))
"""


def test_the_same_input_and_seed_give_the_same_parts_in_every_process(cora, tmp_path):
    indptr, indices = symmetric_csr(cora.src, cora.dst, cora.num_nodes)
    weights = np.stack([cora.train, ~cora.train], 1).astype(np.int64)
    here = [part_graph(indptr, indices, 4, vwgt=weights, seed=5).tolist() for _ in range(3)]
    there = [json.loads(subprocess.run([sys.executable, "-c", _CHILD], capture_output=True,
                                       text=True, check=True).stdout) for _ in range(2)]
    assert all(p == here[0] for p in here + there)
    other = part_graph(indptr, indices, 4, vwgt=weights, seed=7).tolist()
    assert other != here[0]  # the seed is METIS's


def test_default_metis_partitions_are_reproducible(cora, tmp_path):
    """The product's defaults (every balance constraint): twice, the same parts and files."""
    runs = []
    for i in range(2):
        partition_dataset(cora, tmp_path / f"p{i}", "metis", 4)
        runs.append(PartitionDir(tmp_path / f"p{i}"))
    assert _assignment(runs[0]) == _assignment(runs[1])
    for p in range(4):
        a, b = runs[0].load_part(p), runs[1].load_part(p)
        assert np.array_equal(a.core_orig, b.core_orig) and np.array_equal(a.src, b.src)
    partition_dataset(cora, tmp_path / "s3", "metis", 4, {"seed": 3})
    assert _assignment(PartitionDir(tmp_path / "s3")) != _assignment(runs[0])


def test_every_constraint_is_balanced(cora):
    """Four categories (train, val, test, none) and their in-degrees: each within METIS's
    tolerance plus rounding, in every part; the cut far below a random split's."""
    indptr, indices = symmetric_csr(cora.src, cora.dst, cora.num_nodes)
    cat = np.select([cora.train, cora.val, cora.test], [1, 2, 3], 0)
    one_hot = np.stack([cat == c for c in range(4)], 1).astype(np.int64)
    degree = np.bincount(cora.dst, minlength=cora.num_nodes)
    parts = part_graph(indptr, indices, 4, vwgt=np.concatenate(
        [one_hot, one_hot * degree[:, None]], 1), seed=0)
    for c in range(4):
        count = np.bincount(parts[cat == c], minlength=4)
        load = np.bincount(parts[cat == c], weights=degree[cat == c], minlength=4)
        assert count.max() <= 1.10 * count.mean() and load.max() <= 1.10 * load.mean(), c
    assert np.mean(parts[cora.src] != parts[cora.dst]) < 0.25


@pytest.mark.dgl
def test_the_balance_matches_dgls_call(cora, tmp_path):
    """The same constraints through DGL's bundled call: ours is as balanced, per
    constraint, within rounding (imbalance as the quality report computes it)."""
    ours = partition_dataset(cora, tmp_path / "ours", "metis", 4)
    theirs = partition_dataset(cora, tmp_path / "dgl", "metis", 4, {"backend": "dgl"})
    for name, value in ours.imbalance.items():
        assert value <= max(theirs.imbalance[name], 1.10), (name, ours.imbalance,
                                                            theirs.imbalance)


@pytest.mark.parametrize("kwargs, message", [
    ({"vwgt": np.ones((5, 2), np.int64)}, r"vwgt has shape \(5, 2\); expected \(2708, ncon\)"),
    ({"vwgt": -np.ones(2708, np.int64)}, r"vwgt must be non-negative integers"),
    ({"vwgt": np.ones((2708, 2), np.int64), "ubvec": [1.05]},
     r"ubvec \[1.05\]; expected 2 tolerance\(s\), each a finite number > 1"),
    ({"ubvec": [1.0]}, r"ubvec \[1.0\]; expected 1 tolerance"),
    ({"seed": -1}, r"seed -1; expected 0 <= seed"),
    ({"objective": "edges"}, r"objective 'edges'; expected 'cut' or 'vol'"),
])
def test_bad_arguments_are_one_line(cora, kwargs, message):
    indptr, indices = symmetric_csr(cora.src, cora.dst, cora.num_nodes)
    with pytest.raises(InvalidValueError, match=message):
        part_graph(indptr, indices, 4, **kwargs)


def test_a_library_that_cannot_be_loaded_is_named(monkeypatch):
    monkeypatch.setenv("DGLX_METIS_LIBRARY", "/nowhere/libmetis.so")
    with pytest.raises(MissingDependencyError, match=r"the METIS library could not be loaded "
                       r"\(looked for /nowhere/libmetis.so\); install the cmeel-metis package"):
        metis_lib.load_metis.__wrapped__()


def test_a_graph_beyond_the_librarys_indices_is_refused(monkeypatch):
    """A library of narrow indices stands in for 32-bit METIS at 2^31 entries."""
    lib = metis_lib.load_metis()
    narrow = metis_lib.MetisLibrary(lib.path, lib.lib, 32, 32)
    narrow.idx = np.int8
    monkeypatch.setattr(metis_lib, "load_metis", lambda: narrow)
    src = np.arange(100)
    indptr, indices = symmetric_csr(src, (src + 1) % 100, 100)
    with pytest.raises(PartitionError, match=r"the symmetric adjacency has 200 entries; .* "
                       r"indexes at most 127: partition with hash"):
        part_graph(indptr, indices, 2)
