"""`dglx train` refuses bad arguments before any process group or partitioning work: one line
naming the flag or directory and what was expected, exit status 2."""
import re

import pytest

from dglx_dist.cli import main
from dglx_dist.data import write_dataset
from dglx_dist.partition import partition_dataset


@pytest.mark.parametrize("flag,value,expected", [
    ("--epochs", "-3", "a finite int >= 1"),
    ("--hidden", "0", "a finite int >= 1"),
    ("--lr", "nan", "a finite float > 0"),
    ("--lr", "1e400", "a finite float > 0"),
    ("--dropout", "2", "a finite float >= 0 and < 1"),
    ("--weight-decay", "-1", "a finite float >= 0"),
    ("--eval-every", "-1", "a finite int >= 0"),
])
def test_numbers_out_of_range_are_refused(capsys, flag, value, expected):
    with pytest.raises(SystemExit) as exc:
        main(["train", flag, value])
    assert exc.value.code == 2
    assert f"argument {flag}: '{value}': expected {expected}" in capsys.readouterr().err


def test_partitions_of_another_dataset_are_refused(tiny, tmp_path, caplog):
    data = write_dataset(tiny, tmp_path / "data")
    other = write_dataset(tiny.replace(extra={"name": "other"}), tmp_path / "other")
    partition_dataset(data, tmp_path / "parts", "hash", 2)
    assert main(["train", "--partitions", str(tmp_path / "parts"), "--data", str(other)]) == 2
    assert "was not made from --data" in caplog.text and "provenance" in caplog.text
    assert main(["train", "--partitions", str(tmp_path / "parts"), "--data", "cora"]) == 2
    assert "num_nodes is 60, the dataset's 2708" in caplog.text


@pytest.mark.parametrize("name,option,value,expected", [
    ("p3", "cache_mb", "-1", "option 'cache_mb': -1.0; expected a value >= 0"),
    ("p3", "cache_mb", "inf", "option 'cache_mb': expected a finite number, got 'inf'"),
    ("dorylus", "invocation_timeout", "0", "option 'invocation_timeout': 0.0; expected a "
                                          "value > 0"),
    ("dorylus", "invocation_timeout", "nan", "expected a finite number, got 'nan'"),
])
def test_strategy_options_out_of_range_are_refused(caplog, name, option, value, expected):
    """Checked when the strategy is built, before any process group exists."""
    assert main(["train", "--strategy", name, "--strategy-opt", f"{option}={value}"]) == 2
    assert expected in caplog.text


@pytest.mark.parametrize("value", ["nan", "inf", "1e300", "0"])
def test_a_timeout_that_is_not_a_number_of_seconds_is_refused(value):
    from dglx_dist.errors import DglxError
    from dglx_dist.runtime.env import read_env

    import re

    with pytest.raises(DglxError, match=re.escape(f"DGLX_TIMEOUT={float(value)}; expected")):
        read_env({"DGLX_TIMEOUT": value})


def test_an_unknown_dataset_is_refused_before_anything_starts(caplog):
    assert main(["train", "--data", "no-such-graph"]) == 2
    assert "'no-such-graph' is neither a directory nor a built-in dataset (cora" in caplog.text


def test_partitions_that_do_not_fit_the_strategy_are_refused(tiny, tmp_path, caplog):
    data = write_dataset(tiny, tmp_path / "data")
    partition_dataset(data, tmp_path / "parts", "hash", 1)  # rows; p3 needs column slices
    assert main(["train", "--strategy", "p3", "--partitions", str(tmp_path / "parts")]) == 2
    assert "stores features as rows (partitioner 'hash'); strategy 'p3' needs columns" \
        in caplog.text



def test_a_job_whose_memory_estimate_does_not_fit_is_refused_before_it_starts(tmp_path, caplog,
                                                                            capsys):
    """`--memory-limit 1000000` (1 MB) is below any strategy's base: one ERROR line with the
    estimate and the limit, exit status 2, nothing partitioned and no metrics (the default
    limit, the memory available, trains Cora: tests/e2e/test_train.py)."""
    cache = tmp_path / "cache"
    assert main(["train", "--data", "cora", "--memory-limit", "1000000",
                 "--cache-dir", str(cache)]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "\n" not in errors[0], errors
    assert re.search(r"InsufficientMemoryError: training with strategy 'distdgl' on 2,708 "
                     r"nodes and 10,556 edges \(about [\d,]+ MiB a rank .* x 1 rank on this "
                     r"machine\) needs about [\d,]+ MiB at its peak but only 1 MiB is allowed; "
                     r".*or set --memory-limit BYTES", errors[0]), errors[0]
    assert not cache.exists() and capsys.readouterr().out == ""
    assert main(["train", "--task", "link", "--memory-limit", "1000000"]) == 2
    assert "--memory-limit is not supported with --task link" in caplog.text
