"""A rank dying in the middle of training: every survivor stops within the timeout with an error
naming the dead rank and the operation it waited in (feature pulls and sampling requests of the
KVStore, DDP's all-reduce, P3's layer-1 exchange, Dorylus's graph server), and nothing the dead
rank started (Dorylus's executor workers) is left running. A rank frozen in the middle of
training (SIGSTOP) ends the job the same way, in one line naming it."""
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid

import psutil
import pytest
import torch
import torch.nn.functional as F

from dglx_dist.kvstore import DistKVStore
from dglx_dist.runtime.comm import PeerError
from dglx_dist.testing import run_workers
from tests.dist.test_checkpoint import _trainer

pytestmark = pytest.mark.dist
TIMEOUT = 6


def _die_mid_epoch(session, name, tmp):
    trainer = _trainer(session, name, f"{tmp}/parts")
    t0, step = None, 0
    try:
        for epoch in range(3):  # the second step: epoch 0's (sampled) or epoch 1's (full graph)
            for batch in trainer.batches(epoch):
                if step == 1 and session.rank == 1:
                    os._exit(3)  # as SIGKILL would: no goodbye to the others
                t0 = time.monotonic()
                loss = F.cross_entropy(trainer.forward(batch), batch.y)
                trainer.step(loss)
                step += 1
    except PeerError as exc:
        return {"ranks": exc.ranks, "message": str(exc), "seconds": time.monotonic() - t0}
    finally:
        if session.rank != 1:
            trainer.close()
    return {"ranks": None}


def _token_processes(token):
    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("DGLX_TEST_TOKEN") == token:
                out.append(p)
        except psutil.Error:
            continue
    return out


@pytest.mark.parametrize("name", ["distdgl", "p3", "dorylus"])
def test_survivors_name_the_dead_rank(name, tmp_path):
    token = uuid.uuid4().hex
    res = run_workers(_die_mid_epoch, 2, tmp_path, name, str(tmp_path), expect_failure=[1],
                      env={"DGLX_TIMEOUT": str(TIMEOUT), "DGLX_VIRTUAL_SERVERS": "2",
                           "DGLX_TEST_TOKEN": token}, timeout=120)
    assert res[0]["ranks"] == [1], res[0]
    assert "rank 1" in res[0]["message"]
    assert res[0]["seconds"] < TIMEOUT + 5, res[0]
    deadline = time.monotonic() + 10
    while _token_processes(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _token_processes(token) == []


def _made_with_a_stale_marker(session, tmp):
    """Rank 0 makes a directory slowly, then fails to make another, each time with an earlier
    run's ``.failed`` marker beside it; every rank reports what it got."""
    from pathlib import Path

    from dglx_dist.prepare import made_by_rank0

    got = {}
    for fail in (False, True):
        out = Path(tmp) / f"made{int(fail)}"

        def make():
            time.sleep(1.0)  # the other rank polls meanwhile, with the old marker in place
            if fail:
                raise ValueError("this run's own failure")
            out.mkdir()
            (out / "done").write_text("x")

        try:
            made_by_rank0(session, out, "done", make, "making it", wait_timeout=30)
            got[fail] = "ok"
        except (RuntimeError, ValueError) as exc:
            got[fail] = str(exc)
    return got


def test_an_earlier_runs_failure_marker_is_not_this_runs(tmp_path):
    for n in (0, 1):
        (tmp_path / f"made{n}.failed").write_text("OSError: [Errno 28] No space left on device")
    res = run_workers(_made_with_a_stale_marker, 2, tmp_path / "run", str(tmp_path))
    for r in (0, 1):
        assert res[r]["false"] == "ok", res
        assert "this run's own failure" in res[r]["true"] and "No space" not in res[r]["true"]
    assert not (tmp_path / "made0.failed").exists()


def _nan_loss(session, tmp):
    """distdgl trains 3 epochs, rank 1's loss NaN at step 1 of epoch 1: once with
    nonfinite_loss="warn", once with "raise"."""
    import io
    import json

    import torch.nn.functional as F

    from dglx_dist.errors import NonFiniteLossError

    out = {}
    for mode in ("warn", "raise"):
        trainer = _trainer(session, "distdgl", f"{tmp}/parts")
        trainer.nonfinite_loss, trainer.metrics = mode, io.StringIO()
        calls = []

        def loss_fn(logits, y):
            calls.append(trainer.epoch)
            nan = session.rank == 1 and trainer.epoch == 1 and calls.count(1) == 2
            return F.cross_entropy(logits, y) * (float("nan") if nan else 1.0)

        try:
            trainer.fit(3, eval_every=0, loss_fn=loss_fn)
            error = None
        except NonFiniteLossError as exc:
            error = str(exc)
        finally:
            trainer.close()
        out[mode] = {"error": error, "lines": [json.loads(line) for line in
                                               trainer.metrics.getvalue().splitlines()]}
    return out


def test_a_nan_loss_stops_the_run_with_valid_json(tmp_path):
    res = run_workers(_nan_loss, 2, tmp_path / "run", str(tmp_path))
    for mode in ("warn", "raise"):
        lines = res[0][mode]["lines"]
        assert lines[1]["loss"] is None and lines[1]["nonfinite"] == ["loss"]
        assert lines[0]["loss"] > 0 and "nonfinite" not in lines[0]
    assert res[0]["warn"]["error"] is None and len(res[0]["warn"]["lines"]) == 3
    for r in (0, 1):
        assert "epoch 1: the loss is nan (first non-finite at step 1" in res[r]["raise"]["error"]
    assert len(res[0]["raise"]["lines"]) == 2


def _no_training_nodes(session, tmp):
    from dglx_dist.data import write_dataset
    from dglx_dist.errors import DatasetFormatError
    from dglx_dist.models import SAGE
    from dglx_dist.testing import tiny_dataset
    from dglx_dist.trainer import Trainer

    ds = tiny_dataset()
    data = f"{tmp}/data"
    if session.is_main:
        write_dataset(ds.replace(train=ds.train & False), data)
    session.world.barrier()
    from dglx_dist.prepare import ensure_partitions
    from dglx_dist.strategies import STRATEGIES

    strategy = STRATEGIES.build("distdgl")
    parts = ensure_partitions(data, strategy, session, f"{tmp}/cache")
    try:
        Trainer(SAGE(ds.feat_dim, 8, ds.num_classes, 2), parts, strategy, session=session)
    except DatasetFormatError as exc:
        return str(exc)
    return None


def test_a_dataset_without_training_nodes_is_refused(tmp_path):
    res = run_workers(_no_training_nodes, 2, tmp_path / "run", str(tmp_path))
    assert all("no training nodes" in res[r] for r in (0, 1)), res


def _frozen_peer_then_close(session):
    """Rank 1 freezes; rank 0's collective on the cross group times out, then closing its
    serving KVStore must not wait out another timeout on the world group."""
    store = DistKVStore(session, serve=True)
    pids = session.world.all_gather(torch.tensor([os.getpid()]))
    if session.rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)  # frozen, alive: its sockets stay open
    try:
        session.cross.all_reduce(torch.ones(1))
    except PeerError as exc:
        failed_on = exc.op
    t0 = time.monotonic()
    store.close()
    closed_s = time.monotonic() - t0
    os.kill(int(pids[1]), signal.SIGKILL)
    return {"failed_on": failed_on, "close_seconds": closed_s,
            "session_failure": session.failure is not None}


def test_a_failed_job_closes_its_kvstore_without_waiting_again(tmp_path):
    res = run_workers(_frozen_peer_then_close, 2, tmp_path, expect_failure=[1],
                      env={"DGLX_TIMEOUT": "6", "DGLX_VIRTUAL_SERVERS": "2"}, timeout=60)
    assert res[0]["session_failure"] and "all_reduce" in res[0]["failed_on"], res[0]
    assert res[0]["close_seconds"] < 3, res[0]  # a world barrier would wait its 6 s


FROZEN_TIMEOUT = 10
# torchrun looks at its ranks every 5 s by default; this often, it sees the frozen rank that
# rank 0 ended (SIGKILL) at once and SIGTERMs rank 0, which must still print its line
MONITOR_S = "0.1"


def _job_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DGLX_", "RANK", "WORLD"))}
    env.update({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", **extra})
    return env


def _stop_rank_1_after_first_metrics(agent, metrics, log):
    """SIGSTOPs rank 1 of ``agent``'s job three seconds after its first metrics line; the time."""
    deadline = time.monotonic() + 180
    while not (metrics.is_file() and metrics.read_text().strip()):
        assert agent.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)
    time.sleep(3)
    rank1 = [p for p in psutil.Process(agent.pid).children()
             if p.environ().get("RANK") == "1"]
    assert len(rank1) == 1, rank1
    rank1[0].send_signal(signal.SIGSTOP)
    return time.monotonic()


# dorylus only in the suite: its pipeline's waits are the case that failed; distdgl and p3
# pass the same (about 25 s each; add them here to check them again)
@pytest.mark.parametrize("name", ["dorylus"])
def test_a_frozen_rank_ends_the_job_in_one_line(name, tmp_path):
    """`kill -STOP` of rank 1 mid-training (issue 77, item 4: under dorylus the pipeline's
    background waits raised gloo's raw "Application timeout caused pair closure" twice, the
    second time from the KVStore's closing barrier, and the job ended 52 s after the stop):
    rank 0 names rank 1 as frozen in one line, without a traceback of the package, ends it,
    and the job exits non-zero within DGLX_TIMEOUT + 30 s."""
    token = uuid.uuid4().hex
    env = _job_env(DGLX_TIMEOUT=str(FROZEN_TIMEOUT), DGLX_TEST_TOKEN=token)
    subprocess.run([sys.executable, "-m", "dglx_dist", "datagen", str(tmp_path / "ds"),
                    "--num-nodes", "3000", "--num-edges", "20000", "--feat-dim", "32"],
                   env=env, check=True, capture_output=True, timeout=120)
    metrics, log = tmp_path / "metrics.jsonl", tmp_path / "stderr.txt"
    with open(log, "w") as err:
        agent = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
             "2", "--monitor-interval", MONITOR_S, "-m", "dglx_dist", "train", "--data",
             str(tmp_path / "ds"), "--epochs", "100000", "--strategy", name, "--no-progress",
             "--metrics-file", str(metrics), "--cache-dir", str(tmp_path / "cache")],
            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        stopped = _stop_rank_1_after_first_metrics(agent, metrics, log)
        agent.wait(timeout=FROZEN_TIMEOUT + 90)
        seconds = time.monotonic() - stopped
    finally:
        if agent.poll() is None:
            agent.kill()
        for p in _token_processes(token):  # the stopped rank, if nothing ended it
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGCONT)
                p.kill()
    stderr = log.read_text()
    named = [ln for ln in stderr.splitlines() if "PeerError" in ln and "rank 1 sent no heartbeat"
             in ln and not ln.lstrip().startswith("traceback :")]  # torchrun's summary quotes it
    ours = [ln for ln in stderr.splitlines() if 'File "' in ln and "/dglx_dist/" in ln]
    assert agent.returncode != 0 and len(named) == 1 and not ours, stderr[-4000:]
    assert stderr.count("Traceback (most recent call last)") <= 1  # torchrun's own, if any
    assert "ended frozen rank(s) [1]" in stderr
    assert seconds < FROZEN_TIMEOUT + 30, (seconds, stderr[-3000:])
