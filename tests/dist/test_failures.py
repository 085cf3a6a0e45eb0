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
