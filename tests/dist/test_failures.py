"""A rank dying in the middle of training: every survivor stops within the timeout with an error
naming the dead rank and the operation it waited in (feature pulls and sampling requests of the
KVStore, DDP's all-reduce, P3's layer-1 exchange, Dorylus's graph server), and nothing the dead
rank started (Dorylus's executor workers) is left running."""
import os
import time
import uuid

import psutil
import pytest
import torch.nn.functional as F

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


def _made_with_a_stale_marker(session, tmp, fail):
    """Rank 0 makes a directory slowly (or fails) while an earlier run's ``.failed`` marker
    sits beside it; every rank reports what it got."""
    from pathlib import Path

    from dglx_dist.prepare import made_by_rank0

    out = Path(tmp) / "made"

    def make():
        time.sleep(1.0)  # the other rank polls meanwhile, with the old marker in place
        if fail:
            raise ValueError("this run's own failure")
        out.mkdir()
        (out / "done").write_text("x")

    try:
        made_by_rank0(session, out, "done", make, "making it", wait_timeout=30)
    except (RuntimeError, ValueError) as exc:
        return str(exc)
    return "ok"


@pytest.mark.parametrize("fail", [False, True])
def test_an_earlier_runs_failure_marker_is_not_this_runs(tmp_path, fail):
    (tmp_path / "made.failed").write_text("OSError: [Errno 28] No space left on device")
    res = run_workers(_made_with_a_stale_marker, 2, tmp_path / "run", str(tmp_path), fail)
    if fail:
        assert res[0] == "this run's own failure"
        assert "this run's own failure" in res[1] and "No space" not in res[1], res
    else:
        assert res == {0: "ok", 1: "ok"} and not (tmp_path / "made.failed").exists()
