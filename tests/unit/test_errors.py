"""Every error dglx_dist raises is a DglxError, and a failure is one line from one rank."""
from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import json
import logging
import pathlib
import pkgutil

import pytest
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

import dglx_dist
from dglx_dist.cli import main
from dglx_dist.errors import DglxError, InvalidValueError, UnknownNameError
from dglx_dist.runtime.comm import PeerError
from dglx_dist.runtime.env import launch_position
from dglx_dist.runtime.failure import (mark_in_session, one_line, report, reporting_rank,
                                       same_on_every_rank)

PACKAGE = pathlib.Path(dglx_dist.__file__).parent
# The numpy-only code a Lambda runs (its errors reach the job wrapped in InvocationError, a
# DglxError) keeps builtin errors: tensor_fn, and the tensor tasks in the conv folders.
OWN_RULES = ("offload/tensor_fn/", "convs/ops_base.py")
TASK_MODULES = "dglx_dist.convs.ops_base", "dglx_dist.offload.tensor_fn"


def _numpy_only(rel: str) -> bool:
    return rel.startswith(OWN_RULES) or (rel.startswith("convs/") and rel.endswith("/ops.py"))
BUILTIN_ERRORS = {name for name, obj in vars(builtins).items()
                  if inspect.isclass(obj) and issubclass(obj, Exception)}


def _raises_of_builtins(path: pathlib.Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            node.body = []  # AttributeError there is Python's attribute protocol
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and \
                isinstance(node.exc.func, ast.Name) and node.exc.func.id in BUILTIN_ERRORS:
            yield f"{path.relative_to(PACKAGE)}:{node.lineno} raises {node.exc.func.id}"


def test_the_package_raises_no_builtin_error():
    found = [hit for path in sorted(PACKAGE.rglob("*.py"))
             if not _numpy_only(path.relative_to(PACKAGE).as_posix())
             for hit in _raises_of_builtins(path)]
    assert found == []


@pytest.mark.dgl
def test_every_exception_class_of_the_package_is_a_dglx_error():
    classes = []
    for info in pkgutil.walk_packages([str(PACKAGE)], "dglx_dist."):
        if info.name.startswith((*TASK_MODULES, "dglx_dist.__main__")) or \
                (info.name.startswith("dglx_dist.convs.") and info.name.endswith(".ops")):
            continue
        module = importlib.import_module(info.name)
        classes += [obj for obj in vars(module).values() if inspect.isclass(obj)
                    and issubclass(obj, BaseException) and obj.__module__ == info.name]
    assert len(classes) > 15
    assert [c for c in classes if not issubclass(c, DglxError)] == []


def test_errors_keep_their_builtin_kind():
    with pytest.raises(ValueError):
        raise InvalidValueError("x")
    with pytest.raises(KeyError):
        raise UnknownNameError("no such name 'a'")
    assert str(UnknownNameError("no such name 'a'")) == "no such name 'a'"  # not repr-quoted


def _peer_error(dead):
    return PeerError("rank died", dead, "all_reduce")


@pytest.mark.parametrize("exc, rank, expected", [
    (InvalidValueError("bad --x"), 1, 0),          # before the process group: rank 0
    (_peer_error([1]), 2, 0),                      # a dead rank 1: rank 0 tells
    (_peer_error([0]), 2, 1),                      # a dead rank 0: the lowest live rank
    (_peer_error([0, 1]), 3, 2),
])
def test_reporting_rank(exc, rank, expected):
    assert reporting_rank(exc, rank, 4) == expected


def test_a_rank_outside_its_world_reports_its_own_error(monkeypatch, tmp_path, caplog, capsys):
    """RANK=3 with WORLD_SIZE=2: no rank 0 speaks for it, so it prints its own line (hostile
    re-pass of issue 77: ``dglx train`` exited 2 without a word)."""
    assert reporting_rank(InvalidValueError("x"), 3, 2) == 3
    _as_rank(monkeypatch, tmp_path, 3)
    with caplog.at_level(logging.INFO):
        assert main(["train", "--data", "cora"]) == 2
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
        "EnvError: rank 3 is outside [0, world_size=2)"]
    with pytest.raises(SystemExit):
        main(["train", "--hidden", "0"])
    assert "argument --hidden: '0'" in capsys.readouterr().err


def test_refused_input_is_reported_by_the_first_refusing_rank():
    exc = InvalidValueError("batch_size 0")
    exc.refused_on = (2, 3)
    assert reporting_rank(exc, 0, 4) == 2
    assert one_line(exc).endswith("(refused on ranks [2, 3])")


def test_an_error_inside_a_session_is_reported_where_it_happened():
    exc = InvalidValueError("rank-local")
    mark_in_session(exc)
    assert [reporting_rank(exc, r, 4) for r in range(4)] == [0, 1, 2, 3]


def test_an_error_every_rank_raises_alike_is_reported_by_rank_0():
    exc = same_on_every_rank(InvalidValueError("no training nodes"))
    mark_in_session(exc)
    assert [reporting_rank(exc, r, 4) for r in range(4)] == [0, 0, 0, 0]


def _raise_here():
    raise InvalidValueError("from a user's script\n  over two lines")


def test_one_line_names_the_users_frame():
    with pytest.raises(InvalidValueError) as info:
        _raise_here()
    line = one_line(info.value)
    assert "\n" not in line
    assert line.startswith("InvalidValueError: from a user's script over two lines (at ")
    assert line.endswith(f"test_errors.py:{_raise_here.__code__.co_firstlineno + 1})")


def test_torchruns_summary_reads_the_error_file(tmp_path):
    error_file = tmp_path / "error.json"
    line = report(InvalidValueError("bad"), 1, 2, str(error_file))
    assert line is None  # rank 0 prints it
    failure = ProcessFailure(local_rank=1, pid=1, exitcode=2, error_file=str(error_file))
    summary = ChildFailedError("job", {1: failure}).format_msg()
    assert "traceback : InvalidValueError: bad\n" in summary, summary


def test_launch_position_reads_leniently():
    assert launch_position({}) == (0, 1, None)
    assert launch_position({"RANK": "3", "WORLD_SIZE": "4", "TORCHELASTIC_ERROR_FILE": "/e"}) \
        == (3, 4, "/e")
    assert launch_position({"RANK": "x", "WORLD_SIZE": "4", "SLURM_PROCID": "1",
                            "SLURM_NTASKS": "2(x1)"}) == (1, 2, None)


def _as_rank(monkeypatch, tmp_path, rank):
    error_file = tmp_path / f"error{rank}.json"
    for key, value in {"RANK": str(rank), "WORLD_SIZE": "2",
                       "TORCHELASTIC_ERROR_FILE": str(error_file)}.items():
        monkeypatch.setenv(key, value)
    return error_file


@pytest.mark.parametrize("rank", [0, 1])
def test_cli_usage_error_is_printed_by_rank_0_only(monkeypatch, tmp_path, capsys, rank):
    error_file = _as_rank(monkeypatch, tmp_path, rank)
    with pytest.raises(SystemExit) as exc:
        main(["train", "--hidden", "0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert ("argument --hidden: '0'" in err) == (rank == 0), err
    assert "argument --hidden" in json.loads(error_file.read_text())["message"]["message"]


@pytest.mark.dgl
@pytest.mark.parametrize("rank", [0, 1])
def test_cli_error_is_one_line_on_rank_0_only(monkeypatch, tmp_path, caplog, rank):
    error_file = _as_rank(monkeypatch, tmp_path, rank)
    with caplog.at_level(logging.INFO):
        assert main(["train", "--data", "nosuch"]) == 2
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in errors] == (
        ["DatasetFormatError: dataset 'nosuch' is neither a directory nor a built-in dataset "
         "(cora)"] if rank == 0 else [])
    assert all(r.exc_info is None for r in errors)  # the traceback only with --debug
    assert "nosuch" in json.loads(error_file.read_text())["message"]["message"]


@pytest.mark.dgl
def test_cli_debug_adds_the_traceback(caplog):
    assert main(["train", "--data", "nosuch", "--debug"]) == 2
    [record] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert record.exc_info is not None


def test_a_rank_that_does_not_report_leaves_after_the_reporting_rank_has_left():
    """torchrun names as root cause the earliest dated of the processes failed when it looks,
    and stops those still running: a rank that only saw another's failure waits in the
    session's store until the reporting rank says it is leaving (a loaded machine may take
    more than a second to tear that rank down), then goes."""
    import threading
    import time

    import torch.distributed as dist

    from dglx_dist.runtime.failure import ASIDE_S, has_left, step_aside

    store = dist.HashStore()
    left_at: list[float] = []

    def reporter():
        time.sleep(1.5)  # longer than the second a rank stepped aside before
        left_at.append(time.monotonic())
        has_left(store, 1)

    thread = threading.Thread(target=reporter)
    thread.start()
    step_aside(store, reporter=1)
    done = time.monotonic()
    thread.join()
    assert left_at and done >= left_at[0] + ASIDE_S  # and its interpreter's end after
    start = time.monotonic()
    step_aside(store, reporter=1)  # it has left: no wait in the store
    assert time.monotonic() - start < ASIDE_S + 1.0
