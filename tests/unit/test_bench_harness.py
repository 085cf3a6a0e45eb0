"""The pure parts of ``dglx bench`` (:mod:`dglx_dist.bench`): records summarised, time to
accuracy, presets, the report's cells, and the command's refusals."""
import argparse
import dataclasses
import json
from pathlib import Path

import pytest

from dglx_dist.bench import PRESETS, Preset, Setup, add_time_to_accuracy, summarize
from dglx_dist.bench.harness import first_reached, parse_records, reduce_records
from dglx_dist.bench.presets import ScriptPreset
from dglx_dist.bench.report import COLUMNS, markdown
from dglx_dist.bench.suite import extra_options
from dglx_dist.cli import main
from dglx_dist.errors import InvalidValueError
from dglx_dist.config import RunConfig


def _record(epoch_time, val_acc=None, **extra):
    return {"epoch_time": epoch_time, "val_acc": val_acc, "bytes_sent_inter": 0,
            "bytes_sent_intra": 0, "peak_mem_mb": 10.0, "steps": 4, **extra}


def test_summarize_averages_without_the_first_epoch():
    records = [_record(5.0, 0.2, bytes_sent_inter=1000, peak_mem_mb=50.0),
               _record(1.0, 0.5, bytes_sent_inter=30, bytes_sent_intra=7),
               _record(3.0, 0.7, bytes_sent_inter=10, bytes_sent_intra=3, test_acc=0.6)]
    row = summarize(records)
    assert row["epoch_time"] == 2.0 and row["epoch_time_first"] == 5.0
    assert row["epoch_times"] == [5.0, 1.0, 3.0] and row["epochs"] == 3
    assert row["bytes_inter"] == 20 and row["bytes_intra"] == 5
    assert row["peak_mem_mb"] == 50.0  # the largest, first epoch included
    assert row["val_acc_per_epoch"] == [0.2, 0.5, 0.7]
    assert (row["val_acc"], row["test_acc"], row["steps"]) == (0.7, 0.6, 4)


def test_summarize_one_epoch_and_missing_counters():
    row = summarize([{"epoch_time": 2.0, "steps": 1}])
    assert row["epoch_time"] == 2.0 and row["bytes_inter"] == 0 and row["peak_mem_mb"] == 0


def test_parse_records_keeps_the_json_lines():
    out = 'starting\n{"epoch": 0, "epoch_time": 1.5}\nnoise {\n{"epoch": 1, "epoch_time": 1}\n'
    assert [r["epoch"] for r in parse_records(out)] == [0, 1]


def _row(system, times, accs, **extra):
    return {"system": system, "epoch_times": times, "val_acc_per_epoch": accs,
            "val_acc": accs[-1], **extra}


def test_time_to_accuracy_against_single_process_dgl():
    rows = [_row("dgl", [1.0, 1.0, 1.0], [0.5, 0.8, 0.9]),
            _row("p3", [2.0, 2.0, 2.0], [0.3, None, 0.86]),
            _row("slow", [1.0, 1.0], [0.1, 0.2]),
            {"system": "broken", "error": "RuntimeError: boom"}]
    target = add_time_to_accuracy(rows, 0.95)
    assert target == round(0.95 * 0.9, 4)
    assert rows[0]["time_to_accuracy"] == 3.0  # 0.8 < 0.855 <= 0.9
    assert rows[1]["time_to_accuracy"] == 6.0  # an epoch not evaluated still costs its time
    assert rows[2]["time_to_accuracy"] is None and rows[2]["target_acc"] == target
    assert "time_to_accuracy" not in rows[3]


def test_time_to_accuracy_without_the_reference_uses_the_best_row():
    rows = [_row("a", [1.0], [0.4]), _row("b", [1.0, 1.0], [0.5, 0.6])]
    assert add_time_to_accuracy(rows, 0.5) == 0.3
    assert rows[0]["time_to_accuracy"] == 1.0
    assert add_time_to_accuracy([{"system": "x", "error": "e"}], 0.9) is None


def test_markdown_says_not_reached_and_formats_bytes():
    rows = [_row("dgl", [1.0], [0.9], time_to_accuracy=None, target_acc=0.8,
                 bytes_inter=1234567, network="none (1 process)"),
            {"system": "p3", "network": "virtual", "error": "RuntimeError: boom\nmore"}]
    meta = {"command": "dglx bench", "dataset": "d", "target_acc": 0.8, "target_fraction": 0.95,
            "setup": {"model": "gcn", "layers": 2, "hidden": 64, "servers": 2,
                      "ranks_per_server": 1, "epochs": 2}}
    text = markdown(rows, meta)
    assert "| " + " | ".join(COLUMNS) + " |" in text
    assert "not reached" in text and "1,234,567" in text
    assert "| p3 | virtual |" in text and "RuntimeError: boom" in text and "more" not in text


def test_presets_are_frozen_and_checked():
    tiny = PRESETS["tiny"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        tiny.epochs = 3
    assert tiny.batch_size == 250 and tiny.synthetic(7).seed == 7
    run = tiny.run(RunConfig())
    assert (run.loop.epochs, run.model.hidden, run.optimizer.lr, run.task.train_edges) == (
        6, 64, 0.01, 16_000)
    with pytest.raises(InvalidValueError, match="epochs must be >= 2"):
        dataclasses.replace(tiny, epochs=1)
    with pytest.raises(InvalidValueError, match="hidden, num_nodes must be > 0"):
        dataclasses.replace(tiny, num_nodes=0, hidden=-1)
    assert isinstance(tiny, Preset)


def test_strategy_opt_needs_a_strategy_name():
    assert extra_options(["p3:pipeline=true", "p3:x=1", "granndis:co_batches=4"]) == {
        "p3": {"pipeline": "true", "x": "1"}, "granndis": {"co_batches": "4"}}
    with pytest.raises(InvalidValueError, match="expected NAME:KEY=VALUE"):
        extra_options(["pipeline=true"])


@pytest.mark.parametrize("argv, words", [
    (["--systems", "dgl,nosuch"], "unknown nosuch; choose from dgl, dgl-distdgl"),
    (["--task", "link", "--systems", "dorylus"],
     "not for --task link (their strategies do not train it): dorylus; choose from dgl-"),
    (["--strategy-opt", "p3"], "expected NAME:KEY=VALUE"),
    (["--model", "nosuch"], "--model 'nosuch': choose from"),
    (["--replot"], "no results.jsonl in"),
    (["--task", "link", "--memory-limit", "1000"], "--memory-limit: only node classification"),
])
def test_bench_refuses_in_one_line(argv, words, tmp_path, caplog):
    assert main(["bench", "--no-plot", "--out", str(tmp_path / "none"), *argv]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and words in errors[0] and "\n" not in errors[0]
    assert not (tmp_path / "none").exists()  # refused before any work


@pytest.mark.parametrize("flag, value", [("--epochs", "1"), ("--lr", "0"), ("--fanouts", "10,x"),
                                         ("--preset", "huge"), ("--target", "1.5")])
def test_bench_flags_are_checked_by_the_parser(flag, value, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", flag, value])
    assert exc.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


def test_replot_rewrites_the_table(tmp_path, capsys):
    rows = [_row("dgl", [1.0, 1.0], [0.5, 0.9], network="none (1 process)")]
    meta = {"command": "dglx bench --preset tiny", "dataset": "d", "target_acc": None,
            "target_fraction": 0.95, "setup": {"model": "gcn", "layers": 2, "hidden": 64,
                                               "servers": 2, "ranks_per_server": 1,
                                               "epochs": 2}}
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    assert main(["bench", "--replot", "--no-plot", "--out", str(tmp_path)]) == 0
    assert "| dgl | none (1 process) |" in (tmp_path / "results.md").read_text()
    assert "# benchmark: dglx bench --preset tiny" in capsys.readouterr().out


def test_summarize_link_records_keeps_ranking_metrics():
    records = [_record(4.0, val_mrr=0.2, val_auc=0.7), _record(2.0, val_mrr=0.3, val_auc=0.8),
               {"test_mrr": 0.31, "test_hits@10": 0.6, "test_auc": 0.81}]
    row = summarize(records)
    assert row["epochs"] == 2 and row["epoch_time"] == 2.0  # the test record is no epoch
    assert row["val_mrr_per_epoch"] == [0.2, 0.3] and row["val_mrr"] == 0.3
    assert (row["val_auc"], row["test_mrr"], row["test_auc"]) == (0.8, 0.31, 0.81)
    assert "val_mrr" not in summarize([_record(1.0, 0.5)])  # node records: no ranking fields


def test_link_systems_are_those_that_train_it():
    from dglx_dist.bench.harness import systems
    from dglx_dist.strategies import STRATEGIES

    node, link = systems({}), systems({}, "link")
    assert "dgl" in node and "dorylus" in node
    assert set(link) == {"dgl-distdgl", "auto"} | {
        n for n in STRATEGIES.names() if STRATEGIES.get(n).capabilities.link_prediction}
    assert {"distdgl", "p3", "granndis"} <= set(link) and "dorylus" not in link


def test_markdown_of_a_link_run_shows_ranking_columns():
    from dglx_dist.bench.report import LINK_COLUMNS

    rows = [{"system": "distdgl", "network": "virtual", "epoch_time": 1.0, "val_mrr": 0.3,
             "test_mrr": 0.31, "test_hits@10": 0.6, "test_auc": 0.81, "bytes_inter": 2048}]
    meta = {"command": "dglx bench --task link", "dataset": "d", "target_acc": None,
            "target_fraction": 0.95, "setup": {"model": "gcn", "layers": 2, "hidden": 64,
                                               "servers": 2, "ranks_per_server": 1,
                                               "epochs": 2, "task": "link",
                                               "train_edges": 100, "negatives": 1}}
    text = markdown(rows, meta)
    assert "| " + " | ".join(LINK_COLUMNS) + " |" in text and "time-to-accuracy" not in text
    assert "| distdgl | virtual | 1 |  |  | 2,048 |  |  | 0.3 | 0.31 | 0.6 | 0.81 |" in text


def test_time_to_accuracy_against_the_best_any_row_reached():
    rows = [_row("granndis", [1.0, 1.0, 1.0], [0.5, 0.9, 0.7]), _row("distdgl", [2.0], [0.8])]
    assert add_time_to_accuracy(rows, 0.8, best_epoch=True) == 0.72  # 0.8 x 0.9 (epoch 2)
    assert rows[0]["time_to_accuracy"] == 2.0 and rows[1]["time_to_accuracy"] == 2.0
    assert first_reached([1.0, 2.0, 4.0], [0.1, None, 0.9], 0.5) == (7.0, 3)
    assert first_reached([1.0], [0.1], 0.5) is None


def test_reduce_records_means_without_the_first_epoch_and_peaks_over_all():
    records = [{"invocations": 90, "peak_saved_mb": 7.0}, {"invocations": 10},
               {"invocations": 30, "peak_saved_mb": 3.0}]
    assert reduce_records(records, {"invocations": "mean", "peak_saved_mb": "max"}) == {
        "invocations": 20.0, "peak_saved_mb": 7.0}


def test_setup_public_leaves_out_how_a_run_is_made(tmp_path):
    setup = Setup(data=tmp_path, num_classes=4,
                  run=RunConfig().updated(loop={"eval_every": 3}, model={"hidden": 8}),
                  train_flags=("--x",), env=(("A", "1"),))
    assert not {"workdir", "eval_every", "train_flags", "env", "run"} & set(setup.public())
    assert setup.public()["data"] == str(tmp_path)
    assert setup.public()["hidden"] == 8  # the run config's training fields, flat
    assert (setup.public()["model"], setup.public()["fanouts"]) == ("sage", "10,25")


def test_script_preset_fills_what_was_not_given(tmp_path):
    from benchmarks.sweeps.common import parse_with_preset
    from dglx_dist.data.synthetic import SyntheticConfig

    preset = ScriptPreset(SyntheticConfig(num_nodes=100, num_edges=400, feat_dim=8),
                          epochs=3, lr=0.1)
    p = argparse.ArgumentParser()
    p.add_argument("--preset", default="x")
    p.add_argument("--workdir", type=Path, default=tmp_path / "w")
    for flag, kind in (("--epochs", int), ("--hidden", int), ("--lr", float)):
        p.add_argument(flag, type=kind)
    args = parse_with_preset(p, ["--hidden", "32"], {"x": preset})
    assert (args.epochs, args.hidden, args.lr, args.num_nodes, args.feat_dim) == (
        3, 32, 0.1, 100, 8)
    assert parse_with_preset(p, ["--epochs", "7"], {"x": preset}).epochs == 7
    with pytest.raises(dataclasses.FrozenInstanceError):
        preset.epochs = 4


def test_sweeps_take_the_1m_preset_and_a_network(tmp_path):
    from benchmarks.sweeps import granndis, p3
    from benchmarks.sweeps.common import sweep_setup

    for sweep in (p3, granndis):
        args = sweep.parse_args(["--preset", "1m", "--workdir", str(tmp_path)])
        assert (args.num_nodes, args.num_edges, args.epochs, args.network) == (
            1_000_000, 20_000_000, 2, "virtual")
        assert sweep_setup(args, tmp_path, {"model": {"name": "sage"}}).network == "virtual"
    with pytest.raises(SystemExit):
        p3.parse_args(["--network", "100g", "--workdir", str(tmp_path)])


def test_the_sweeps_run_from_benchmarks_not_dglx_bench(tmp_path, capsys):
    """``python -m benchmarks.sweeps`` names the sweeps it knows; ``dglx bench`` has no
    ``--sweeps`` (the sweeps are research tooling, outside the wheel); a failed sweep is a row
    of its table."""
    from benchmarks.sweeps.__main__ import markdown, parse_args

    with pytest.raises(SystemExit):
        parse_args(["--sweeps", "p3,nosuch"])
    assert "unknown nosuch; choose from p3, granndis, dorylus" in capsys.readouterr().err
    assert parse_args(["--preset", "small", "--out", str(tmp_path)]).sweeps == (
        "p3,granndis,dorylus")
    with pytest.raises(SystemExit):
        main(["bench", "--sweeps", "p3", "--out", str(tmp_path / "none")])
    text = markdown([{"sweep": "p3-feature", "system": "p3", "feat_dim": 64, "bytes_inter": 2048},
                     {"sweep": "dorylus", "error": "RunFailedError: boom\nmore"}], "x")
    assert "## sweep p3-feature" in text and "2,048" in text
    assert "## sweep dorylus" in text and "RunFailedError: boom" in text and "more" not in text


@pytest.mark.parametrize("done, expected", [(True, (0, True)), (False, (-9, False))])
def test_a_dgl_trainer_stuck_after_finishing_is_killed_as_done(done, expected, tmp_path,
                                                                monkeypatch):
    """DGL's exit_client sometimes never returns: a trainer that marked its training done gets
    a grace period and then counts as finished; one that did not is killed as failed."""
    import subprocess
    import sys
    import time

    from dglx_dist.bench import dgl_distdgl_worker as worker

    monkeypatch.setattr(worker, "SHUTDOWN_GRACE_S", 0.5)
    args = argparse.Namespace(result_dir=str(tmp_path), machine=1, timeout=3.0)
    if done:
        (tmp_path / "done1-1.json").write_text("")  # the machine's second trainer
    ok = subprocess.Popen([sys.executable, "-c", "pass"])
    stuck = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    t0 = time.monotonic()
    assert worker._wait_trainers(args, [ok, stuck]) == expected
    assert stuck.poll() is not None  # killed, not left behind
    assert time.monotonic() - t0 < (2.0 if done else 5.0)


def test_each_row_sits_beside_its_floor():
    """The floor is the larger of the busiest uplink's bytes at the link's rate and the
    single-process epoch over the ranks that compute at once; per run; not on the reference."""
    from dglx_dist.bench.floor import add_floors

    rows = [{"run": 1, "system": "dgl", "epoch_time": 4.0},
            {"run": 1, "system": "distdgl", "epoch_time": 3.0, "bytes_inter_busiest": 250_000_000},
            {"run": 1, "system": "p3", "epoch_time": 5.0, "bytes_inter_busiest": 12_500_000},
            {"run": 2, "system": "distdgl", "epoch_time": 3.0, "bytes_inter_busiest": 0},
            {"run": 1, "system": "granndis", "error": "failed"}]
    add_floors(rows, "emulated-1g", ranks=4, cpus=2)
    dgl, distdgl, p3, alone, failed = rows
    assert "floor_s" not in dgl and "floor_s" not in failed
    assert (distdgl["floor_net_s"], distdgl["floor_compute_s"]) == (2.0, 2.0)  # 1 Gbit/s; 4 s / 2
    assert distdgl["floor_s"] == 2.0 and distdgl["vs_floor"] == 1.5
    assert p3["floor_net_s"] == 0.1 and p3["floor_s"] == 2.0 and p3["vs_floor"] == 2.5
    assert "floor_s" not in alone  # nothing sent and no reference in its run: no floor
    add_floors(virtual := [{"system": "dgl", "epoch_time": 4.0},
                           {"system": "distdgl", "epoch_time": 3.0, "bytes_inter_busiest": 9}],
               "virtual", ranks=1, cpus=8)
    assert virtual[1]["floor_net_s"] is None and virtual[1]["floor_s"] == 4.0


def test_auto_runs_the_plans_choice_in_a_row_named_for_it(tmp_path, monkeypatch, caplog):
    """``--systems auto``: the strategy the plan picks for the setup (``auto:`` options
    kept), run as its own row is, the row named ``auto (STRATEGY)`` with the plan's two
    lines (logged once); run only where named."""
    import types

    from dglx_dist.bench import harness, suite
    from dglx_dist.prepare import resolve_dataset

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # the default unit costs
    ran = []
    monkeypatch.setattr(harness, "run_strategy", lambda name, setup, extra, target: ran.append(
        (name, dict(extra[name]))) or {"note": "sampled mini-batches", "epoch_time": 1.0})
    node = harness.systems({"auto": ["cache_mb=5"]})
    assert "auto" in node
    setup = Setup(data=resolve_dataset("cora"), num_classes=7,
                  run=RunConfig().updated(job={"memory_limit": 16 << 30}))
    with caplog.at_level("INFO", "dglx_dist.plan"):
        row = harness.run_system("auto", node["auto"], setup)
    (name, options), = ran
    said = [r.getMessage() for r in caplog.records if r.name == "dglx_dist.plan"]
    assert len(said) == 2 and said[0].startswith(f"plan: strategy '{name}' with options")
    assert f"{name} is predicted fastest to accuracy" in said[1]
    assert name == "distdgl" and options["cache_mb"] == 5.0  # only distdgl takes cache_mb
    assert (row["system"], row["strategy"]) == (f"auto ({name})", name)
    assert row["plan"]["summary"] == said[0] and row["plan"]["why"] == said[1]
    # planned at the benchmark's link: loopback's rate on virtual servers, an emulated link's
    from dglx_dist.bench.planned import link_gbit
    assert said[0].endswith(f"at {link_gbit(setup):g} Gbit/s)") and link_gbit(setup) > 10
    assert link_gbit(dataclasses.replace(setup, network="emulated-1g")) == 1.0
    rows = row["plan"]["rows"]  # every strategy planned (those that take cache_mb), best first
    planned = rows[0]
    assert planned["strategy"] == name and len({r["strategy"] for r in rows}) == len(rows) > 1
    assert [r["rank_s"] for r in rows if r["fits"] != "no"] == sorted(
        r["rank_s"] for r in rows if r["fits"] != "no")  # its epoch to 3 digits, as plan's
    assert abs(planned["epoch_s"] - row["plan"]["predicted_epoch_s"]) <= 0.005 * planned[
        "epoch_s"] + 5e-5
    assert row["note"].startswith("planned: ") and row["note"].endswith("sampled mini-batches")
    monkeypatch.setattr(suite, "run_system", lambda name, runner, setup: {"system": name})
    args = types.SimpleNamespace(strategy_opt=[], repeat=1, systems=None)
    rows = suite.run_all(args, setup, suite.KINDS["graph"])
    assert rows and "auto" not in {r["system"] for r in rows}  # not by default
    args.systems = ["auto"]
    assert [r["system"] for r in suite.run_all(args, setup, suite.KINDS["graph"])] == ["auto"]


def test_auto_plans_the_link_task_among_the_strategies_that_train_it(tmp_path, monkeypatch,
                                                                    caplog):
    """``--task link --systems auto``: the link plan of the setup (its batch of edges,
    negatives and training edges), among the strategies that train links, run as their
    own rows are."""
    from dglx_dist.bench import harness
    from dglx_dist.bench.planned import plan_setup
    from dglx_dist.prepare import resolve_dataset
    from dglx_dist.strategies import STRATEGIES

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # the default unit costs
    ran = []
    monkeypatch.setattr(harness, "run_strategy", lambda name, setup, extra, target: ran.append(
        (name, dict(extra[name]))) or {"note": "n", "epoch_time": 1.0})
    setup = Setup(data=resolve_dataset("cora"), num_classes=7, batch_size=250,
                  run=RunConfig().updated(task={"name": "link", "negatives": 2,
                                                "train_edges": 2000}))
    with caplog.at_level("INFO", "dglx_dist.plan"):
        row = harness.run_system("auto", harness.systems({}, "link")["auto"], setup)
    (name, options), = ran
    assert STRATEGIES.get(name).capabilities.link_prediction and "batch_size" not in options
    work = row["plan"]["summary"]
    assert "s an epoch of link prediction on 2 servers" in work, work
    said = [r.getMessage() for r in caplog.records if r.name == "dglx_dist.plan"]
    assert said[0] == work and "dorylus" not in said[1]
    _, _, plan = plan_setup(setup)
    w = plan.work
    assert (w.task, w.batch_size, w.negatives, w.train_edges) == ("link", 250, 2, 2000)
    assert {r.steps for r in plan.rows} == {4}  # 2000 edges / (250 x 2 ranks)
