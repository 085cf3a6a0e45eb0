"""The plan (dglx_dist.plan, `dglx plan`, --strategy auto): deterministic, its options
accepted by the strategies, given options kept, one line when nothing fits; the link task
planned among the strategies that train it, with the steps it takes."""
import dataclasses
import json
import math

import pytest
import torch

from dglx_dist.config import AUTO, StrategyConfig, TaskConfig
from dglx_dist.errors import InsufficientMemoryError, InvalidValueError, StateError
from dglx_dist.planner import (Cluster, Workload, graph_of_dataset, graph_of_directory,
                               graph_shape, make_plan)
from dglx_dist.planner.auto import Launch, resolve, workload_for
from benchmarks.costmodel.predict import costs
from dglx_dist.planner.units import (DEFAULT_UNITS, FULL_STEP, Measured, full_step, load_measured,
                                     save_measured)
from dglx_dist.prepare import resolve_dataset
from dglx_dist.strategies import STRATEGIES
from dglx_dist.strategies.cost import Situation
from dglx_dist.strategies.cost.counts import step_seeds
from dglx_dist.strategies.distdgl.cost import cache_hits

GIB = 1 << 30
PRODUCTS = graph_shape(2_449_029, 123_718_280, 100, 47, 0.08)  # the `large` preset's shape
LARGE = Workload("gcn", 256, (10, 25), 1000)
COSTS = costs()


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


def test_a_pipelined_loaders_stage_hides_behind_the_models(monkeypatch):
    """distdgl's loader draws and pulls on a worker thread: with a core for each worker, its
    epoch is the larger of the loader's stage (sample, pull) and the model's (compute,
    exchange, overhead); where ranks share the cores, only the pulls' wire time hides. p3
    with its own pipeline takes its steps in turn, and its parts add up unhidden."""
    import importlib

    planning = importlib.import_module("dglx_dist.planner.plan")  # (the module, not plan())
    pipelined = planning._pipelined

    parts = {"sample": 3.0, "pull": 4.0, "compute": 2.0, "exchange": 1.0, "overhead": 1.0}
    free = pipelined(parts, Cluster(2, 1, 1.0))
    assert sum(free.values()) == pytest.approx(max(3.0 + 4.0, 2.0 + 1.0 + 1.0))
    assert free["pull"] == 0.0 and free["sample"] == pytest.approx(3.0)
    shared = pipelined(parts, Cluster(2, 1, 1.0, shared_cores=2))
    assert sum(shared.values()) == pytest.approx(3.0 + max(4.0, 4.0))
    little = pipelined(parts | {"pull": 1.0, "sample": 0.5}, Cluster(2, 1, 1.0))
    assert sum(little.values()) == pytest.approx(4.0)  # the model's stage: the loader hides
    rows = {}
    for hides in (True, False):
        if not hides:
            monkeypatch.setattr(planning, "_pipelined", lambda parts, cluster: parts)
        for shared in (None, 2):
            cluster = Cluster(2, 1, 1.0, memory_bytes=64 * GIB, shared_cores=shared)
            rows[hides, shared] = {r.strategy: r for r in make_plan(PRODUCTS, LARGE,
                                                                    cluster).rows}
    for shared in (None, 2):
        cluster = Cluster(2, 1, 1.0, shared_cores=shared)
        hidden, summed = rows[True, shared], rows[False, shared]
        want = pipelined(summed["distdgl"].parts, cluster)
        assert hidden["distdgl"].parts == pytest.approx(want)
        assert hidden["distdgl"].epoch_s == pytest.approx(sum(want.values()))
        assert hidden["distdgl"].epoch_s < summed["distdgl"].epoch_s
        assert hidden["p3"].options == {"pipeline": True}  # in turn: nothing hides
        assert hidden["p3"].epoch_s == pytest.approx(summed["p3"].epoch_s)
        # the loader draws on a worker thread where each rank has a core for it
        assert hidden["distdgl"].thread == (shared is None) and not hidden["p3"].thread


def test_auto_runs_the_training_loader_as_the_plan_does():
    """``dglx train`` and ``dglx bench`` run ``auto``'s training loader on a worker thread
    where the plan's choice draws on one, unless the run chose (``--prefetch-thread``), and
    with its sampler processes, unless the run chose (``--num-workers``, 0 included)."""
    from dglx_dist.config import RunConfig
    from dglx_dist.planner.auto import planned_loader

    plans = {shared: make_plan(PRODUCTS, LARGE, Cluster(2, 1, 1.0, memory_bytes=64 * GIB,
                                                        shared_cores=shared))
             for shared in (None, 2)}
    run = RunConfig()
    assert plans[None].choice.thread and not plans[2].choice.thread, plans[None].choice
    assert plans[None].choice.depth == 2 and plans[2].choice.depth == 0  # DGL's default
    assert plans[None].choice.workers == 0  # the cores are not known: no processes
    threaded = planned_loader(run, plans[None]).job
    assert threaded.prefetch_thread == "on" and threaded.prefetch_factor == 2
    assert threaded.num_workers is None and run.job.train_loader()["num_workers"] == 0
    assert planned_loader(run, plans[2]) == run and planned_loader(run, None) == run
    off = run.updated(job={"prefetch_thread": "off"})
    assert planned_loader(off, plans[None]) == off
    said = run.updated(job={"prefetch_factor": 5})  # the run's own depth is kept
    assert planned_loader(said, plans[None]).job.prefetch_factor == 5
    # a GPU's model (50x one core) on servers of 16 cores: the draws go to processes
    gpu = make_plan(PRODUCTS, LARGE, Cluster(2, 1, 1.0, memory_bytes=64 * GIB,
                                             server_cores=16, compute_speedup=50))
    assert gpu.choice.thread and gpu.choice.workers >= 1, gpu.choice
    assert "process" in gpu.choice.loader_text() and gpu.choice.public()["loader"]
    job = planned_loader(run, gpu).job
    assert job.num_workers == gpu.choice.workers and job.prefetch_thread == "on"
    assert job.train_loader()["num_workers"] == gpu.choice.workers
    for given in (0, 3):  # the run's own count, none included, is kept
        kept = run.updated(job={"num_workers": given})
        assert planned_loader(kept, gpu).job.num_workers == given


def test_sampler_processes_where_a_rank_has_cores_and_the_draws_are_the_longest_stage():
    """With ``n`` sampler processes a rank's epoch is the longest of its stages (the model's
    with each step's hand-over, the worker thread's gathers and pulls, the draws over ``n``)
    and of its CPU work over its cores; the plan takes the fewest processes of the shortest
    epoch where it is at most ``WORKERS_GAIN`` of the thread's, never where a rank has fewer
    than 2 cores, its cores are not known or no thread runs."""
    import importlib

    planning = importlib.import_module("dglx_dist.planner.plan")
    stages, hand = planning._loader_stages, planning.HANDOVER_S_PER_STEP
    parts = {"sample": 4.0, "pull": 0.5, "compute": 1.0, "exchange": 0.0, "overhead": 0.5}
    steps, draws = 100, 3.0  # the draws' share of "sample"; the gathers 1.0
    thread = planning._pipelined(parts, Cluster(2, 1, 1.0))
    assert sum(thread.values()) == pytest.approx(4.5)
    for cluster in (Cluster(2, 1, 1.0), Cluster(2, 1, 1.0, shared_cores=2),
                    Cluster(2, 2, 1.0, server_cores=3)):  # not known; 1 and 1.5 cores
        assert stages(parts, draws, steps, cluster, True) == (
            planning._pipelined(parts, cluster), 0)
    two = Cluster(2, 1, 1.0, server_cores=2)
    assert stages(parts, draws, steps, two, False) == (thread, 0)  # no thread, no processes
    got, n = stages(parts, draws, steps, two, True)  # the draws, 3.0 s: the longest stage
    assert n == 1 and sum(got.values()) == pytest.approx(3.0)
    assert got["overhead"] == pytest.approx(0.5 + steps * hand)
    assert got["pull"] == pytest.approx(0.5) and got["sample"] == pytest.approx(3.0 - 1.6 - 0.5)
    got, n = stages(parts, draws, steps, Cluster(2, 1, 1.0, server_cores=16), True)
    assert n == 2 and sum(got.values()) == pytest.approx(1.0 + 0.5 + steps * hand)  # the model
    assert got["pull"] == got["sample"] == 0.0
    shared = stages(parts, draws, steps, Cluster(2, 1, 1.0, shared_cores=4), True)
    assert shared[1] == 1  # 2 cores a rank: one process, their CPU work over 2 cores
    # the draws small beside the gathers: processes would not gain a tenth
    assert stages(parts, 0.2, steps, Cluster(2, 1, 1.0, server_cores=16), True)[1] == 0
    with pytest.raises(InvalidValueError, match="0 a server"):
        Cluster(2, 1, 1.0, server_cores=0)


def test_the_plan_draws_fewer_steps_ahead_where_memory_holds_fewer_steps_rows():
    """The depth of the loader's worker thread: DGL's 2 where the memory a server leaves each
    rank beside its peak holds two steps' input rows, fewer where it holds fewer, and no
    thread where not one; more memory never gives fewer steps."""
    from dglx_dist.planner.plan import _job
    from dglx_dist.strategies.holdings import sampled_step_bytes

    step, _ = sampled_step_bytes(_job(PRODUCTS, LARGE, Cluster(2, 1, 1.0)),
                                 LARGE.fanouts, LARGE.batch_size, copies=1)
    # no cache (cache_mb=0 given; its chooser would take half of what is left): what the
    # peak leaves is the steps' room
    only = {"given": {"cache_mb": 0.0}, "accept": lambda b: b.registered_name == "distdgl"}
    peak = make_plan(PRODUCTS, LARGE, Cluster(2, 1, 1.0), **only).choice.peak_bytes
    seen = []
    for extra in (0.2, 0.6, 1.2, 1.6, 2.2, 3.0, 8.0):
        cluster = Cluster(2, 1, 1.0, memory_bytes=int(peak + extra * step))
        choice = make_plan(PRODUCTS, LARGE, cluster, **only).choice
        assert choice.fits and choice.depth == min(2, int(extra)), (extra, choice.depth)
        seen.append(choice.depth)
    assert seen == sorted(seen) and seen[0] == 0 and seen[-1] == 2


def test_rounds_across_servers_cost_their_own_time_which_no_pipeline_hides():
    """A round of messages between servers costs ``round_s`` (x ranks per core where shared)
    beyond the link's latency, in every row that crosses servers (its ``rounds`` shown), and
    p3's pipeline, which hides the exchange behind the compute, does not hide it."""
    cluster = Cluster(4, 4, 1.0, memory_bytes=64 * GIB)
    free = Measured(dataclasses.replace(DEFAULT_UNITS, round_s=0.0))
    dear = Measured(dataclasses.replace(DEFAULT_UNITS, round_s=0.01))
    for shared in (None, 8):
        c = dataclasses.replace(cluster, shared_cores=shared)
        rows = {r.strategy: r for r in make_plan(PRODUCTS, LARGE, c, measured=free).rows}
        for r in make_plan(PRODUCTS, LARGE, c, measured=dear).rows:
            assert r.rounds == rows[r.strategy].rounds > 0
            added = r.parts["exchange"] - rows[r.strategy].parts["exchange"]
            assert added == pytest.approx(0.01 * r.rounds * c.contention()), r.strategy
            assert r.public()["rounds"] == pytest.approx(r.rounds, rel=1e-2)
    one = make_plan(PRODUCTS, LARGE, Cluster(1, 4, memory_bytes=64 * GIB), measured=dear)
    assert all(r.rounds == 0 for r in one.rows)  # one server: nothing crosses


def test_ranks_all_on_this_machine_share_its_cores():
    import os

    from dglx_dist.planner.auto import server_cores, shared_cores

    assert shared_cores(4, 4) == os.cpu_count() and shared_cores(2, 4) is None
    assert server_cores(2, 2) == os.cpu_count() and server_cores(1, 2) is None


def test_dglx_train_plans_with_the_cores_its_machine_gives_each_rank(monkeypatch):
    """``dglx train --strategy auto`` plans with this machine's cores: shared by every rank
    where all run on it, a server's where it runs one server's ranks, not known otherwise."""
    import importlib
    import os
    import types

    from dglx_dist.cli.train import planned
    from dglx_dist.config import RunConfig

    auto = importlib.import_module("dglx_dist.planner.auto")
    seen, make = [], auto.make_plan
    monkeypatch.setattr(auto, "make_plan", lambda graph, work, cluster, **kw: (
        seen.append(cluster), make(graph, work, cluster, **kw))[1])
    config = dataclasses.replace(RunConfig(), strategy=StrategyConfig.of(AUTO))
    for servers, per, here in ((1, 2, 2), (2, 2, 2), (2, 2, 1)):
        env = types.SimpleNamespace(num_servers=servers, ranks_per_server=per, rank=1,
                                    ranks_on_host=here, world_size=servers * per,
                                    local_rank=1, local_world_size=here, backend=None,
                                    device="cpu")
        planned(config, env)
    cores = os.cpu_count()
    assert [(c.shared_cores, c.server_cores) for c in seen] == [
        (cores, cores), (None, cores), (None, None)]  # (a server's, read where none shared)
    assert {c.compute_speedup for c in seen} == {1.0}  # CPU ranks: the units' own speed
    assert seen[0].cores_per_rank() == cores / 2 == seen[1].cores_per_rank()
    assert seen[2].cores_per_rank() is None


def test_granndis_cuts_co_batches_where_one_does_not_fit():
    cluster = Cluster(2, 2, memory_bytes=64 * GIB)
    base = make_plan(PRODUCTS, LARGE, cluster)
    row = next(r for r in base.rows if r.strategy == "granndis")
    work = COSTS["granndis"].epoch(PRODUCTS, LARGE, cluster)
    need = row.peak_bytes * cluster.ranks_per_server
    tight = dataclasses.replace(cluster, memory_bytes=need * 0.97)
    s = Situation("granndis", STRATEGIES.get("granndis").Config, PRODUCTS, LARGE, tight,
                  DEFAULT_UNITS, {}, row.peak_bytes)
    chosen = COSTS["granndis"].choose(s, work)
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
    same = resolve("p3", {"pipeline": True}, None, None)
    assert same == ("p3", {"pipeline": True}, None)
    name, options, plan = resolve(AUTO, {"cache_mb": "5"}, lambda: cora,
                                  Launch(2, 1, 16 * GIB, link_gbit=1.0), tell=False)
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


def test_gpu_ranks_are_planned_with_the_measured_speed_up_of_their_model(tmp_path, cora):
    """A launch whose ranks train on GPUs plans their model's math at the GPU speed-up
    ``dglx plan --measure`` cached (else the default), and only it: the draws and gathers
    stay the host's; CPU ranks at 1."""
    from dglx_dist.planner.units import DEFAULT_GPU_SPEEDUP

    path = tmp_path / "units.json"
    save_measured({"gpu_speedup": 12.5}, path)
    measured = load_measured(path)
    assert measured.gpu_speedup == 12.5 and "GPU speed-up" in measured.source
    gpu, cpu = Launch(2, 1, 16 * GIB, link_gbit=1.0, gpu=True), Launch(2, 1, 16 * GIB,
                                                                      link_gbit=1.0)
    assert gpu.cluster(measured).compute_speedup == 12.5
    assert gpu.cluster(Measured()).compute_speedup == DEFAULT_GPU_SPEEDUP
    assert cpu.cluster(measured).compute_speedup == 1.0
    rows = {}
    for name, launch in (("gpu", gpu), ("cpu", cpu)):
        plan = resolve(AUTO, {"fanouts": "10,25"}, lambda: cora, launch, tell=False,
                       measured=measured)[2]
        rows[name] = {r.strategy: r for r in plan.rows}["distdgl"]
    assert rows["gpu"].parts["compute"] == pytest.approx(rows["cpu"].parts["compute"] / 12.5)
    assert rows["gpu"].parts["sample"] == pytest.approx(rows["cpu"].parts["sample"])


@pytest.mark.parametrize("device", ["cpu", *(["cuda"] if torch.cuda.is_available() else [])])
def test_the_gpu_speed_up_is_the_units_time_over_the_devices(device):
    """``measure_gpu_speedup`` times the model's math of ``measure_units`` on the device
    against what the units say one core takes: on this machine's CPU with its own units,
    about 1 (its threads against one); on a GPU, more."""
    from dglx_dist.planner.units import measure_gpu_speedup, measure_units

    units = measure_units(nodes=20_000, edges=200_000, repeat=2)
    got = measure_gpu_speedup(units, device, nodes=20_000, edges=200_000, repeat=2)
    if device == "cpu":
        assert 0.1 < got < 10 * torch.get_num_threads(), got
    else:
        assert got > 1, got
    slower = dataclasses.replace(units, spmm_s_per_edge_dim=2 * units.spmm_s_per_edge_dim,
                                 dense_s_per_flop=2 * units.dense_s_per_flop)
    assert measure_gpu_speedup(slower, device, nodes=20_000, edges=200_000, repeat=2) > got


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


LINK = Workload("sage", 64, (10, 25), 512, task="link")
LINK_STRATEGIES = {n for n in STRATEGIES.names()
                   if n in COSTS and STRATEGIES.get(n).capabilities.link_prediction}


@pytest.mark.parametrize("cluster", [Cluster(2, 1, memory_bytes=16 * GIB),
                                     Cluster(2, 2, 1.0, latency_s=1e-4, memory_bytes=16 * GIB)])
def test_the_link_plan_is_deterministic_and_plans_the_strategies_that_train_links(cora,
                                                                                  cluster):
    plan = make_plan(cora, LINK, cluster)
    assert plan.public() == make_plan(cora, LINK, cluster).public()
    assert {r.strategy for r in plan.rows} == LINK_STRATEGIES
    assert "dorylus" not in LINK_STRATEGIES and len(LINK_STRATEGIES) == 4  # it has a law
    for row in plan.rows:
        built = STRATEGIES.build(row.strategy, **row.options)
        assert built.capabilities.link_prediction and "batch_size" not in row.options
        assert "co_batches" not in row.options  # a link step is one co-batch
        # every strategy takes a step per batch of edges: none is counted as full-graph
        assert row.rank_s == row.epoch_s and row.epoch_s == pytest.approx(sum(row.parts.values()))
    assert "s an epoch of link prediction on 2 servers" in plan.summary()
    node = make_plan(cora, dataclasses.replace(LINK, task="node"), cluster)
    assert "dorylus" in {r.strategy for r in node.rows}


def _link_steps(num_edges: int, batch: int, world: int) -> int:
    """The steps of the link task's loader: each rank's even share of the epoch's edges
    (dglx_dist.api.split.edge_share), the most batches any rank has (agreed_steps)."""
    import torch

    from dglx_dist.sampling import even_chunk

    return max(math.ceil(even_chunk(torch.arange(num_edges), world, r).numel() / batch)
               for r in range(world))


@pytest.mark.parametrize("batch, servers, ranks, train_edges",
                         [(512, 2, 1, None), (300, 1, 3, None), (250, 2, 1, 2000),
                          (64, 2, 2, 999)])
def test_link_steps_are_those_the_link_task_takes(batch, servers, ranks, train_edges):
    """The plan's steps an epoch, for every strategy, from the training graph that the link
    task's own split of Cora gives (tasks/link.py), at its batch and ranks."""
    from dglx_dist.data import read_dataset
    from dglx_dist.tasks.link import split_pairs, train_edge_ids

    ds = read_dataset(resolve_dataset("cora"))
    train, _, _, _ = split_pairs(ds, seed=0)
    task = TaskConfig(name="link", edge_batch_size=batch, train_edges=train_edges)
    edges = train_edge_ids(train.num_edges, task, seed=0).numel()
    want = _link_steps(edges, batch, servers * ranks)
    work = workload_for({}, "sage", 64, 2, task)
    assert (work.task, work.batch_size, work.train_edges) == ("link", batch, train_edges)
    plan = make_plan(graph_of_dataset(ds), work, Cluster(servers, ranks))
    assert {r.strategy: r.steps for r in plan.rows} == dict.fromkeys(LINK_STRATEGIES, want)
    assert want > 1


def test_a_link_step_seeds_the_ends_and_negatives_and_full_graph_steps_repeat(cora):
    """A link step's seeds: the distinct ends of its edges and negatives, a few fewer than
    batch x (2 + negatives) on a big graph, at most every node on a small one; a full-graph
    strategy's link epoch is its full-graph epoch over the training graph at every step,
    and the pairs' rows on top; distdgl pulls the rows of the seeds on other servers."""
    big = dataclasses.replace(LINK, batch_size=1000, negatives=2)
    uniform, ends = step_seeds(PRODUCTS, big)
    assert 3900 < uniform + ends < 4000 and 1900 < ends < 2000
    assert sum(step_seeds(cora, dataclasses.replace(LINK, batch_size=4096))) < cora.nodes
    assert step_seeds(cora, dataclasses.replace(LINK, task="node")) == (512.0, 0.0)
    cluster = Cluster(2, 1)
    epoch = COSTS["fullgraph"].epoch(cora, LINK, cluster)
    once = COSTS["fullgraph"].law(LINK.trained(cora), LINK, cluster)
    assert epoch.steps == 9 and LINK.trained(cora).edges == 8976 < cora.edges
    assert epoch.spmm_edge_dims == pytest.approx(9 * once.spmm_edge_dims)
    assert epoch.inter_bytes > 9 * once.inter_bytes and epoch.flops > 9 * once.flops
    assert COSTS["distdgl"].epoch(cora, LINK, cluster).steps == 9
    # uncut, a node batch pulls nothing from the other server; a link batch pulls the rows
    # of its negatives there (uniform: half of them) and of the nodes near them
    uncut = dataclasses.replace(cora, edge_cuts=(0.0,))
    assert COSTS["distdgl"].epoch(uncut, dataclasses.replace(LINK, task="node"), cluster) \
        .pull_inter_bytes == 0
    rows = COSTS["distdgl"].epoch(uncut, LINK, cluster).pull_inter_bytes / (9 * 2 * cora.row_bytes)
    assert step_seeds(cora, LINK)[0] / 2 < rows < cora.nodes / 2


@pytest.mark.parametrize("bad, said", [({"task": "edges"}, "task 'edges'"),
                                       ({"task": "link", "negatives": 0}, "negatives 0"),
                                       ({"task": "link", "train_edges": 0}, "train_edges 0")])
def test_a_bad_task_or_count_is_one_line(bad, said):
    with pytest.raises(InvalidValueError) as err:
        Workload("sage", **bad)
    assert said in str(err.value) and "\n" not in str(err.value)
    assert "expected a task of node, link" in str(err.value)


def test_dglx_plan_task_link_and_auto_resolves_it(capsys, cora):
    from dglx_dist.cli import main

    args = ["plan", "--data", "cora", "--task", "link", "--batch-size", "512",
            "--negatives", "2", "--servers", "2", "--memory-per-server", str(16 * GIB)]
    assert main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {r["strategy"] for r in out["rows"]} == LINK_STRATEGIES
    assert out["workload"]["task"] == "link" and out["workload"]["negatives"] == 2
    assert {r["steps"] for r in out["rows"]} == {9} and "of link prediction" in out["summary"]
    name, options, plan = resolve(AUTO, {}, lambda: cora, Launch(2, 1, link_gbit=1.0,
                                  task=TaskConfig(name="link", edge_batch_size=512)),
                                  tell=False)
    assert name in LINK_STRATEGIES and plan.work.link and plan.work.batch_size == 512
    STRATEGIES.build(name, **options)


@pytest.mark.parametrize("co_batches", [None, 2])
def test_full_graph_rows_take_a_sampled_epochs_steps_in_epochs(co_batches, cora):
    """Accuracy comes with optimizer steps: a full-graph row (one step an epoch, or R with
    granndis's co-batches, the one strategy that takes them) is ranked by its epoch x the
    sampled epoch's steps over its own; the sampled rows by their epoch."""
    work, cluster = Workload("gcn", 16, (10, 25), 16), Cluster(2, 1, 1.0)
    given = {} if co_batches is None else {"co_batches": co_batches}
    plan = make_plan(cora, work, cluster, given=given)
    sampled = math.ceil(round(cora.nodes * cora.train_frac) / (16 * 2))
    assert sampled == 5  # Cora's 140 training nodes, 32 a step
    assert {r.full_graph for r in plan.rows} == ({True} if co_batches else {True, False})
    for row in plan.rows:
        assert row.steps == ((co_batches or 1) if row.full_graph else sampled), row.strategy
        assert row.rank_s == pytest.approx(row.epoch_s * (
            FULL_STEP * sampled / row.steps if row.full_graph else 1))
    assert [r.rank_s for r in plan.rows] == sorted(r.rank_s for r in plan.rows)
    full = next(r for r in plan.rows if r.full_graph)
    if full in plan.rows[:2]:  # the choice or the runner-up: the why says how it counted
        assert f"counted {FULL_STEP * sampled / full.steps:.3g} times: {full.steps} " \
               f"optimizer step" in \
            plan.why()


def test_narrow_features_and_deep_models_count_more_full_graph_steps(cora):
    """A full-graph step is worth fewer sampled steps where the features are narrower than the
    hidden layer, or the model deeper than 2 layers: full_step's square root of each."""
    work, cluster = Workload("gcn", 16, (10, 25), 16), Cluster(2, 1, 1.0)
    narrow = dataclasses.replace(cora, feat_dim=4)  # 4x narrower than the hidden layer
    deep = Workload("gcn", 16, (10,) * 8, 16)
    assert full_step(cora, work) == FULL_STEP  # Cora's 1433 features, 2 layers
    assert full_step(narrow, work) == pytest.approx(2 * FULL_STEP)
    assert full_step(cora, deep) == pytest.approx(2 * FULL_STEP)
    assert full_step(narrow, deep) == pytest.approx(4 * FULL_STEP)

    def epochs(graph):
        return {r.strategy: r.epochs for r in make_plan(graph, work, cluster).rows}
    wide, thin = epochs(cora), epochs(narrow)
    for name, count in wide.items():
        assert thin[name] == pytest.approx(count * (2 if COSTS[name].full_graph else 1)), name


def test_commcheck_caches_the_link_rate_of_real_servers_only():
    """`dglx commcheck --payload-mb` remembers the rate between servers for later plans,
    but not between virtual servers (one machine's ranks on its loopback)."""
    from dglx_dist.cli.cluster import _link_gbit
    from dglx_dist.runtime.topology import Topology

    topology = Topology(2, 1)
    rate = 8 * 1 * 1 * 2**20 / 0.5 / 1e9  # 1 MiB each way in 0.5 s
    assert _link_gbit(topology, 1.0, 0.5, virtual=True) == pytest.approx(rate, abs=1e-3)
    assert load_measured() == Measured()
    assert _link_gbit(topology, 1.0, 0.5, virtual=False) == load_measured().link_gbit
    assert _link_gbit(Topology(1, 2), 1.0, 0.5, virtual=False) is None  # no link crossed


def test_under_a_scripts_loaders_full_graph_strategies_take_a_co_batch_per_batch(cora):
    """The drop-in API's DataLoaders (``Workload.loaders``: distribute's and the runner's
    plans, the typed bench): granndis and fullgraph take as many co-batches as the loader's
    batches (their default co_batches=-1), so they step as often as the sampled ones."""
    cluster = Cluster(2, 1, 1.0)
    plain = make_plan(cora, Workload("gcn", 16, (10, 25), 16), cluster)
    looped = make_plan(cora, Workload("gcn", 16, (10, 25), 16, loaders=True), cluster)
    sampled = next(r.steps for r in plain.rows if not r.full_graph)
    for before, row in ((next(b for b in plain.rows if b.strategy == r.strategy), r)
                        for r in looped.rows):
        if row.strategy in ("granndis", "fullgraph"):
            assert (before.steps, row.steps) == (1, sampled)
            assert row.rank_s == pytest.approx(row.epoch_s * FULL_STEP)
            assert "co_batches" not in row.options  # the default -1 takes the loader's
            assert row.epoch_s > before.epoch_s  # every step's rounds across servers
        else:
            assert row == before
    assert resolve(AUTO, {}, lambda: cora, Launch(2, 1, link_gbit=1.0, loaders=True))[2].rows \
        == make_plan(cora, workload_for({}, loaders=True), cluster).rows


def test_resgcn_is_not_planned_for_p3_whose_first_conv_must_take_the_features(cora):
    """ResGCN+'s features pass a Linear before its first conv, which p3 cannot split by
    columns: the plan leaves p3 out for it, and p3 refuses such a model in one line."""
    rows = make_plan(cora, Workload("resgcn", 16), Cluster(2, 1, memory_bytes=16 * GIB)).rows
    assert "p3" not in {r.strategy for r in rows} and "distdgl" in {r.strategy for r in rows}
    assert "p3" in {r.strategy for r in make_plan(cora, Workload("gcn", 16), Cluster(
        2, 1, memory_bytes=16 * GIB)).rows}


def test_a_plug_in_with_a_cost_is_planned_and_one_without_is_listed_as_not_planned(
        monkeypatch, capsys):
    """The plan reads each registered strategy's own cost: a plug-in that declares one
    (the test plug-ins' ``CostedRangeStrategy``, registered here) is a row of `dglx plan`'s
    table; ``range_distdgl``, which declares none, is listed as not planned, with why."""
    from dglx_test_plugins.strategy import CostedRangeStrategy

    from dglx_dist.cli import main
    from dglx_dist.planner.predict import NO_COST

    STRATEGIES.names()  # the entry points loaded, then a registry of this test's own
    monkeypatch.setattr(STRATEGIES, "_entries", dict(STRATEGIES._entries))
    STRATEGIES.add("costed_range", CostedRangeStrategy)
    args = ["plan", "--nodes", "100000", "--edges", "2000000", "--servers", "2",
            "--memory-per-server", str(64 * GIB)]
    assert main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "costed_range" in {r["strategy"] for r in out["rows"]} and len(out["rows"]) == 6
    assert out["not_planned"] == {"range_distdgl": NO_COST}
    assert main(args) == 0
    table = capsys.readouterr().out
    assert "| costed_range | " in table
    assert "| range_distdgl | not planned |" in table and NO_COST in table


def test_distdgl_counts_the_rows_its_last_steps_pulled_where_they_fit():
    """``reuse_mb``: by default its hits take bytes out of the epoch and its budget is in
    the rank's peak; given 0, neither; where the server's free memory does not hold every
    rank's budget, the plan turns it off (0)."""
    from dglx_dist.strategies.distdgl.cost import REUSE_MB, reuse_hits

    g1m = graph_shape(1_000_000, 20_000_000, 128, 16, 0.05)
    cluster, work = Cluster(2, 2), Workload("sage", 32, (10, 25), 1000)
    epoch = COSTS["distdgl"].epoch(g1m, work, cluster)

    def chosen(cluster, given, peak=1 * GIB):
        s = Situation("distdgl", STRATEGIES.get("distdgl").Config, g1m, work, cluster,
                      DEFAULT_UNITS, given, peak)
        return COSTS["distdgl"].choose(s, epoch)

    kept, off = chosen(cluster, {}), chosen(cluster, {"reuse_mb": 0.0})
    assert "reuse_mb" not in kept.options and off.options["reuse_mb"] == 0.0
    assert kept.work.pull_inter_bytes < off.work.pull_inter_bytes == epoch.pull_inter_bytes
    assert kept.peak_per_rank == 1 * GIB + REUSE_MB * 2**20 and off.peak_per_rank == 1 * GIB
    roomy = chosen(dataclasses.replace(cluster, memory_bytes=8 * GIB), {})
    assert "reuse_mb" not in roomy.options
    small = dataclasses.replace(cluster, memory_bytes=2 * GIB + 100 * 2**20)
    tight, without = chosen(small, {}), chosen(small, {"reuse_mb": 0.0})
    assert tight.options["reuse_mb"] == 0.0 and tight.options["cache_mb"] == 50
    assert tight.work == without.work and tight.peak_per_rank == without.peak_per_rank
    assert reuse_hits(0) == 0 and reuse_hits(4) == pytest.approx(0.32)
    assert reuse_hits(1e6) == reuse_hits(50) < 1 and REUSE_MB == 64.0
