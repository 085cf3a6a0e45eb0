"""The plan (dglx_dist.plan, `dglx plan`, --strategy auto): deterministic, its options
accepted by the strategies, given options kept, one line when nothing fits."""
import dataclasses
import json

import pytest

from dglx_dist.config import AUTO, StrategyConfig
from dglx_dist.errors import InsufficientMemoryError, StateError
from dglx_dist.planner import Cluster, Workload, graph_of_directory, graph_shape, make_plan
from dglx_dist.planner.auto import resolve, workload_for
from dglx_dist.planner.laws import LAWS
from dglx_dist.planner.options import Situation, cache_hits, choose
from dglx_dist.planner.units import DEFAULT_UNITS, Measured, load_measured, save_measured
from dglx_dist.prepare import resolve_dataset
from dglx_dist.strategies import STRATEGIES

GIB = 1 << 30
PRODUCTS = graph_shape(2_449_029, 123_718_280, 100, 47, 0.08)  # the `large` preset's shape
LARGE = Workload("gcn", 256, (10, 25), 1000)


@pytest.fixture(autouse=True)
def _no_cached_units(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


@pytest.fixture(scope="module")
def cora():
    return graph_of_directory(resolve_dataset("cora"))


SITUATIONS = {
    "cora-1x2": lambda cora: (cora, Workload("sage", 16), Cluster(1, 2, memory_bytes=16 * GIB)),
    "products-4x4-1g": lambda _: (PRODUCTS, LARGE, Cluster(4, 4, 1.0, memory_bytes=64 * GIB)),
    "products-4x4-10g": lambda _: (PRODUCTS, LARGE, Cluster(4, 4, 10.0, latency_s=1e-4,
                                                            memory_bytes=64 * GIB)),
    "products-2x2-tight": lambda _: (PRODUCTS, LARGE, Cluster(2, 2, 1.0, memory_bytes=20 * GIB)),
}


@pytest.mark.parametrize("name", SITUATIONS)
def test_the_plan_is_deterministic_and_every_option_is_one_its_strategy_takes(name, cora):
    graph, work, cluster = SITUATIONS[name](cora)
    plan = make_plan(graph, work, cluster)
    assert plan.public() == make_plan(graph, work, cluster).public()
    assert {r.strategy for r in plan.rows} == {"distdgl", "p3", "fullgraph", "granndis",
                                               "dorylus"}
    for row in plan.rows:
        STRATEGIES.build(row.strategy, **row.options)  # accepted, and valid together
        assert row.epoch_s == pytest.approx(sum(row.parts.values()))
    assert plan.choice.fits is not False
    assert plan.summary().startswith(f"plan: strategy {plan.choice.strategy!r}")
    assert 2 <= plan.why().count(". ") + 1 <= 3


def test_distdgl_caches_and_pulls_per_server_where_memory_and_ranks_allow():
    plan = make_plan(PRODUCTS, LARGE, Cluster(4, 4, 1.0, memory_bytes=64 * GIB))
    row = next(r for r in plan.rows if r.strategy == "distdgl")
    assert row.options["server_pulls"] is True and row.options["cache_mb"] >= 1
    bare = make_plan(PRODUCTS, LARGE, Cluster(4, 4, 1.0, memory_bytes=64 * GIB),
                     given={"cache_mb": 0, "server_pulls": False})
    kept = next(r for r in bare.rows if r.strategy == "distdgl")
    assert kept.options["cache_mb"] == 0 and kept.options["server_pulls"] is False
    assert kept.inter_bytes > row.inter_bytes
    assert {r.strategy for r in bare.rows} == {"distdgl"}  # only it takes both options
    assert cache_hits(0.1) == pytest.approx(0.4) and cache_hits(2.0) == 1.0


def test_p3_pipelines_with_three_steps_or_more():
    plan = make_plan(PRODUCTS, LARGE, Cluster(4, 4, 1.0, memory_bytes=64 * GIB))
    assert next(r for r in plan.rows if r.strategy == "p3").options == {"pipeline": True}


def test_granndis_cuts_co_batches_where_one_does_not_fit():
    cluster = Cluster(2, 2, memory_bytes=64 * GIB)
    base = make_plan(PRODUCTS, LARGE, cluster)
    row = next(r for r in base.rows if r.strategy == "granndis")
    work = LAWS["granndis"](PRODUCTS, LARGE, cluster)
    need = row.peak_bytes * cluster.ranks_per_server
    tight = dataclasses.replace(cluster, memory_bytes=need * 0.97)
    s = Situation("granndis", STRATEGIES.get("granndis").Config, PRODUCTS, LARGE, tight,
                  DEFAULT_UNITS, {}, row.peak_bytes)
    chosen = choose(s, work)
    assert chosen.options["co_batches"] > 1 and chosen.work.steps == chosen.options["co_batches"]
    assert chosen.peak_per_rank * 2 <= tight.memory_bytes


def test_a_memory_that_fits_nothing_is_one_line_naming_the_smallest_requirement(cora):
    with pytest.raises(InsufficientMemoryError) as err:
        make_plan(cora, Workload("sage", 16), Cluster(1, 2, memory_bytes=100 << 20))
    text = str(err.value)
    assert "\n" not in text and "the smallest requirement is 'dorylus': about" in text, text
    assert "100 MiB a server" in text


def test_auto_is_kept_with_its_options_until_a_plan_resolves_it(cora):
    config = StrategyConfig.of(AUTO, cache_mb="5")
    assert config.values() == {"cache_mb": "5"} and config.flag_pairs() == ["cache_mb=5"]
    with pytest.raises(StateError, match="resolved by a plan"):
        config.build()
    same = resolve("p3", {"pipeline": True}, None, None, None)
    assert same == ("p3", {"pipeline": True}, None)
    name, options, plan = resolve(AUTO, {"cache_mb": "5"}, lambda: cora,
                                  lambda: Cluster(2, 1, memory_bytes=16 * GIB), workload_for,
                                  tell=False)
    assert name in ("distdgl", "p3") and options["cache_mb"] == 5.0
    STRATEGIES.build(name, **options)
    assert workload_for({"fanouts": "5,5,5"}).fanouts == (5, 5, 5)
    assert workload_for({"num_layers": "3"}).fanouts == (10, 10, 25)


def test_cached_measurements_replace_the_defaults_and_bad_ones_do_not(tmp_path):
    path = tmp_path / "units.json"
    assert load_measured(path) == Measured()
    save_measured({"units": {"dense_s_per_flop": 1e-12}}, path)
    save_measured({"link_gbit": 25.0}, path)
    got = load_measured(path)
    assert got.units.dense_s_per_flop == 1e-12 and got.link_gbit == 25.0
    assert got.units.sample_s_per_edge == DEFAULT_UNITS.sample_s_per_edge
    path.write_text(json.dumps({"units": {"dense_s_per_flop": -1}, "link_gbit": "fast"}))
    assert load_measured(path) == Measured()
    path.write_text("not json")
    assert load_measured(path) == Measured()


def test_dglx_dist_plan_is_the_public_function(cora):
    import dglx_dist

    got = dglx_dist.plan(cora, Workload("sage", 16), Cluster(1, 2, memory_bytes=16 * GIB))
    assert got.choice.strategy in STRATEGIES.names()


def test_dglx_plan_prints_json_and_a_table(capsys):
    from dglx_dist.cli import main

    args = ["plan", "--nodes", "2449029", "--edges", "123718280", "--feat-dim", "100",
            "--num-classes", "47", "--train-frac", "0.08", "--model", "gcn", "--hidden", "256",
            "--servers", "4", "--ranks-per-server", "4", "--link", "10g",
            "--memory-per-server", str(64 * GIB)]
    assert main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["choice"] == out["rows"][0]["strategy"] and len(out["rows"]) == 5
    assert out["cluster"]["link_gbit"] == 10.0 and out["summary"] and out["why"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert text.startswith("| strategy | epoch_s |") and "is predicted fastest" in text
    assert main(["plan", "--data", "cora", "--memory-per-server", str(100 << 20)]) == 2
