"""Contract tests run over every registered partitioner, plus each one's own guarantees."""
import numpy as np
import pytest

from dglx_dist.partition import PARTITIONERS, PartitionDir, partition_dataset
from dglx_dist.partition.book import HashBook
from dglx_dist.testing import tiny_dataset

# metis balances several constraints by default, through DGL's METIS
ALL = [pytest.param(m, marks=pytest.mark.dgl) if m == "metis" else m
       for m in PARTITIONERS.names()]


def _partition(ds, tmp_path, method, parts, **options):
    out = tmp_path / f"{method}-{parts}"
    report = partition_dataset(ds, out, method, parts, options)
    return report, PartitionDir(out)


@pytest.mark.parametrize("parts", [1, 2, 3])
@pytest.mark.parametrize("method", ALL)
def test_contract(method, parts, tmp_path):
    ds = tiny_dataset(num_nodes=80, seed=parts)
    report, pdir = _partition(ds, tmp_path, method, parts)
    loaded = [pdir.load_part(p) for p in range(parts)]

    # every node owned exactly once, in both id spaces
    core = np.concatenate([p.core_gid for p in loaded])
    assert np.array_equal(np.sort(core), np.arange(ds.num_nodes))
    assert np.array_equal(np.sort(np.concatenate([p.core_orig for p in loaded])),
                          np.arange(ds.num_nodes))
    # every edge stored exactly once, with its destination's owner, endpoints preserved
    eids = np.concatenate([p.eid for p in loaded])
    assert np.array_equal(np.sort(eids), np.arange(ds.num_edges))
    for p in loaded:
        local_orig = np.concatenate([p.core_orig, p.halo_orig])
        assert np.array_equal(local_orig[p.src], ds.src[p.eid])
        assert np.array_equal(local_orig[p.dst], ds.dst[p.eid])
        assert p.dst.max(initial=-1) < p.num_core
        assert np.all(pdir.owner(p.core_gid) == p.part)
        assert np.array_equal(pdir.to_local(p.core_gid), np.arange(p.num_core))
        assert np.array_equal(pdir.to_original(p.local_gid), local_orig)
        # HALO = 1-hop in-neighbours of core nodes that the part does not own
        in_edges = np.isin(ds.dst, p.core_orig)
        expected = np.setdiff1d(ds.src[in_edges], p.core_orig)
        assert np.array_equal(np.sort(p.halo_orig), expected)
        assert np.array_equal(pdir.halo_ids(p.part), p.halo_gid)
        # node data travels with the owner
        for f in ("label", "train", "val", "test"):
            assert np.array_equal(getattr(p, f), getattr(ds, f)[p.core_orig])
    _check_features(ds, pdir, loaded)
    assert report.edge_cut == sum(int((pdir.owner(p.local_gid[p.src]) != p.part).sum())
                                  for p in loaded)
    assert report.halo_per_part == [p.num_halo for p in loaded]
    assert sum(report.core_per_part) == ds.num_nodes


def _check_features(ds, pdir, loaded):
    covered = np.zeros(ds.feat_dim, int)
    for p in loaded:
        lo, hi = p.feat_cols
        covered[lo:hi] += 1
        if pdir.feature_layout == "rows":
            assert np.array_equal(p.feat, ds.feat[p.core_orig])
        else:
            orig = pdir.to_original(np.arange(ds.num_nodes))
            assert np.array_equal(p.feat, ds.feat[orig, lo:hi])
    expected = 1 if pdir.feature_layout == "columns" else len(loaded)
    assert np.all(covered == expected)


@pytest.mark.dgl
def test_local_graph_matches_part(tiny, tmp_path):
    from dglx_dist.dgl.graphs import part_graph

    _, pdir = _partition(tiny, tmp_path, "metis", 2)
    p = pdir.load_part(1)
    g = part_graph(p)
    assert g.num_nodes() == p.num_core + p.num_halo and g.num_edges() == p.src.size
    assert int(g.ndata["inner_node"].sum()) == p.num_core
    assert g.ndata["_ID"].tolist() == p.local_gid.tolist()


def test_metis_relabels_contiguous_and_balances(cora, tmp_path):
    report, pdir = _partition(cora, tmp_path, "metis", 4)
    offsets = np.asarray(pdir.manifest["node_book"]["offsets"])
    for p in range(4):
        assert np.array_equal(pdir.core_ids(p), np.arange(offsets[p], offsets[p + 1]))
    assert pdir.manifest["relabeled"]
    # METIS's default load imbalance tolerance is 3%; small constraint sets round up a bit
    for constraint in ("nodes", "edges", "train", "val", "test"):
        assert report.imbalance[constraint] <= 1.10, (constraint, report.imbalance)
    # and min-cut is far below a random split's cut (3/4 of edges for 4 random parts)
    assert report.edge_cut_frac < 0.25


def test_metis_multi_constraint_beats_nodes_only_on_skewed_train_set(tmp_path):
    ds = tiny_dataset(num_nodes=1200, avg_degree=6, seed=3, isolated=0)
    # put every training node into one community, as a clustered labelled region would be
    train = ds.label == 0
    ds = type(ds)(ds.src, ds.dst, ds.feat, ds.label, train, ds.val & ~train, ds.test & ~train,
                  ds.num_classes, ds.extra)
    multi, _ = _partition(ds, tmp_path, "metis", 4, balance="train")
    assert multi.imbalance["train"] <= 1.10, multi.imbalance


def test_metis_on_the_node_count_alone(cora, tmp_path):
    report, pdir = _partition(cora, tmp_path, "metis", 3, balance="")
    assert pdir.manifest["partitioner"]["options"]["backend"] == "auto"
    assert report.imbalance["nodes"] <= 1.05 and report.edge_cut_frac < 0.25


def test_hash_owner_is_computable_without_lookup(tiny, tmp_path):
    _, pdir = _partition(tiny, tmp_path, "hash", 3, seed=7)
    book = HashBook(tiny.num_nodes, 3, 7)
    for p in range(3):
        part = pdir.load_part(p)
        assert np.array_equal(part.core_gid, part.core_orig)  # no relabeling
        assert np.all(book.owner(part.core_gid) == p)
    assert not pdir.manifest["relabeled"]


@pytest.mark.dgl
def test_feature_dim_composes_with_structure(cora, tmp_path):
    _, pdir = _partition(cora, tmp_path, "feature_dim", 4)
    assert pdir.feature_layout == "columns"
    assert pdir.manifest["node_book"]["kind"] == "hash"
    widths = [pdir.load_part(p).feat.shape for p in range(4)]
    assert widths == [(2708, 359), (2708, 358), (2708, 358), (2708, 358)]
    _, pdir = _partition(cora, tmp_path, "feature_dim", 2, structure="metis")
    assert pdir.manifest["node_book"]["kind"] == "range"


def _group_cut(pdir, ds):
    owner = np.asarray(pdir.owner(np.arange(ds.num_nodes)))
    new = np.empty(ds.num_nodes, dtype=np.int64)
    new[pdir.to_original(np.arange(ds.num_nodes))] = np.arange(ds.num_nodes)
    src, dst = owner[new[ds.src]], owner[new[ds.dst]]
    return np.mean(src // 2 != dst // 2), np.bincount(owner[new[np.flatnonzero(ds.train)]],
                                                      minlength=4)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_metis_groups_split_servers_first_then_their_ranks(tmp_path, seed):
    """groups=2, 4 parts on a graph of 2 communities (80% of edges inside one): parts {0,1} and
    {2,3} are METIS halves (the servers), so few edges cross between them (a random split
    would cut half); every part still gets its share of the training nodes."""
    from dglx_dist.errors import PartitionError

    ds = tiny_dataset(num_nodes=400, avg_degree=6, num_classes=2, seed=seed, isolated=0)
    _, grouped = _partition(ds, tmp_path, "metis", 4, groups=2)
    cut, train_per_part = _group_cut(grouped, ds)
    assert cut < 0.22
    assert train_per_part.min() > 0.6 * train_per_part.mean()
    with pytest.raises(PartitionError, match="groups=3"):
        partition_dataset(ds, tmp_path / "bad", "metis", 4, {"groups": 3})
