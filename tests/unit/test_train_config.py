"""One typed training config, its flags declared once: every command that takes them reads
back the config a launcher wrote (dglx train, the single-process baseline, DGL's DistDGL
worker, the example script), and refuses out-of-range values naming the flag."""
import argparse
import dataclasses
import runpy
import sys
from pathlib import Path

import pytest

from dglx_dist.bench.dgl_distdgl import WORKER_FLAGS, hyper
from dglx_dist.bench.dgl_distdgl_worker import parse_args as worker_args
from dglx_dist.bench.harness import Setup, train_command
from dglx_dist.bench.single import FLAGS as SINGLE_FLAGS
from dglx_dist.bench.single import parse_args as single_args
from dglx_dist.cli import build_parser
from dglx_dist.cli_flags import add_config_flags, config_argv, config_from_args
from dglx_dist.train_config import MODEL_NAMES, TrainConfig

# every field away from its default, so a flag that is not passed on shows up
CHANGED = TrainConfig(task="link", model="gat", hidden=24, layers=3, dropout=0.25, lr=0.002,
                      weight_decay=0.0, epochs=7, eval_every=2, seed=5, row_normalize=True,
                      edge_batch_size=99, negatives=3, train_edges=1234)


def _only(config: TrainConfig, names) -> dict:
    return {n: getattr(config, n) for n in names}


def test_every_field_differs_from_its_default():
    default = TrainConfig()
    assert all(getattr(CHANGED, f.name) != getattr(default, f.name)
               for f in dataclasses.fields(TrainConfig))


def test_argv_round_trips_through_its_own_flags():
    parser = argparse.ArgumentParser()
    add_config_flags(parser, TrainConfig)
    assert config_from_args(TrainConfig, parser.parse_args(config_argv(CHANGED))) == CHANGED
    assert config_from_args(TrainConfig, parser.parse_args([])) == TrainConfig()


def test_dglx_train_reads_back_what_the_bench_harness_launches(tmp_path):
    setup = Setup(data=tmp_path, num_classes=3, train=CHANGED, batch_size=77, fanouts="5,5,5,5",
                  train_flags=("--measure-saved-bytes",))
    args = build_parser().parse_args(train_command("p3", setup, ["pipeline=true"]))
    assert config_from_args(TrainConfig, args) == dataclasses.replace(
        CHANGED, layers=4, edge_batch_size=77)  # the depth and batch are the setup's
    assert (args.strategy, args.data, args.strategy_opt, args.measure_saved_bytes) == (
        "p3", str(tmp_path), ["pipeline=true"], True)


def test_the_baselines_read_back_their_part_of_the_config(tmp_path):
    train = dataclasses.replace(CHANGED, model="gcn", eval_every=1)
    setup = Setup(data=tmp_path, num_classes=3, train=train, batch_size=100, fanouts="4,6",
                  servers=2, ranks_per_server=2)
    single = single_args(["--data", str(tmp_path), *config_argv(train, SINGLE_FLAGS)])
    assert _only(config_from_args(TrainConfig, single), SINGLE_FLAGS) == _only(train,
                                                                               SINGLE_FLAGS)
    worker = worker_args(["trainer", *hyper(setup)])
    assert _only(config_from_args(TrainConfig, worker), WORKER_FLAGS) == _only(train,
                                                                               WORKER_FLAGS)
    # the global batch (100 x 4 ranks) over DGL's 2 machines; validated every epoch
    assert (worker.batch_size, worker.fanouts, worker.num_classes, worker.eval_val) == (
        200, [4, 6], 3, True)


@pytest.mark.parametrize("flag, value", [("--lr", "0"), ("--dropout", "1"), ("--hidden", "0"),
                                         ("--model", "mlp"), ("--epochs", "nan"),
                                         ("--train-edges", "-3")])
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
                                          "seed", "epochs"))
    assert "(default: 60)" in text  # the example's own default, declared as a change


@pytest.mark.dgl
def test_the_model_names_are_the_reference_models():
    from dglx_dist.models import MODELS

    assert set(MODEL_NAMES) == set(MODELS)
