"""Two `dglx train` jobs on one --checkpoint-dir (issue 61, item 2c): the second, fresh or
--resume, is refused before it trains, in one line naming the running job, and the first is not
disturbed; once the first has ended, a --resume job goes on from its checkpoints.

The first job (two ranks) is paused (SIGSTOP, every process of it) from its first checkpoint
until the second ones have ended, so that they certainly meet it running (a job on Cora trains
an epoch in milliseconds); the --resume one has its shape, so only the lock keeps it out."""
import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from dglx_dist.checkpoint import files
from dglx_dist.runtime.env import free_local_port
from tests.launches import distinct_ports, run_together

pytestmark = pytest.mark.e2e
# long enough to be caught between its first and its last checkpoint: the test pauses it
# within milliseconds of its first, and an epoch with its checkpoint takes about 75 ms on Cora
# (2 ranks on the 2-core machine), 3 s for 40; 120 spent 6 s more of the suite's time after
# the pause, to the same end
EPOCHS = 40


def _env(port: int | None = None) -> dict:
    """The environment of a job; with ``port``, a one-rank job started without torchrun (its
    exit status is dglx's own; torchrun's is 1 whatever its ranks return)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DGLX_", "RANK", "WORLD", "LOCAL_", "MASTER_", "TORCHELASTIC"))}
    env.update({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "DGLX_TIMEOUT": "120"})
    if port is not None:
        env.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    return env


def _train(tmp_path, epochs: int, *extra: str) -> list[str]:
    return ["-m", "dglx_dist", "train", "--data", "cora", "--epochs", str(epochs),
            "--eval-every", "0", "--no-progress", "--checkpoint-dir", str(tmp_path / "ckpt"),
            "--cache-dir", str(tmp_path / "cache"), *extra]


def _two_ranks(tmp_path, port: int, epochs: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
            "--master-port", str(port), *_train(tmp_path, epochs, *extra)]


def _wait_for_a_checkpoint(job: subprocess.Popen, root) -> None:
    deadline = time.monotonic() + 90
    while not any((path / files.MANIFEST).exists() for _, path in files.list_checkpoints(root)):
        assert job.poll() is None and time.monotonic() < deadline, "the first job saved nothing"
        time.sleep(0.01)


def _said(stderr: str, text: str) -> list[str]:
    """The lines of ``stderr`` saying ``text``, torchrun's closing summary left out."""
    return [line for line in stderr.splitlines()
            if text in line and not line.lstrip().startswith("traceback :")]


def _second_jobs(tmp_path) -> list[subprocess.CompletedProcess]:
    """A fresh one-rank job and a two-rank --resume job on the first one's directory, at once."""
    fresh_port, resume_port = distinct_ports(2)
    return run_together([
        {"args": [sys.executable, *_train(tmp_path, 3)], "env": _env(fresh_port), "cwd": tmp_path},
        {"args": _two_ranks(tmp_path, resume_port, EPOCHS, "--resume"), "env": _env(),
         "cwd": tmp_path}])


def test_a_second_job_on_a_checkpoint_dir_is_refused_and_the_first_goes_on(tmp_path):
    root = tmp_path / "ckpt"
    with open(tmp_path / "first.log", "w") as log:
        first = subprocess.Popen(_two_ranks(tmp_path, free_local_port(), EPOCHS), cwd=tmp_path,
                                 env=_env(), stdout=log, stderr=log)
    paused = []
    try:
        _wait_for_a_checkpoint(first, root)
        agent = psutil.Process(first.pid)
        for proc in [agent, *agent.children(recursive=True)]:  # wherever it is, mid-save too
            proc.suspend()
            paused.append(proc)
        holder = json.loads((root / files.LOCK_FILE).read_text())["pid"]
        assert holder in [p.pid for p in paused[1:]]  # rank 0 of the first job
        fresh, resumed = _second_jobs(tmp_path)
    except BaseException:
        first.kill()
        raise
    finally:
        for proc in reversed(paused):
            proc.resume()
        code = first.wait(timeout=120)
    assert code == 0, (tmp_path / "first.log").read_text()[-3000:]

    in_use = f"--checkpoint-dir {root} is in use by another job (pid {holder} on host "
    assert fresh.returncode == 2, fresh.stderr[-3000:]
    assert len(_said(fresh.stderr, in_use)) == 1, fresh.stderr[-3000:]
    assert resumed.returncode != 0, resumed.stderr[-3000:]  # torchrun's own status: 1
    assert len(_said(resumed.stderr, in_use)) == 1, resumed.stderr[-3000:]  # from rank 0
    for r in (fresh, resumed):
        assert "ERROR" in _said(r.stderr, in_use)[0] and '"epoch"' not in r.stdout
        assert not [ln for ln in r.stderr.splitlines() if 'File "' in ln and "/dglx_dist/" in ln]

    # the first job's checkpoints are whole, and nothing else is left in the directory
    assert sorted(p.name for p in root.iterdir()) == [f"epoch-{EPOCHS - 1:06d}",
                                                     f"epoch-{EPOCHS:06d}"]
    for _, path in files.list_checkpoints(root):
        files.verify(path, files.read_manifest(path))
    assert files.find_latest(root)[1]["epoch"] == EPOCHS

    after = subprocess.run(_two_ranks(tmp_path, free_local_port(), EPOCHS + 2, "--resume"),
                           capture_output=True, text=True, env=_env(), timeout=120)
    assert after.returncode == 0, after.stderr[-3000:]
    assert f"resumed from {root / f'epoch-{EPOCHS:06d}'}" in after.stderr
    assert [e for e, _ in files.list_checkpoints(root)] == [EPOCHS + 1, EPOCHS + 2]
    assert not (root / files.LOCK_FILE).exists()


def test_a_lock_link_planted_in_the_checkpoint_dir_is_refused_and_its_target_kept(tmp_path):
    """Issue 77, item 1, as its tester ran it: a symbolic link planted as the lock file of a
    two-rank job's --checkpoint-dir; the job is refused before it trains, in one line from
    rank 0, and the file the link points to keeps its bytes (both kinds of link, and every
    other file dglx writes in a user's directory: tests/unit/test_nolinks.py)."""
    root, victim = tmp_path / "ckpt", tmp_path / "victim" / "notes.txt"
    root.mkdir()
    victim.parent.mkdir()
    victim.write_text("notes\n")
    (root / files.LOCK_FILE).symlink_to("../victim/notes.txt")
    job = subprocess.run(_two_ranks(tmp_path, free_local_port(), 2), capture_output=True,
                         text=True, env=_env(), timeout=120, cwd=tmp_path)
    assert job.returncode != 0, job.stderr[-3000:]
    said = _said(job.stderr, "is a symbolic link (to ../victim/notes.txt)")
    assert len(said) == 1 and "ERROR" in said[0], job.stderr[-3000:]
    assert not [ln for ln in job.stderr.splitlines() if 'File "' in ln and "/dglx_dist/" in ln]
    assert victim.read_text() == "notes\n" and '"epoch"' not in job.stdout
    assert (root / files.LOCK_FILE).is_symlink() and sorted(os.listdir(root)) == [files.LOCK_FILE]
