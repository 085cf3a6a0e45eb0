"""The memory estimate of a graph with node types (issue 34): its inputs per node type (counts,
feature widths, learned rows of featureless types), the one-type case equal to the estimate
by nodes and edges, and ``dglx train`` sizing a typed dataset and a typed partition."""
import pytest

from dglx_dist.config import RunConfig
from dglx_dist.data import write_dataset
from dglx_dist.errors import InsufficientMemoryError
from dglx_dist.memory import MemoryModel
from dglx_dist.strategies import STRATEGIES
from dglx_dist.strategies.cost.shapes import EMBEDDING_COPIES, GraphShape
from dglx_dist.strategies.footprint import JobSize, check_job_memory, peak_per_rank
from dglx_dist.strategies.holdings import CHECK_CUTS

MB = 1 << 20
PRODUCTS = dict(nodes=2_449_029, edges=61_859_140)


def _mag_like(embed_dim=64, paper_dim=128):
    return GraphShape.of_types([("author", 1_000_000, 0), ("paper", 700_000, paper_dim)],
                               40_000_000, embed_dim)


def test_a_graph_without_types_is_the_one_type_case_of_the_old_estimate():
    """Every built-in fit predicts for a one-type graph at F = 128 what ``base + (per_node x
    nodes + per_edge x edges) / W`` gave (the estimate before the inputs were per type)."""
    n, e = PRODUCTS["nodes"], PRODUCTS["edges"]
    for name in STRATEGIES.names():
        strategy = STRATEGIES.build(name)
        model = getattr(getattr(strategy, "cost", None), "memory", None)
        if model is None:
            continue
        old = model.base + (model.per_node * n + model.per_edge * e) / 4
        assert model.peak(n, e, 4) == pytest.approx(old), name
        for job in (JobSize.homogeneous(n, e, 4, 2),
                    JobSize(GraphShape(n, e, 128, edge_cuts=CHECK_CUTS), 4, 2)):
            assert peak_per_rank(strategy, job) == pytest.approx(old), name
    size = GraphShape(n, e, 128)
    assert (size.nodes, size.edges, size.typed) == (n, e, False)
    assert (size.feature_bytes, size.embedding_bytes) == (4 * 128 * n, 0)


def test_a_typed_estimate_counts_each_type_by_its_own_width():
    """A featureless type costs its learned rows (with SparseAdam's two states), not F = 128
    features; the featured type its features."""
    graph = _mag_like()
    assert graph.nodes == 1_700_000 and graph.typed
    assert graph.feature_bytes == 4 * 700_000 * 128
    assert graph.embedding_bytes == 4 * EMBEDDING_COPIES * 1_000_000 * 64 == 768_000_000
    model = MemoryModel(base=1000 * MB, per_node=0, per_edge=100, per_feature_byte=2.0,
                        per_embedding_byte=1.5)
    expected = 1000 * MB + (100 * 40e6 + 2.0 * 358_400_000 + 1.5 * 768_000_000) / 2
    assert model.estimate(graph, 2) == pytest.approx(expected)
    # wider learned rows or paper features cost what their bytes say, nothing else
    wider = model.estimate(_mag_like(embed_dim=128), 2) - model.estimate(graph, 2)
    assert wider == pytest.approx(1.5 * 768_000_000 / 2)
    featured = model.estimate(_mag_like(paper_dim=256), 2) - model.estimate(graph, 2)
    assert featured == pytest.approx(2.0 * 358_400_000 / 2)
    assert "author 1,000,000 learned 64, paper 700,000 F=128" in graph.describe()


def test_the_typed_fit_of_every_typed_strategy_is_used_for_a_typed_graph():
    graph = _mag_like()
    for name in ("distdgl", "p3", "fullgraph", "granndis"):
        strategy = STRATEGIES.build(name)
        typed = strategy.cost.typed_memory
        assert typed is not None and typed.per_embedding_byte + typed.per_feature_byte > 0
        job = JobSize(graph, 2, 2)
        assert peak_per_rank(strategy, job) == pytest.approx(typed.estimate(graph, 2))
        with pytest.raises(InsufficientMemoryError) as exc:
            check_job_memory(strategy, job, 1 << 20)
        text = str(exc.value)
        assert "measured on mag-shaped typed graphs" in text, text
        assert "measured at F=128" not in text, text


def test_dglx_train_sizes_a_typed_dataset_and_its_partition_per_type(tmp_path):
    from dglx_dist.cli.train import dataset_size, partition_size
    from dglx_dist.partition import PartitionDir, partition_dataset
    from tests.unit.test_hetero_partition import _toy

    ds = _toy()  # paper 240 (F=5), field 60 (F=3), author 120 (no features)
    write_dataset(ds, tmp_path / "typed")
    size = dataset_size(tmp_path / "typed", embed_dim=16)
    widths = {t: (round(share * size.nodes), w)
              for t, (share, w) in zip(size.type_names, size.node_types)}
    assert widths == {"paper": (240, 5), "field": (60, 3), "author": (120, 0)}
    assert size.typed and size.embed_dim == 16 and size.edges == ds.num_edges
    assert size.embedding_bytes == 4 * EMBEDDING_COPIES * 120 * 16
    assert size.feature_bytes == 4 * (240 * 5 + 60 * 3)
    partition_dataset(ds, tmp_path / "parts", "hash", 2)
    assert partition_size(PartitionDir(tmp_path / "parts"), 16) == size


def test_dglx_train_refuses_a_typed_job_by_its_typed_estimate(tmp_path):
    from dglx_dist.cli.train import _check_before_start
    from dglx_dist.runtime.env import read_env
    from tests.unit.test_hetero_partition import _toy

    write_dataset(_toy(), tmp_path / "typed")
    config = RunConfig().updated(data={"data": str(tmp_path / "typed")},
                                 job={"memory_limit": 1 << 20}, model={"hidden": 16})
    with pytest.raises(InsufficientMemoryError, match="paper 240 F=5") as exc:
        _check_before_start(config, STRATEGIES.build("distdgl"), read_env({}))
    assert "measured on mag-shaped typed graphs" in str(exc.value)
    assert "dorylus" not in str(exc.value)  # it does not train typed graphs: no candidate


def test_every_typed_strategy_carries_the_typed_fit_of_the_docs():
    """The fits table of docs/cluster_model.md's "Graphs with node types"."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "cluster_model.md").read_text()
    section = text.split("### Graphs with node types")[1].split("\n## ")[0]
    lines = [ln.strip().strip("|").split("|") for ln in section.splitlines()
             if ln.startswith("| ")]
    header = [c.strip() for c in lines[0]]
    rows = {c[0].strip(): dict(zip(header, (x.strip() for x in c))) for c in lines[1:]
            if "per_feature_byte" in header and len(c) == len(header)}
    assert set(rows) == {"distdgl", "p3", "fullgraph", "granndis"}
    for name, row in rows.items():
        fit = STRATEGIES.build(name).cost.typed_memory.public()
        assert fit == {"base_mb": int(row["base_mb"]), "bytes_per_node": 0,
                       "bytes_per_edge": float(row["bytes_per_edge"]),
                       "per_feature_byte": float(row["per_feature_byte"]),
                       "per_embedding_byte": float(row["per_embedding_byte"])}, name
