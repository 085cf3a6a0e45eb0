"""The lock of a checkpoint directory (issue 61, item 2c): one job at a time holds it, a second
is refused in one line naming the first, a dead holder leaves no stale lock, and the lock file
is the root's own (checks and pruning pass it by). Two real `dglx train` jobs:
tests/e2e/test_checkpoint_jobs.py."""
import errno
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest
import torch

from dglx_dist.checkpoint import files, lock
from dglx_dist.checkpoint.lock import LOCK_FILE, JobLock
from dglx_dist.errors import CheckpointError


def test_a_second_holder_is_refused_naming_the_first(tmp_path):
    root = tmp_path / "new" / "ckpt"
    first = JobLock.take(root)  # creates the directory it locks
    try:
        record = json.loads((root / LOCK_FILE).read_text())
        assert (record["pid"], record["host"]) == (os.getpid(), socket.gethostname())
        # flock: another open file description is another holder, also in this process
        with pytest.raises(CheckpointError) as refused:
            JobLock.take(root)
        message = str(refused.value)
        assert message.startswith(f"--checkpoint-dir {root} is in use by another job (pid "
                                  f"{os.getpid()} on host {socket.gethostname()}, started ")
        assert message.endswith("wait for it to end or choose another directory")
        assert "\n" not in message and "pytest" in message  # the holder's command
        files.check_contents(root)  # the lock file is the root's own
    finally:
        first.release()
    assert not (root / LOCK_FILE).exists() and not first.held
    first.release()  # idempotent
    JobLock.take(root).release()


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    """The OS drops a dead process's flock: the next job takes the directory over (its
    record replacing the dead one's, which a kill leaves behind)."""
    code = textwrap.dedent(f"""
        import sys
        from dglx_dist.checkpoint.lock import JobLock
        held = JobLock.take({str(tmp_path)!r})
        print("held", flush=True)
        sys.stdin.read()
    """)
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(CheckpointError, match=f"in use by another job \\(pid {holder.pid} "):
            JobLock.take(tmp_path)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.communicate()
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == holder.pid
    taken = JobLock.take(tmp_path)
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    taken.release()


def test_a_file_removed_by_its_releasing_holder_is_not_taken(tmp_path, monkeypatch):
    """A job that opened the lock file just before its holder released (and removed) it would
    lock a file no longer in the directory; it opens the new one instead, or a third job
    could hold the directory beside it."""
    first = JobLock.take(tmp_path)
    stale = os.open(tmp_path / LOCK_FILE, os.O_RDWR)
    first.release()
    opened = iter([stale])
    real_open = JobLock._open
    monkeypatch.setattr(JobLock, "_open", staticmethod(lambda path: next(opened, None)
                                                       or real_open(path)))
    second = JobLock.take(tmp_path)
    try:
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
        with pytest.raises(CheckpointError, match="in use by another job"):
            JobLock.take(tmp_path)
    finally:
        second.release()
    with pytest.raises(OSError):
        os.fstat(stale)  # closed


def test_an_unreadable_record_still_refuses(tmp_path, monkeypatch):
    monkeypatch.setattr(lock, "_READ_PAUSE_S", 0.0)
    first = JobLock.take(tmp_path)
    (tmp_path / LOCK_FILE).write_text("{not json")
    try:
        with pytest.raises(CheckpointError, match="in use by another job \\(its record in .* "
                                                  "is unreadable\\)"):
            JobLock.take(tmp_path)
    finally:
        first.release()


def test_a_filesystem_without_flock_runs_unlocked_with_a_warning(tmp_path, monkeypatch, caplog):
    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_flock)  # the lock takes it through owned.flock_within
    taken = JobLock.take(tmp_path)
    assert not taken.held and "a second job using" in caplog.text
    taken.release()


def test_the_root_refusals_come_before_the_lock(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError, match="is a file; expected a directory"):
        JobLock.take(tmp_path / "file")
    with pytest.raises(CheckpointError, match="cannot be written"):
        JobLock.take(tmp_path / "file" / "ckpt")


def test_checkpoints_and_pruning_pass_the_lock_file_by(tmp_path):
    held = JobLock.take(tmp_path)
    try:
        for epoch in (1, 2, 3):
            staging = files.staging_dir(tmp_path, epoch)
            staging.mkdir()
            entry = files.write_file(staging, "rank-00000.pt", files.encode(torch.zeros(2)))
            files.commit(tmp_path, epoch, {"format": files.FORMAT, "epoch": epoch, "step": epoch,
                                           "world_size": 1, "strategy": "distdgl",
                                           "files": {"rank-00000.pt": entry}}, keep=1)
        assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK_FILE, "epoch-000003"]
        assert files.find_latest(tmp_path)[1]["epoch"] == 3
        files.check_contents(tmp_path)
    finally:
        held.release()


def test_resume_without_a_checkpoint_dir_is_named_in_the_users_terms():
    """``dglx train --resume`` without ``--checkpoint-dir``: one line from rank 0 naming the
    flag (hostile re-pass of issue 77: every rank printed "the trainer has no checkpoint
    directory (Trainer(checkpoint=...))")."""
    from dglx_dist.checkpoint.manager import CheckpointManager
    from dglx_dist.runtime.failure import reporting_rank

    with pytest.raises(CheckpointError, match="--resume needs a checkpoint directory to resume "
                                              "from: pass --checkpoint-dir DIR") as refused:
        CheckpointManager(None, {}, None).resume_or_start(None, resume=True)
    assert [reporting_rank(refused.value, r, 2) for r in (0, 1)] == [0, 0]
