"""Executors ("local" worker processes, "aws" through boto3) and the task controller."""
import concurrent.futures
import contextlib
import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from dglx_dist.offload import (EXECUTORS, InvocationError, TaskController, TaskFailedError,
                               WorkerLost)
from dglx_dist.offload.tensor_fn.handler import handle
from dglx_dist.offload.tensor_fn.ops import OPS
from dglx_dist.offload.tensor_fn.payload import PayloadError, decode, encode
from dglx_dist.testing.procs import live_children
from tests.doubles.invoke_api import serve_in_subprocess

ROOT = Path(__file__).resolve().parents[2]


def _torch_or_dgl(proc) -> list[str]:
    """The files of torch's or DGL's own libraries that ``proc`` has mapped. Judged by where
    torch is installed and by library name, not by a substring of the path: on a machine
    whose virtualenv lives under /opt/torch, numpy's libraries have "torch" in their path."""
    torch_dir = str(Path(importlib.util.find_spec("torch").origin).parent) + os.sep
    return [m.path for m in proc.memory_maps()
            if m.path.startswith(torch_dir) or re.match(r"lib(torch|c10|dgl)",
                                                         Path(m.path).name)]


def _tasks(n_tasks=4, rows=40, fin=12, fout=6):
    """(key, header, arrays) for a mix of the three ops."""
    rng = np.random.default_rng(0)
    out = []
    for i in range(n_tasks):
        base = {"A": rng.standard_normal((rows, fin)).astype(np.float32),
                "W": rng.standard_normal((fin, fout)).astype(np.float32),
                "b": rng.standard_normal(fout).astype(np.float32)}
        ids = np.arange(i * rows, (i + 1) * rows, dtype=np.int64)
        kind = i % 3
        if kind == 0:
            out.append((("av", i), {"op": "av", "act": "relu", "dropout": 0.5, "seed": i,
                                    "train": True}, {**base, "ids": ids}))
        elif kind == 1:
            dh = rng.standard_normal((rows, fout)).astype(np.float32)
            out.append((("grad", i), {"op": "av_grad", "act": "relu", "dropout": 0.5,
                                      "seed": i, "need_dA": True}, {**base, "ids": ids, "dH": dh}))
        else:
            out.append((("loss", i), {"op": "av_loss", "need_dA": True},
                        {**base, "labels": rng.integers(0, fout, rows).astype(np.int64),
                         "weight": rng.random(rows).astype(np.float32)}))
    return out


def _assert_same(response, reference):
    header, arrays = decode(response) if isinstance(response, bytes) else response
    ref_header, ref = decode(reference)
    assert header == ref_header and list(arrays) == list(ref)
    for name in ref:
        np.testing.assert_allclose(arrays[name], ref[name], rtol=1e-5, atol=1e-5, err_msg=name)


def _wait_for(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def _run_controller(executor, tasks, **kwargs):
    ctl = TaskController(executor, **{"timeout_s": 20.0, **kwargs})
    for key, header, arrays in tasks:
        ctl.submit(key, header, arrays)
    results = ctl.drain(timeout=30)
    keys = [r[0] for r in results]
    assert sorted(keys) == sorted(k for k, _, _ in tasks)  # each key exactly once
    by_key = {k: (h, a) for k, h, a in results}
    for key, header, arrays in tasks:
        _assert_same(by_key[key], handle(encode(header, arrays)))
    return ctl


def _built(name, stack):
    """Executor ``name`` with its default options; "aws" against the fake Invoke API."""
    if name == "aws":
        return _aws(stack.enter_context(serve_in_subprocess("dglx-tensor-fn")))
    return EXECUTORS.build(name)


@pytest.mark.parametrize("name", EXECUTORS.names())
def test_every_executor_keeps_the_contract(name):
    """What the controller relies on, for every executor (entry-point plug-ins too): results
    equal the in-process handler's, a rejected request is an InvocationError, stats carry the
    counters, close is idempotent and a closed executor refuses work."""
    tasks = _tasks(6)
    with contextlib.ExitStack() as stack:
        ex = stack.enter_context(_built(name, stack))
        assert ex.capacity >= 1
        _run_controller(ex, tasks).close()
        with pytest.raises(InvocationError, match="magic"):
            ex.invoke(b"garbage!" * 4).result(timeout=30)
        stats = ex.stats()
        assert stats["invocations"] >= len(tasks) and stats["errors"] >= 1
        assert stats["capacity"] == ex.capacity and stats["gb_s"] >= 0
        ex.close()
    ex.close()
    with pytest.raises(RuntimeError, match="closed"):
        ex.invoke(encode(*tasks[0][1:]))


def test_local_results_equal_in_process_handle():
    tasks = _tasks(6)
    with EXECUTORS.build("local", workers=3) as ex:
        requests = [encode(h, a) for _, h, a in tasks]
        futures = [ex.invoke(r) for r in requests]
        for future, request in zip(futures, requests):
            _assert_same(future.result(timeout=30), handle(request))
        stats = ex.stats()
    assert stats["invocations"] == 6 and stats["worker_restarts"] == 0
    assert stats["bytes_sent"] == sum(len(r) for r in requests)
    assert stats["busy_s"] > 0 and stats["memory_mb"] == 512 and stats["capacity"] == 3


def test_local_workers_are_numpy_only_single_thread_processes():
    with EXECUTORS.build("local", workers=2) as ex:
        _, header, arrays = _tasks(1)[0]
        ex.invoke(encode(header, arrays)).result(timeout=30)
        pids = ex.worker_pids()
        assert len(pids) == 2 and os.getpid() not in pids
        for pid in pids:
            proc = psutil.Process(pid)
            assert proc.num_threads() == 1
            assert proc.environ()["OPENBLAS_NUM_THREADS"] == "1"
            assert not _torch_or_dgl(proc)
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_crash_is_worker_lost_and_the_controller_relaunches():
    tasks = _tasks(3)
    with EXECUTORS.build("faulty-local", workers=2, crash_on="0") as ex:
        lost = ex.invoke(encode(*tasks[0][1:]))
        with pytest.raises(WorkerLost, match="died mid-invocation"):
            lost.result(timeout=30)
        ctl = _run_controller(ex, tasks, concurrency=2)
        assert ex.stats()["worker_restarts"] == 1
    assert ctl.stats()["relaunches"] == 0  # invocation #0 was the direct one above

    with EXECUTORS.build("faulty-local", workers=2, crash_on=(0, 2)) as ex:
        ctl = _run_controller(ex, tasks)
        stats = ctl.stats()
        assert stats["worker_lost"] == 2 and stats["relaunches"] == 2
        assert stats["invocations"] == 5 and stats["results"] == 3
        assert ex.stats()["worker_restarts"] == 2


def test_hung_invocation_is_aborted_and_relaunched():
    tasks = _tasks(2)
    with EXECUTORS.build("faulty-local", workers=2, hang_on=(1,), hang_s=60) as ex:
        start = time.monotonic()
        ctl = _run_controller(ex, tasks, timeout_s=1.0)
        assert time.monotonic() - start < 20
        stats = ctl.stats()
        assert stats["timeouts"] == 1 and stats["relaunches"] == 1
        _wait_for(lambda: ex.stats()["worker_restarts"] == 1)  # the killed one is replaced


def test_faulty_local_is_the_local_executor_with_its_own_workers():
    """The test plug-in (tests/plugins) subclasses the local executor through its one seam,
    the worker command; its options are checked like any plug-in's."""
    from dglx_test_plugins.faulty import FaultyLocalExecutor

    from dglx_dist.offload.local import LocalExecutor

    assert issubclass(EXECUTORS.get("faulty-local"), LocalExecutor)
    assert EXECUTORS.get("faulty-local") is FaultyLocalExecutor
    with pytest.raises(ValueError, match="latency_s must be >= 0"):
        EXECUTORS.build("faulty-local", latency_s=-1)
    with pytest.raises(ValueError, match="unknown option"):
        EXECUTORS.build("local", crash_on=(0,))
    with EXECUTORS.build("faulty-local", workers=1, latency_s=0.3) as ex:
        assert "faulty_worker" in ex.worker_command()[2]
        _, header, arrays = _tasks(1)[0]
        start = time.monotonic()
        ex.invoke(encode(header, arrays)).result(timeout=30)
        assert time.monotonic() - start >= 0.3


def test_too_many_failures_name_the_key():
    with EXECUTORS.build("faulty-local", workers=1, crash_on=(0, 1)) as ex:
        ctl = TaskController(ex, timeout_s=20, max_attempts=2)
        key, header, arrays = _tasks(1)[0]
        ctl.submit(key, header, arrays)
        with pytest.raises(TaskFailedError, match=r"task \('av', 0\) failed all 2 attempts: "
                                                  r"attempt 1: .*died.*; attempt 2: .*died"):
            ctl.drain(timeout=30)


def test_bad_payload_is_an_invocation_error_and_the_worker_survives():
    with EXECUTORS.build("local", workers=1) as ex:
        pids = ex.worker_pids()
        with pytest.raises(InvocationError, match="magic: got b'garb', expected b'DGLX'"):
            ex.invoke(b"garbage!" * 4).result(timeout=30)
        bad = encode({"op": "av", "act": "relu"}, {"A": np.zeros((2, 3), np.float32)})
        with pytest.raises(InvocationError, match=r"missing input array\(s\) \['W', 'b', 'ids'\]"):
            ex.invoke(bad).result(timeout=30)
        _, header, arrays = _tasks(1)[0]
        ex.invoke(encode(header, arrays)).result(timeout=30)
        assert ex.worker_pids() == pids and ex.stats()["errors"] == 2

        ctl = TaskController(ex, timeout_s=20)
        ctl.submit("bad", {"op": "av", "act": "relu"}, {"A": np.zeros((2, 3), np.float32)})
        with pytest.raises(InvocationError, match=r"task 'bad' \(attempt 1\)"):
            ctl.drain(timeout=30)
        with pytest.raises(PayloadError, match="expected one of"):
            ctl.submit("x", {"op": "nope"}, {})


def test_fault_fields_of_a_request_do_nothing_in_the_local_executor():
    """The production worker has no fault injection: a request carrying the fields the test
    plug-ins' faulty-local executor acts on (_crash, _delay_s) runs as any other."""
    _, header, arrays = _tasks(1)[0]
    request = encode({**header, "_crash": True, "_delay_s": 60}, arrays)
    with EXECUTORS.build("local", workers=1) as ex:
        pids = ex.worker_pids()
        _assert_same(ex.invoke(request).result(timeout=30), handle(request))
        assert ex.worker_pids() == pids and ex.stats()["worker_restarts"] == 0


def test_close_fails_pending_work_and_leaves_no_process():
    ex = EXECUTORS.build("faulty-local", workers=1, hang_on=(0,), hang_s=60)
    ex.start()
    _, header, arrays = _tasks(1)[0]
    running = ex.invoke(encode(header, arrays))
    queued = ex.invoke(encode(header, arrays))
    time.sleep(0.2)
    pids = ex.worker_pids()
    start = time.monotonic()
    ex.close()
    ex.close()  # idempotent
    assert time.monotonic() - start < 10
    for future in (running, queued):
        with pytest.raises(WorkerLost, match="closed"):
            future.result(timeout=1)
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                   for p in pids)
    with pytest.raises(RuntimeError, match="closed"):
        ex.invoke(b"")


def test_abort_of_a_queued_invocation():
    with EXECUTORS.build("faulty-local", workers=1, hang_on=(0,), hang_s=60) as ex:
        _, header, arrays = _tasks(1)[0]
        first = ex.invoke(encode(header, arrays))
        second = ex.invoke(encode(header, arrays))
        _wait_for(first.running)
        ex.abort(second)
        with pytest.raises(WorkerLost, match="aborted; it had not started"):
            second.result(timeout=1)
        ex.abort(first)
        with pytest.raises(WorkerLost, match="aborted; its worker"):
            first.result(timeout=1)
        assert ex.invoke(encode(header, arrays)).result(timeout=30)


class _ManualExecutor:
    """Futures the test completes by hand; abort() records but does not fail them."""

    def __init__(self, capacity):
        self.capacity = capacity
        self.futures, self.aborted = [], []

    def invoke(self, request):
        future = concurrent.futures.Future()
        self.futures.append((future, request))
        return future

    def abort(self, future):
        self.aborted.append(future)


def test_late_answer_of_a_superseded_attempt_is_dropped():
    ex = _ManualExecutor(capacity=4)
    key, header, arrays = _tasks(1)[0]
    ctl = TaskController(ex, timeout_s=0.05)
    ctl.submit(key, header, arrays)
    time.sleep(0.1)
    assert ctl.poll() == [] and ctl.stats()["timeouts"] == 1 and len(ex.futures) == 2
    (old, request), (new, _) = ex.futures
    assert ex.aborted == [old]
    old.set_result(handle(request))  # the aborted attempt answers after all
    new.set_result(handle(request))
    assert ctl.wait_any(1.0) == 1 and ctl.pending == 1  # ready, left for poll() to collect
    results = ctl.poll()
    assert [r[0] for r in results] == [key] and ctl.pending == 0
    assert ctl.wait_any(5.0) == 0 and ctl.poll() == []  # nothing in flight: returns at once
    ctl.submit(key, header, arrays)  # the same key may be submitted again once collected
    assert ctl.pending == 1 and ctl.in_flight == 1
    with pytest.raises(ValueError, match="already pending"):
        ctl.submit(key, header, arrays)
    ctl.close()
    assert ctl.pending == 0


def test_concurrency_cap_and_autotuner():
    ex = _ManualExecutor(capacity=6)
    ctl = TaskController(ex, timeout_s=60, concurrency=3)
    for key, header, arrays in _tasks(8):
        ctl.submit(key, header, arrays)
    assert (ctl.in_flight, ctl.queued, ctl.concurrency) == (3, 5, 3)
    assert ctl.wait_any(0.05) == 0  # timed out waiting: nothing finished
    for length in (10, 12, 15, 20):  # the graph server's queue keeps growing
        ctl.observe_queue(length)
    assert ctl.concurrency == 2
    for length in (20, 14, 9, 6):  # and now it drains quickly
        ctl.observe_queue(length)
    assert ctl.concurrency == 3
    for _ in range(10):
        for length in (8, 4, 2, 1):
            ctl.observe_queue(length)
    assert ctl.concurrency == 6 and ctl.in_flight == 6  # capped at the executor's capacity
    for _ in range(10):
        for length in (1, 2, 3, 4):
            ctl.observe_queue(length)
    assert ctl.concurrency == 1
    assert ctl.stats()["concurrency_changes"] == 1 + 1 + 3 + 5
    assert TaskController(ex, timeout_s=1, concurrency=500).concurrency == 6
    with pytest.raises(ValueError, match="queue length"):
        ctl.observe_queue(-1)
    ctl.close()


def _aws(url, **options):
    return EXECUTORS.build("aws", endpoint_url=url, concurrency=4, timeout_s=30, **options)


def test_aws_executor_through_boto3_matches_local():
    tasks = _tasks(3)
    requests = [encode(h, a) for _, h, a in tasks]
    with serve_in_subprocess("dglx-tensor-fn") as url:
        (server,) = live_children()
        assert not _torch_or_dgl(server)  # numpy only
        with _aws(url) as ex:
            for request, future in zip(requests, [ex.invoke(r) for r in requests]):
                _assert_same(future.result(timeout=30), handle(request))
            assert ex.stats()["invocations"] == 3
            with pytest.raises(InvocationError, match=r"PayloadError: magic: got b'junk'"):
                ex.invoke(b"junk" * 10).result(timeout=30)
            ctl = _run_controller(ex, tasks)
            assert ctl.stats()["results"] == 3
        with _aws(url, function_name="other-fn") as ex:
            with pytest.raises(InvocationError, match="ResourceNotFoundException.*other-fn"):
                ex.invoke(requests[0]).result(timeout=30)


def test_aws_chunking_with_a_tiny_payload_limit():
    tasks = _tasks(3, rows=50)
    with serve_in_subprocess() as url:
        with _aws(url, max_payload_bytes=3000) as ex:
            requests = [encode(h, a) for _, h, a in tasks]
            for request in requests:
                _assert_same(ex.invoke(request).result(timeout=30), handle(request))
            stats = ex.stats()
            assert stats["invocations"] > 2 * 3
            assert stats["bytes_sent"] / stats["invocations"] <= 3000
        with _aws(url, max_payload_bytes=500) as ex:
            with pytest.raises(InvocationError, match="one row does not fit"):
                ex.invoke(requests[1]).result(timeout=30)


def test_aws_unreachable_endpoint_is_worker_lost():
    with serve_in_subprocess() as url:
        pass  # the server is gone: nothing listens on its port now
    with _aws(url, connect_timeout_s=2) as ex:
        with pytest.raises(WorkerLost, match="unreachable"):
            ex.invoke(encode(*_tasks(1)[0][1:])).result(timeout=30)


def test_lambda_zip_runs_without_dglx_dist(tmp_path):
    zip_path = tmp_path / "fn.zip"
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "package_lambda.py"),
                          "--out", str(zip_path)], capture_output=True, text=True, check=True)
    assert str(zip_path) in out.stdout and "aws lambda create-function" in out.stdout
    assert "--handler dglx_dist.offload.tensor_fn.handler.lambda_handler" in out.stdout
    _, header, arrays = _tasks(1)[0]
    request = encode(header, arrays)
    code = ("import sys, base64; sys.path.insert(0, sys.argv[1]); "
            "from dglx_dist.offload.tensor_fn.handler import lambda_handler; "
            "r = lambda_handler({'payload': base64.b64encode(sys.stdin.buffer.read()).decode()},"
            " None); assert sys.modules['dglx_dist'].__file__.startswith(sys.argv[1]); "
            "assert 'torch' not in sys.modules and 'dgl' not in sys.modules; "
            "sys.stdout.buffer.write(base64.b64decode(r['payload']))")
    run = subprocess.run([sys.executable, "-I", "-c", code, str(zip_path)], input=request,
                         capture_output=True, check=True, cwd=tmp_path)
    _assert_same(run.stdout, handle(request))
    listing = ("import sys; sys.path.insert(0, sys.argv[1]); "
               "from dglx_dist.offload.tensor_fn.ops import OPS; print(*sorted(OPS))")
    tasks = subprocess.run([sys.executable, "-I", "-c", listing, str(zip_path)],
                           capture_output=True, text=True, check=True, cwd=tmp_path)
    assert tasks.stdout.split() == sorted(OPS)  # every conv folder's tasks made it into the zip
