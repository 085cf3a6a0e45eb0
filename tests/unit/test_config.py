"""One nested, typed run config, its flags declared once: every command that takes them reads
back the config a launcher wrote (dglx train, the single-process baseline, DGL's DistDGL
worker, the example script), and refuses out-of-range values naming the flag."""
import argparse
import dataclasses
import runpy
import sys
from pathlib import Path

import pytest

from dglx_dist.bench.dgl_distdgl import hyper
from dglx_dist.bench.dgl_distdgl_worker import parse_args as worker_args
from dglx_dist.bench.harness import Setup, train_command
from dglx_dist.bench.single import parse_args as single_args
from dglx_dist.cli import build_parser
from dglx_dist.cli_flags import add_flags, from_args, to_argv
from dglx_dist.config import (CONV_LIBRARY_NAMES, MODEL_NAMES, TRAINING, DataConfig, JobConfig, LoopConfig,
                              ModelConfig, OptimizerConfig, RunConfig, StrategyConfig,
                              TaskConfig)
from dglx_dist.errors import InvalidValueError

# every field with a flag away from its default, so a flag that is not passed on shows up
CHANGED = RunConfig(
    model=ModelConfig("gat", hidden=24, layers=3, dropout=0.25, row_normalize=True,
                      convs="dgl"),
    optimizer=OptimizerConfig(lr=0.002, weight_decay=0.0),
    loop=LoopConfig(epochs=7, eval_every=2, seed=5),
    task=TaskConfig("link", edge_batch_size=99, negatives=3, train_edges=1234, eval_pairs=321),
    strategy=StrategyConfig("p3"),
    data=DataConfig("some-data", Path("parts"), Path("cache")),
    job=JobConfig(backend="gloo", device="cpu", progress=False, metrics_file=Path("m.jsonl"),
                  json=True, checkpoint_dir=Path("ck"), checkpoint_every=3, nonfinite_loss="warn",
                  fail_on_collapse=True, measure_saved_bytes=True, resume=True,
                  prefetch_thread="off", prefetch_factor=3, num_workers=2, use_uva=True,
                  gpu_cache=1000, memory_limit=10**9))


def _sections(config: RunConfig, names=TRAINING) -> dict:
    return {n: getattr(config, n) for n in names}


def test_the_prefetch_thread_flag_is_dgls_use_prefetch_thread():
    assert [JobConfig(prefetch_thread=v).use_prefetch_thread for v in ("auto", "on", "off")] \
        == [None, True, False]
    assert CHANGED.job.use_prefetch_thread is False


def test_every_flag_differs_from_its_default():
    default = RunConfig()
    for section in dataclasses.fields(RunConfig):
        for f in dataclasses.fields(getattr(default, section.name)):
            if f.metadata.get("cli", True) and section.name != "strategy":
                assert getattr(getattr(CHANGED, section.name), f.name) != \
                    getattr(getattr(default, section.name), f.name), (section.name, f.name)


def test_argv_round_trips_through_its_own_flags():
    parser = argparse.ArgumentParser()
    add_flags(parser, RunConfig)
    assert from_args(RunConfig, parser.parse_args(to_argv(CHANGED))) == CHANGED
    assert from_args(RunConfig, parser.parse_args([])) == RunConfig()


def test_strategy_options_are_typed_by_the_registry_and_round_trip():
    strategy = StrategyConfig.of("p3", fanouts="5,5", pipeline="true")
    assert strategy.options.fanouts == (5, 5) and strategy.options.pipeline is True
    assert set(strategy.flag_pairs()) == {"fanouts=5,5", "pipeline=true"}
    parser = argparse.ArgumentParser()
    add_flags(parser, RunConfig)
    config = dataclasses.replace(CHANGED, strategy=strategy)
    assert from_args(RunConfig, parser.parse_args(to_argv(config))) == config


def test_a_section_refuses_what_its_flag_refuses():
    with pytest.raises(InvalidValueError, match=r"--hidden 0: expected .* >= 1 \(ModelConfig"):
        ModelConfig(hidden=0)
    with pytest.raises(InvalidValueError, match="--task 'edge': choose from node, link"):
        TaskConfig("edge")


def test_dglx_train_reads_back_what_the_bench_harness_launches(tmp_path):
    setup = Setup(data=tmp_path, num_classes=3, run=CHANGED, batch_size=77,
                  fanouts=(5, 5, 5, 5), workdir=tmp_path / "work")
    strategy = StrategyConfig.of("p3", pipeline=True)
    args = build_parser().parse_args(train_command(setup, strategy))
    # the depth, batch, data, cache and strategy are the setup's; no progress bars
    cache = (tmp_path / "work" / "parts").resolve()
    assert from_args(RunConfig, args) == dataclasses.replace(
        CHANGED.updated(model={"layers": 4}, task={"edge_batch_size": 77},
                        data={"data": str(tmp_path), "cache_dir": cache},
                        job={"progress": False}), strategy=strategy)


def test_the_baselines_read_back_their_part_of_the_config(tmp_path):
    run = CHANGED.updated(model={"name": "gcn", "layers": 2}, task={"name": "node"},
                          loop={"eval_every": 1})
    setup = Setup(data=tmp_path, num_classes=3, run=run, batch_size=100, fanouts=(4, 6),
                  servers=2, ranks_per_server=2)
    expected = _sections(setup.training())
    single = single_args(["--data", str(tmp_path),
                          *to_argv(setup.training(), sections=TRAINING)])
    assert _sections(from_args(RunConfig, single, sections=TRAINING)) == expected
    worker = worker_args(["trainer", *hyper(setup)])
    assert _sections(from_args(RunConfig, worker, sections=TRAINING)) == expected
    # DGL's 2 machines with 2 trainers each, as many as the ranks, each with their batch (as
    # launch.py's --num_trainers runs a trainer per GPU); validated every epoch
    assert (worker.trainers, worker.batch_size, worker.fanouts, worker.num_classes,
            worker.eval_every) == (2, 100, (4, 6), 3, 1)
    odd = worker_args(["trainer", *hyper(dataclasses.replace(setup, servers=3,
                                                             ranks_per_server=1))])
    assert (odd.trainers, odd.batch_size) == (1, 150)  # 3 ranks over 2 machines: the share


@pytest.mark.parametrize("flag, value", [("--lr", "0"), ("--dropout", "1"), ("--hidden", "0"),
                                         ("--model", "mlp"), ("--epochs", "nan"),
                                         ("--train-edges", "-3"), ("--checkpoint-every", "0")])
def test_dglx_train_refuses_a_value_out_of_range_naming_the_flag(flag, value, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["train", flag, value])
    assert exc.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


def test_the_example_declares_the_same_flags(monkeypatch, capsys):
    script = Path(__file__).parents[2] / "examples" / "train_node_classification.py"
    monkeypatch.setattr(sys, "argv", [str(script), "--help"])
    with pytest.raises(SystemExit):
        runpy.run_path(str(script), run_name="__main__")
    text = capsys.readouterr().out
    assert all(f"--{n}" in text for n in ("hidden", "lr", "weight-decay", "row-normalize",
                                          "seed", "epochs", "strategy", "strategy-opt"))
    assert "(default: 60)" in text  # the example's own default, declared as a change


@pytest.mark.dgl
def test_the_model_names_are_the_reference_models():
    from dglx_dist.models import MODELS
    from dglx_dist.models.library import CONV_LIBRARIES

    assert set(MODEL_NAMES) == set(MODELS)
    assert CONV_LIBRARY_NAMES == tuple(CONV_LIBRARIES)


def test_bench_flags_lie_over_the_preset_and_its_base(tmp_path):
    from dglx_dist.bench.presets import bench_run

    args = build_parser().parse_args(["bench", "--preset", "small", "--hidden", "8",
                                      "--task", "link"])
    run = bench_run(args)
    # given: hidden, task; the preset's: epochs, lr, train_edges; the bench's own: model gcn
    assert (run.model.hidden, run.task.name, run.loop.epochs, run.optimizer.lr,
            run.task.train_edges, run.model.name, run.loop.eval_every) == (
        8, "link", 10, 0.01, 48_000, "gcn", 1)
    assert not hasattr(args, "epochs")  # nothing written into the namespace
