"""A console for people, records for programs (issue 80, item 2): the log's filters and
formats (:mod:`dglx_dist.console`), the bar over epochs, the records as ``key=value`` text,
``dglx train``'s metrics sink (JSON lines to ``--metrics-out`` and to a stdout that is not a
terminal, the summary table on one that is), and one in-process run of ``dglx train``.
tests/e2e/test_train_console.py has a 2-rank run's whole console."""
import io
import json
import logging

import pytest

from dglx_dist.console import EpochBar, OnceFilter, RankZeroFilter, console_handler
from dglx_dist.report import epoch_table, json_record, key_values, result_line

RECORDS = [{"epoch": e, "strategy": "distdgl", "epoch_time": 0.05, "steps": 1, "loss": 1.9 - e,
            "phases_max": {"sample": 0.02, "backward+allreduce": 0.004}} for e in range(3)]
RECORDS[1]["val_acc"] = 0.61
RECORDS[2] |= {"val_acc": 0.7, "test_acc": 0.69}


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _said(handler: logging.Handler, records) -> list[str]:
    """What ``handler`` writes for each ``(level, message, args)``."""
    logger = logging.getLogger("dglx_dist.test_console")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        for level, msg, args in records:
            logger.log(level, msg, *args)
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
        logger.setLevel(logging.NOTSET)
    return handler.stream.getvalue().splitlines()


LINES = [(logging.INFO, "partitioning %s", ("cora",)),
         (logging.WARNING, "the test accuracy %.3f is at chance", (0.3,)),
         (logging.WARNING, "the test accuracy %.3f is at chance", (0.3,)),  # a loop's again
         (logging.WARNING, "rank %d: a closer failed", (1,)),
         (logging.ERROR, "it failed", ()),
         (logging.DEBUG, "epoch %d: %s", (0, key_values(RECORDS[0])))]


def test_rank_0_says_each_line_once_at_the_default_verbosity():
    out = _said(console_handler("INFO", stream=io.StringIO(),
                                environ={"RANK": "0", "WORLD_SIZE": "2"}), LINES)
    assert [line.split(" ", 2)[2] for line in out] == [  # after the date and time
        "INFO dglx_dist.test_console: partitioning cora",
        "WARNING dglx_dist.test_console: the test accuracy 0.300 is at chance",
        "WARNING dglx_dist.test_console: rank 1: a closer failed",
        "ERROR dglx_dist.test_console: it failed"]


def test_another_rank_says_only_its_own_news_and_errors():
    out = _said(console_handler("INFO", stream=io.StringIO(),
                                environ={"RANK": "1", "WORLD_SIZE": "2"}), LINES)
    assert [line.split(" ", 2)[2] for line in out] == [
        "WARNING dglx_dist.test_console: rank 1: a closer failed",
        "ERROR dglx_dist.test_console: it failed"]


def test_verbose_brings_back_every_ranks_detail_with_the_rank():
    out = _said(console_handler("DEBUG", verbose=True, stream=io.StringIO(),
                                environ={"RANK": "1", "WORLD_SIZE": "2"}), LINES)
    assert len(out) == 5  # the repeated warning still once
    assert all(" [rank 1] dglx_dist.test_console: " in line for line in out)
    assert "[rank" not in _said(console_handler("DEBUG", verbose=True, stream=io.StringIO(),
                                                environ={}), LINES)[0]  # one process
    assert out[-1].endswith("epoch 0: epoch=0 strategy=distdgl epoch_time=0.05 steps=1 "
                            "loss=1.9 phases_max.sample=0.02 phases_max.backward+allreduce=0.004")


def test_the_filters_alone():
    rank1, once = RankZeroFilter(1), OnceFilter()

    def record(level, msg):
        return logging.LogRecord("dglx_dist.x", level, __file__, 1, msg, (), None)

    assert not rank1.filter(record(logging.WARNING, "cannot lock %s"))
    assert rank1.filter(record(logging.WARNING, "ended frozen rank(s) %s on this host"))
    assert not rank1.filter(record(logging.WARNING, "/home/frank/x.py:3: UserWarning: y"))
    assert RankZeroFilter(1, verbose=True).filter(record(logging.INFO, "x"))
    assert once.filter(record(logging.WARNING, "w")) and not once.filter(record(logging.WARNING, "w"))
    assert once.filter(record(logging.INFO, "i")) and once.filter(record(logging.INFO, "i"))


def test_key_values_is_never_a_python_repr():
    line = key_values({**RECORDS[2], "note": "two words", "none": None, "nan": float("nan")})
    assert "{" not in line and "'" not in line
    assert 'note="two words" none=null nan=NaN' in line and "val_acc=0.7 test_acc=0.69" in line


def test_the_bar_shows_loss_last_val_acc_and_epoch_time_on_a_terminal_only():
    terminal, log_file = _Terminal(), io.StringIO()
    for stream in (terminal, log_file):
        with EpochBar(3, show=True, file=stream) as bar:
            for record in RECORDS[:2] + [{**RECORDS[0], "epoch": 2}]:  # none measured last
                bar.update(record)
    shown = terminal.getvalue().replace("\r", "\n").splitlines()[-1]
    assert "3/3" in shown and "loss=1.9000" in shown and "val_acc=0.6100" in shown
    assert "epoch_time=0.05s" in shown and log_file.getvalue() == ""
    hidden = _Terminal()
    with EpochBar(3, show=False, file=hidden) as bar:  # another rank's, or --no-progress
        bar.update(RECORDS[0])
    assert hidden.getvalue() == ""


def test_the_summary_table_holds_the_evaluated_epochs():
    table = epoch_table(RECORDS).splitlines()
    assert table[0] == "| epoch | epoch_time | steps | loss | val_acc | test_acc |"
    assert [row.split(" | ")[0] for row in table[2:]] == ["| 1", "| 2"]
    assert result_line(RECORDS) == "test accuracy: 0.6900"
    link = [{"epoch": 0, "loss": 0.7, "val_auc": 0.8}, {"test_auc": 0.81, "test_mrr": 0.3}]
    assert "| epoch | loss | val_auc |" in epoch_table(link)
    assert result_line(link) == "test_auc 0.8100, test_mrr 0.3000"


@pytest.mark.parametrize("terminal", [False, True])
def test_the_sink_writes_json_lines_off_a_terminal_and_the_table_on_one(tmp_path, terminal):
    from dglx_dist.cli.train import _MetricsSink

    stream = _Terminal() if terminal else io.StringIO()
    sink = _MetricsSink(tmp_path / "m.jsonl", stream=stream)
    for record in RECORDS:
        sink.write(json_record(record) + "\n")
    sink.summarize()
    sink.close()
    lines = (tmp_path / "m.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == RECORDS  # one object per epoch
    out = stream.getvalue()
    if terminal:
        assert "{" not in out and out.endswith("\n\ntest accuracy: 0.6900\n")
    else:
        assert out.splitlines() == lines
    forced = _Terminal()  # --json: the lines on a terminal too
    sink = _MetricsSink(None, json_stdout=True, stream=forced)
    sink.write(json_record(RECORDS[0]) + "\n")
    sink.summarize()
    assert json.loads(forced.getvalue()) == RECORDS[0]


def test_metrics_file_is_the_same_flag_as_metrics_out():
    from dglx_dist.cli import build_parser
    from dglx_dist.cli_flags import from_args
    from dglx_dist.config import RunConfig

    for flag in ("--metrics-out", "--metrics-file"):
        args = build_parser().parse_args(["train", flag, "m.jsonl", "--json"])
        job = from_args(RunConfig, args).job
        assert str(job.metrics_file) == "m.jsonl" and job.json


def _one_rank(monkeypatch) -> None:
    """A job of one rank in this process, meeting at a free port (a single process's
    default, 29500, may be another job's)."""
    from dglx_dist.runtime.env import free_local_port

    for key, value in {"RANK": 0, "WORLD_SIZE": 1, "LOCAL_RANK": 0, "LOCAL_WORLD_SIZE": 1,
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": free_local_port()}.items():
        monkeypatch.setenv(key, str(value))


def test_an_in_process_run_writes_one_record_per_epoch_and_logs_no_dicts(tmp_path, monkeypatch,
                                                                        caplog):
    """``dglx train`` in this process, one rank: ``--metrics-out`` holds one JSON object per
    epoch; the lines logged at INFO and up are few and hold no Python dict; each epoch's
    record is in a DEBUG line (``-v``) as ``key=value`` text."""
    from dglx_dist.cli import main

    _one_rank(monkeypatch)
    with caplog.at_level(logging.DEBUG, logger="dglx_dist"):
        assert main(["train", "--data", "cora", "--epochs", "3", "--eval-every", "2",
                     "--device", "cpu", "--no-progress", "--cache-dir", str(tmp_path / "cache"),
                     "--metrics-out", str(tmp_path / "m.jsonl")]) == 0
    records = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == [0, 1, 2] and "test_acc" in records[-1]
    said = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(said) <= 5 and not [r for r in said if "{'" in r.getMessage()], caplog.text
    detail = [r.getMessage() for r in caplog.records if r.name == "dglx_dist.trainer"
              and r.levelno == logging.DEBUG]
    assert len(detail) == 3 and detail[1].startswith("epoch 1: epoch=1 strategy=distdgl ")
    assert "val_acc=" in detail[1] and "{" not in "".join(detail)


def test_a_resumed_run_with_nothing_left_to_train_says_so(tmp_path, monkeypatch, caplog):
    """``--resume --epochs 1`` on a checkpoint of epoch 2 trained nothing and exited 0 without
    a word (hostile re-pass of issue 77); now it says why, and exits 0."""
    from dglx_dist.cli import main

    _one_rank(monkeypatch)
    common = ["train", "--data", "cora", "--device", "cpu", "--no-progress", "--eval-every",
              "0", "--cache-dir", str(tmp_path / "cache"), "--checkpoint-dir",
              str(tmp_path / "ck")]
    assert main(common + ["--epochs", "2"]) == 0
    with caplog.at_level(logging.WARNING, logger="dglx_dist"):
        assert main(common + ["--epochs", "1", "--resume"]) == 0
    said = [r.getMessage() for r in caplog.records if "nothing to train" in r.getMessage()]
    assert len(said) == 1 and "after epoch 2" in said[0], caplog.text


def test_the_link_task_writes_its_records_and_their_detail_too(tmp_path, monkeypatch, caplog):
    """``dglx train --task link``, one rank: a record per epoch, then the test metrics."""
    from dglx_dist.cli import main

    _one_rank(monkeypatch)
    with caplog.at_level(logging.DEBUG, logger="dglx_dist"):
        assert main(["train", "--task", "link", "--data", "cora", "--epochs", "2",
                     "--train-edges", "1000", "--eval-pairs", "200", "--device", "cpu",
                     "--no-progress", "--cache-dir", str(tmp_path / "cache"),
                     "--metrics-out", str(tmp_path / "m.jsonl")]) == 0
    records = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r.get("epoch") for r in records] == [0, 1, None] and "test_auc" in records[-1]
    detail = [r.getMessage() for r in caplog.records if r.name == "dglx_dist.tasks.link"
              and r.getMessage().startswith("epoch ")]
    assert len(detail) == 2 and "task=link epoch=1 " in detail[1] and "val_auc=" in detail[1]
    assert not [r for r in caplog.records if r.name.startswith("dglx_dist")
                and "{'" in r.getMessage()]  # (torch's c10d logs a dict at DEBUG)


@pytest.mark.parametrize("rank, quiet", [("0", False), ("1", True)])
def test_under_the_runner_another_rank_keeps_the_packages_info_to_itself(rank, quiet):
    """``python -m dglx_dist.run``: a script logging at INFO gets the package's lines below
    WARNING from rank 0 only; the logger is as it was afterwards."""
    from dglx_dist.console import quiet_other_ranks

    logger = logging.getLogger("dglx_dist")
    with quiet_other_ranks({"RANK": rank, "WORLD_SIZE": "2"}):
        assert logger.level == (logging.WARNING if quiet else logging.NOTSET)
    assert logger.level == logging.NOTSET
