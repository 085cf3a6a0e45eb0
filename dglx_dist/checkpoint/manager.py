"""A run's checkpoints from its stateful parts, as torchtitan's checkpoint manager keeps them:
the caller names the parts (objects with torch's ``Stateful`` protocol, ``state_dict`` /
``load_state_dict``), the manager names the files.

Each rank writes one rank file holding ``{"rank": r, <part>: state, ...}`` plus the
``progress`` part's fields at the top level (the epoch, the optimizer steps and the metrics
history of :class:`~dglx_dist.trainer.Trainer`), and the sparse embeddings' shards
(:mod:`~dglx_dist.checkpoint.layout`); :mod:`~dglx_dist.checkpoint.collective` commits them
together over the ranks.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch.distributed.checkpoint.stateful import Stateful

from dglx_dist.checkpoint import Checkpointing, collective, rng
from dglx_dist.checkpoint.files import (check_matches, check_root, decode, describe_unusable,
                                        encode, list_checkpoints)
from dglx_dist.checkpoint.layout import encode_shards, rank_file, restore_shards
from dglx_dist.errors import CheckpointError
from dglx_dist.runtime.agree import on_every_rank
from dglx_dist.runtime.session import Session

__all__ = ["CheckpointManager", "RandomState"]

log = logging.getLogger(__name__)


class RandomState:
    """This rank's random number generators as a ``Stateful`` part (:mod:`.rng`)."""

    def state_dict(self) -> dict[str, Any]:
        return rng.capture()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        rng.restore(state)


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

    def save(self, directory: str | Path, keep: int = 2) -> Path:
        """Writes a checkpoint into ``directory/epoch-NNNNNN`` and keeps the newest ``keep``."""
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
        flags = self.session.world.all_gather(torch.tensor([0 if error else 1]))
        failed = [r for r, f in enumerate(flags) if not int(f)]
        if failed:
            raise CheckpointError(f"resuming from {path} failed on ranks {failed}"
                                  + (f"; here: {error}" if error else " (see their errors)"))
        if self.session.is_main:
            state = self.progress.state_dict()
            log.info("resumed from %s: %d epochs, %d steps done", path, state["epoch"],
                     state["steps"])
        return True

    def resume_or_start(self, checkpoint: Checkpointing | None, resume: bool = False) -> bool:
        """Resumes from ``checkpoint.dir`` when ``resume`` is set or the launcher restarted the
        job (torchrun ``--max-restarts``); True when a checkpoint was loaded.

        Raises:
            CheckpointError: ``resume`` but no checkpoint could be loaded (the message names
                the damaged ones); or neither applies but the directory holds checkpoints (of
                an earlier run, which new ones would mix with).
        """
        session = self.session
        if checkpoint is None:
            if resume:
                raise CheckpointError("resume asked for, but the trainer has no checkpoint "
                                      "directory (Trainer(checkpoint=Checkpointing(dir)))")
            return False
        root = on_every_rank(session, "checkpoint directory", lambda: check_root(
            checkpoint.dir) if session.is_main else checkpoint.dir)
        if resume or session.env.restart_count > 0:
            resumed = self.resume(root)
            if not resumed and resume:
                raise CheckpointError(f"--resume: no usable checkpoint in {root}"
                                      f"{describe_unusable(root)}")
            if not resumed and session.is_main:  # restarted before the first save
                log.warning("no checkpoint in %s yet: starting from epoch 0", root)
            return resumed
        existing = list_checkpoints(root)
        if existing:
            raise CheckpointError(f"{root} holds checkpoints of an earlier run (up to epoch "
                                  f"{existing[-1][0]}); resume it (--resume) or choose an empty "
                                  f"directory")
        return False

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
