"""A run's checkpoints from its stateful parts, as torchtitan's checkpoint manager keeps them:
the caller names the parts (torch's ``Stateful`` protocol), the manager names the files
(:mod:`~dglx_dist.checkpoint.layout`) and :mod:`~dglx_dist.checkpoint.collective` commits them.

A directory the manager saves into, or resumes and goes on in, is this job's until
:meth:`CheckpointManager.close`: rank 0 locks it (:mod:`~dglx_dist.checkpoint.lock`) before
anything else there, and a second job using it is refused before it trains.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from dglx_dist.checkpoint import Checkpointing, collective, rng
from dglx_dist.checkpoint.files import (check_contents, check_matches, decode,
                                        describe_unusable, encode, list_checkpoints)
from dglx_dist.checkpoint.layout import encode_shards, rank_file, restore_shards
from dglx_dist.checkpoint.lock import JobLock
from dglx_dist.errors import CheckpointError
from dglx_dist.runtime.failure import same_on_every_rank
from dglx_dist.runtime.session import Session

if TYPE_CHECKING:  # torch.distributed.checkpoint: about 0.6 s of a rank's start (sympy)
    from torch.distributed.checkpoint.stateful import Stateful

__all__ = ["CheckpointManager", "RandomState"]

log = logging.getLogger(__name__)


class RandomState:
    """This rank's random number generators as a ``Stateful`` part (:mod:`.rng`)."""

    state_dict, load_state_dict = staticmethod(rng.capture), staticmethod(rng.restore)


class CheckpointManager:
    """Saves and restores ``parts``, ``progress`` and ``embeddings`` (collective).

    Args:
        session: the job's session.
        parts: the states by name, restored in this order (e.g. model, optimizer, strategy,
            random generators).
        progress: a part whose ``state_dict`` holds ``epoch`` and ``steps`` (the
            checkpoint's directory and manifest are named by them).
        embeddings: sparse embeddings whose rows are saved per server.
        identity: what a checkpoint must match to be resumed (world size, strategy, data).
        meta: more manifest fields (e.g. the servers).
    """

    def __init__(self, session: Session, parts: Mapping[str, Stateful], progress: Stateful,
                 embeddings: Sequence = (), identity: Mapping[str, Any] | None = None,
                 meta: Mapping[str, Any] | None = None):
        self.session, self.parts, self.progress = session, dict(parts), progress
        self.embeddings, self.identity = list(embeddings), dict(identity or {})
        self.meta = dict(meta or {})
        # the directories this job holds (claim), by resolved path: rank 0's locks, None on
        # the other ranks (every rank has the same keys: claims are collective)
        self._held: dict[Path, JobLock | None] = {}

    def save(self, directory: str | Path, keep: int = 2) -> Path:
        """Writes a checkpoint into ``directory/epoch-NNNNNN`` and keeps the newest ``keep``;
        ``directory`` is this job's from then on (:meth:`claim`)."""
        self.claim(directory)
        rank, progress = self.session.rank, self.progress.state_dict()
        state = {"rank": rank, **progress,
                 **{name: part.state_dict() for name, part in self.parts.items()}}
        blobs = {rank_file(rank): encode(state), **encode_shards(self.embeddings)}
        meta = {"step": progress["steps"], **self.identity, **self.meta}
        return collective.save(self.session.world, Path(directory), progress["epoch"], meta,
                               blobs, keep)

    def resume(self, directory: str | Path) -> bool:
        """Loads the newest intact checkpoint under ``directory``; False when there is none.

        Raises:
            CheckpointError: on every rank, when the checkpoint is of another job or a rank
                cannot load its share.
        """
        found = collective.find(self.session.world, Path(directory))
        if found is None:
            return False
        path, manifest, read = found
        check_matches(path, manifest, self.identity)
        error = ""
        try:
            self._load(decode(read(rank_file(self.session.rank)), f"{path} (rank file)"), read)
        except (CheckpointError, KeyError, RuntimeError, ValueError, TypeError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        failed = self.session.world.failed_ranks(not error)
        if failed:
            raise CheckpointError(f"resuming from {path} failed on ranks {failed}"
                                  + (f"; here: {error}" if error else " (see their errors)"))
        if self.session.is_main:
            state = self.progress.state_dict()
            log.info("resumed from %s: %d epochs, %d steps done", path, state["epoch"],
                     state["steps"])
        return True

    def resume_or_start(self, checkpoint: Checkpointing | None, resume: bool = False) -> bool:
        """Claims ``checkpoint.dir`` for this job (:meth:`claim`) and resumes from it when
        ``resume`` is set or the launcher restarted the job (torchrun ``--max-restarts``);
        True when a checkpoint was loaded.

        Raises:
            CheckpointError: on every rank: another job is using the directory (the message
                names it); it holds anything but checkpoints; ``resume`` but no checkpoint
                could be loaded (the message names the damaged ones); or neither applies but
                it holds checkpoints (of an earlier run, which new ones would mix with).
        """
        if checkpoint is None:
            if resume:
                raise same_on_every_rank(CheckpointError(
                    "--resume needs a checkpoint directory to resume from: pass "
                    "--checkpoint-dir DIR (in a script: Trainer(checkpoint=Checkpointing(DIR)))"))
            return False
        root = Path(checkpoint.dir)
        claimed = self.claim(root, check=True, resume=resume)
        try:
            return self._resume_or_start(root, resume)
        except BaseException:  # refused: the directory is not this job's after all
            if claimed:
                self._release(root)
            raise

    def _resume_or_start(self, root: Path, resume: bool) -> bool:
        session = self.session
        if resume or session.env.restart_count > 0:
            resumed = self.resume(root)
            if not resumed and resume:
                raise CheckpointError(_nothing_to_resume(root))
            if not resumed and session.is_main:  # restarted before the first save
                log.warning("no checkpoint in %s yet: starting from epoch 0", root)
            return resumed
        existing = list_checkpoints(root)
        if existing:
            raise CheckpointError(f"{root} holds checkpoints of an earlier run (up to epoch "
                                  f"{existing[-1][0]}); resume it (--resume) or choose an empty "
                                  f"directory")
        return False

    def claim(self, directory: str | Path, check: bool = False, resume: bool = False) -> bool:
        """Makes ``directory`` this job's until :meth:`close` (collective): rank 0 creates it
        where it does not exist and locks it (:class:`~dglx_dist.checkpoint.lock.JobLock`),
        then, with ``check``, refuses it when it holds anything but checkpoints, and with
        ``resume``, when it does not exist (before creating it). Returns True when this call
        claimed it, False when the job already held it (then only ``check`` and ``resume``
        are checked again).

        Raises:
            CheckpointError: on every rank, with rank 0's message (it names the job holding
                the directory, or what is wrong with it).
        """
        root = Path(directory)
        key = root.resolve()
        fresh = key not in self._held
        if not (fresh or check):
            return False

        def decide() -> JobLock | None:  # rank 0's
            if resume and not root.exists():
                raise CheckpointError(_nothing_to_resume(root))
            lock = JobLock.take(root) if fresh else self._held[key]
            try:
                if check:
                    check_contents(root)
            except CheckpointError:
                if fresh:
                    lock.release()
                raise
            return lock

        self._held[key] = collective.on_rank_zero(self.session.world, decide)
        return fresh

    def _release(self, directory: Path) -> None:
        lock = self._held.pop(Path(directory).resolve(), None)
        if lock is not None:
            lock.release()

    def close(self) -> None:
        """Lets every directory this job claimed go (rank 0 removes its lock files)."""
        for key in list(self._held):
            self._release(key)

    def _load(self, state: dict[str, Any], read) -> None:
        rank = self.session.rank
        if state.get("rank", rank) != rank:  # older checkpoints record none
            raise CheckpointError(f"{rank_file(rank)} was written by rank {state['rank']}; "
                                  f"this is rank {rank} (were the rank files swapped?)")
        for name, part in self.parts.items():
            part.load_state_dict(state[name])
        restore_shards(self.embeddings, read)
        self.progress.load_state_dict({k: v for k, v in state.items()
                                       if k != "rank" and k not in self.parts})


def _nothing_to_resume(root: Path) -> str:
    """The refusal of ``--resume`` when ``root`` yields no checkpoint (it says why)."""
    return f"--resume: no usable checkpoint in {root}{describe_unusable(root)}"
