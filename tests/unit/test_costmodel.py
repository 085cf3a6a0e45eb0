"""The cluster model (benchmarks.costmodel): its counts against DGL's own sampling and a
real METIS partition, its calibration, the laws' shape, the measured units and the predict
command."""
import dataclasses
import json
import math

import numpy as np
import pytest

from benchmarks.costmodel import (LAWS, Calibration, Cluster, GraphShape, Units, Workload,
                                  calibrate, expansion, halo_rows, predict)
from dglx_dist.data.synthetic import SyntheticConfig, generate_synthetic
from dglx_dist.errors import InvalidValueError
from dglx_dist.memory import MemoryModel

pytestmark = pytest.mark.dgl
UNITS = Units(sample_s_per_edge=3e-7, gather_s_per_byte=7e-10, spmm_s_per_edge_dim=1.7e-9,
              dense_s_per_flop=1.6e-11, intra_s_per_byte=2.3e-10)


@pytest.fixture(scope="module")
def dataset():
    return generate_synthetic(SyntheticConfig(num_nodes=20_000, num_edges=300_000,
                                              feat_dim=16, num_classes=8))


@pytest.fixture(scope="module")
def shape(dataset):
    from benchmarks.costmodel.measure import measure_graph

    return measure_graph(dataset)


def test_the_expansion_matches_dgls_sampled_blocks(dataset, shape):
    """Edges and source nodes per block, expected from the degree distribution, against DGL's
    sample_neighbors + to_block from training seeds (means of 8 batches)."""
    import dgl
    import torch

    from dglx_dist.data import to_dgl

    g, work = to_dgl(dataset), Workload(fanouts=(10, 25), batch_size=250)
    torch.manual_seed(0)
    train = torch.from_numpy(np.flatnonzero(dataset.train))
    got = np.zeros((2, 2))
    for _ in range(8):
        seeds = train[torch.randperm(train.numel())[:250]]
        for i, fanout in enumerate(reversed(work.fanouts)):
            block = dgl.to_block(dgl.sampling.sample_neighbors(g, seeds, fanout), seeds)
            got[i] += (block.num_edges(), block.num_src_nodes())
            seeds = block.srcdata[dgl.NID]
    got /= 8
    want = [(b.edges, b.src) for b in reversed(expansion(shape, work, 250))]
    np.testing.assert_allclose(want, got, rtol=0.15)


def test_halo_rows_match_a_real_metis_partition(dataset, shape):
    """Rows 4 METIS parts read from each other (distinct remote sources of their in-edges),
    against the count from the degrees and that partition's cut."""
    from benchmarks.costmodel.measure import metis_layout

    layout = metis_layout(dataset, 4)
    remote = layout.src_owner != layout.dst_owner
    pairs = np.unique(layout.src[remote] * 4 + layout.dst_owner[remote])
    cut = float(remote.mean())
    assert halo_rows(shape, 4, cut) == pytest.approx(pairs.size, rel=0.2)


def test_cuts_beyond_the_measured_go_on_in_log_parts_and_stay_below_random(shape):
    assert [shape.cut(2 ** i) for i in (1, 2, 3)] == pytest.approx(shape.edge_cuts)
    more = [shape.cut(2 ** i) for i in range(3, 12)]
    assert more == sorted(more) and more[-1] <= 1 - 1 / 2 ** 11
    step = shape.edge_cuts[2] - shape.edge_cuts[1]
    assert shape.cut(16) == pytest.approx(min(shape.edge_cuts[2] + step, 1 - 1 / 16))
    one = dataclasses.replace(shape, edge_cuts=(0.1,))
    assert one.cut(4) == pytest.approx(1 - 0.9 ** 2)  # recursive bisection


@pytest.mark.parametrize("strategy", sorted(LAWS))
@pytest.mark.parametrize("slow", [1.5, 0.2], ids=["overhead", "compute-factor"])
def test_a_calibration_gives_its_run_back(shape, strategy, slow):
    """Calibrated on a run, the model predicts that run's time and bytes exactly (whether the
    units undershoot it, leaving a per-step overhead, or overshoot it)."""
    work, cluster = Workload(batch_size=250), Cluster(2, 2, 1.0, shared_cores=2)
    plain = predict(strategy, shape, work, cluster, UNITS)
    comm = predict(strategy, shape, work, cluster, UNITS,
                   Calibration(inter_factor=1.3, intra_factor=0.8))["phases"]
    compute = sum(v for k, v in plain["phases"].items() if k not in ("inter", "intra"))
    measured = {"epoch_time": comm["inter"] + comm["intra"] + slow * compute,
                "bytes_inter": plain["bytes_inter"] * 1.3,
                "bytes_intra": plain["bytes_intra"] * 0.8}
    calib = calibrate(strategy, shape, work, cluster, UNITS, measured)
    got = predict(strategy, shape, work, cluster, UNITS, calib)
    assert got["epoch_time"] == pytest.approx(measured["epoch_time"], rel=1e-9)
    if plain["bytes_inter"]:
        assert got["bytes_inter"] == pytest.approx(measured["bytes_inter"], rel=1e-9)
    assert (calib.overhead_s_per_step > 0) == (slow > 1)
    assert (calib.compute_factor < 1) == (slow < 1)


def test_the_laws_follow_each_strategys_design(shape):
    """One server sends nothing across servers; P3's cross-server bytes do not grow with the
    feature width while distdgl's do (P3's premise); GraNNDis sends only gradients across;
    every strategy's epoch gets faster on faster links."""
    work = Workload(batch_size=250)
    for name, law in LAWS.items():
        assert law(shape, work, Cluster(1, 4)).inter_bytes == 0, name
        slow = predict(name, shape, work, Cluster(4, 1, 0.1), UNITS)["epoch_time"]
        assert predict(name, shape, work, Cluster(4, 1, 10.0), UNITS)["epoch_time"] < slow
    wide = dataclasses.replace(shape, feat_dim=shape.feat_dim * 8)
    grow = {n: LAWS[n](wide, work, Cluster(4, 1)).inter_bytes /
            LAWS[n](shape, work, Cluster(4, 1)).inter_bytes for n in ("p3", "distdgl")}
    assert grow["p3"] == pytest.approx(1.0) and grow["distdgl"] > 5
    params = work.params(shape)
    assert LAWS["granndis"](shape, work, Cluster(4, 2)).inter_bytes <= 8 * params * 4


def test_the_granndis_law_uses_the_strategys_eas_defaults():
    from dglx_dist.strategies.granndis.cost import GRANNDIS_EAS
    from dglx_dist.strategies import STRATEGIES

    config = STRATEGIES.get("granndis").Config()
    assert GRANNDIS_EAS == (config.external_max_hop, config.external_fanout)


def test_graph_shapes_and_cluster_shapes_refuse_bad_values():
    from benchmarks.costmodel.validate import parse_shape

    with pytest.raises(InvalidValueError, match="SERVERSxRANKS"):
        parse_shape("4by2")
    with pytest.raises(InvalidValueError, match="SERVERSxRANKS"):
        parse_shape("4x2@5g")
    assert parse_shape("4x2@10g").name == "4x2@10g"
    with pytest.raises(InvalidValueError, match="edge_cuts"):
        GraphShape(nodes=10, edges=10, feat_dim=1, num_classes=2, train_frac=0.1,
                   edge_cuts=(1.5,))
    with pytest.raises(InvalidValueError, match="model"):
        Workload(model="gin")


def test_measured_units_are_positive_and_finite():
    from benchmarks.costmodel.measure import measure_units

    units = measure_units(nodes=5_000, edges=50_000, repeat=1, loopback_bytes=1 << 20)
    for name, value in dataclasses.asdict(units).items():  # per edge, byte, flop; a round
        assert math.isfinite(value) and 0 < value < (1.0 if name == "round_s" else 1e-3), name


def test_predict_command_extrapolates_a_calibration(tmp_path, shape, capsys):
    """benchmarks/cluster_model.py predict on the papers100M shape from a calibration file:
    every strategy at every server count, with more servers less time per epoch for
    distdgl's compute."""
    from benchmarks.costmodel.main import main

    cal = {"graph": dataclasses.asdict(shape), "workload": dataclasses.asdict(Workload()),
           "units": dataclasses.asdict(UNITS),
           "calibrations": {n: Calibration(overhead_s_per_step=0.01).public() for n in LAWS}}
    (tmp_path / "cal.json").write_text(json.dumps(cal))
    assert main(["predict", "--calibration", str(tmp_path / "cal.json"), "--servers", "2,8",
                 "--out", str(tmp_path / "p.json")], "") == 0
    result = json.loads((tmp_path / "p.json").read_text())
    assert result["graph"]["nodes"] == 111_059_956
    assert {(r["strategy"], r["servers"]) for r in result["rows"]} == {
        (n, s) for n in LAWS for s in (2, 8)}
    compute = {r["servers"]: r["compute_s"] for r in result["rows"] if r["strategy"] == "distdgl"}
    assert compute[8] < compute[2]
    assert "| distdgl | 2 |" in capsys.readouterr().out


def test_the_memory_fit_recovers_per_node_and_per_edge_bytes():
    """Peaks made from known coefficients (at three sizes of different degree) give them back;
    the largest graph that fits a budget is where the fitted peak meets it."""
    from benchmarks.costmodel.memory import fit_memory, parse_sizes

    sizes = parse_sizes("100000:1500000,300000:9000000,1000000:20000000")
    base, per_node, per_edge = 900e6, 700.0, 40.0
    fit = fit_memory([(n / 2, e / 2, base + per_node * n / 2 + per_edge * e / 2)
                      for n, e in sizes])
    assert (fit.base, fit.per_node, fit.per_edge) == pytest.approx((base, per_node, per_edge))
    n = fit.largest_nodes(degree=25.0, budget=24e9, world=2)
    assert 2 * fit.peak(n, 25.0 * n, 2) == pytest.approx(24e9, rel=1e-6)
    noisy = fit_memory([(50_000, 750_000, 1.10e9), (150_000, 4.5e6, 2.5e9),
                        (300_000, 3e6, 1.9e9)])  # an exact solve would cost a node < 0 bytes
    assert min(noisy.base, noisy.per_node, noisy.per_edge) >= 0
    with pytest.raises(InvalidValueError, match="at least 3 NODES:EDGES"):
        parse_sizes("100000:1500000,300000")


def test_predict_on_mag_counts_features_of_papers_and_learned_rows_of_the_other_types(
        tmp_path, shape):
    """--graph mag: ogbn-mag's node types, papers 128 features wide, the rest learned rows
    --hidden wide; distdgl pulls less per row than the untyped graph of the same size at
    F = 128 would, and pushes the learned rows' gradients back."""
    from benchmarks.costmodel.main import main
    from dglx_dist.data.mag import OGBN_MAG_NODES
    from dglx_dist.strategies.cost.shapes import Cluster
    from dglx_dist.strategies.distdgl.cost import epoch as distdgl

    cal = {"graph": dataclasses.asdict(shape), "workload": dataclasses.asdict(Workload()),
           "units": dataclasses.asdict(UNITS),
           "calibrations": {n: Calibration(overhead_s_per_step=0.01).public() for n in LAWS}}
    (tmp_path / "cal.json").write_text(json.dumps(cal))
    assert main(["predict", "--calibration", str(tmp_path / "cal.json"), "--graph", "mag",
                 "--servers", "2", "--hidden", "32", "--out", str(tmp_path / "p.json")],
                "") == 0
    g = json.loads((tmp_path / "p.json").read_text())["graph"]
    nodes = sum(OGBN_MAG_NODES.values())
    assert g["nodes"] == nodes and g["embed_dim"] == 32 and len(g["node_types"]) == 4
    typed = GraphShape(**{**g, "node_types": tuple(map(tuple, g["node_types"])),
                          "edge_cuts": tuple(g["edge_cuts"])})
    papers = OGBN_MAG_NODES["paper"] / nodes
    assert typed.row_bytes == pytest.approx(4 * (128 * papers + 32 * (1 - papers)))
    assert typed.learned_bytes == pytest.approx(4 * 32 * (1 - papers))
    untyped = dataclasses.replace(typed, node_types=(), embed_dim=0)
    work, cluster = Workload(hidden=32), Cluster(2, 1)
    assert distdgl(typed, work, cluster).gather_bytes < distdgl(untyped, work,
                                                                cluster).gather_bytes
    with pytest.raises(InvalidValueError, match="node_types"):
        dataclasses.replace(typed, node_types=((0.5, 128),))


def test_the_typed_memory_fit_recovers_its_terms():
    """Peaks made from known typed terms at the default points (scales, one wider feature
    point, one wider learned-row point) give them back."""
    from benchmarks.costmodel.typed_memory import fit_typed_memory, parse_points, typed_size

    points = parse_points("1/16,1/8,1/4,1/8:f512,1/8:h256")
    true = MemoryModel(base=900e6, per_node=0, per_edge=60.0, per_feature_byte=2.5,
                       per_embedding_byte=1.2)
    fit = fit_typed_memory([(typed_size(p), 2, true.estimate(typed_size(p), 2))
                            for p in points])
    for term in ("base", "per_edge", "per_feature_byte", "per_embedding_byte"):
        assert getattr(fit, term) == pytest.approx(getattr(true, term), rel=1e-6), term
    assert typed_size(points[3]).feature_bytes == 4 * 512 * 92_049
    with pytest.raises(InvalidValueError, match="SCALE"):
        parse_points("1/8:x3")
