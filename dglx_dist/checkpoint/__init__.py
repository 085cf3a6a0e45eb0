"""Checkpoints of a training run: every rank's state, written atomically, found after a crash.

:meth:`Trainer.save <dglx_dist.trainer.Trainer.save>` and
:meth:`Trainer.resume <dglx_dist.trainer.Trainer.resume>` use it through
:class:`~dglx_dist.checkpoint.manager.CheckpointManager`, which is given the run's stateful
parts and names the files; ``Trainer(..., checkpoint=Checkpointing("ckpt", every=1))`` saves
during ``fit``. The format is in
:mod:`dglx_dist.checkpoint.files`, the files a training run writes into it (rank files,
embedding shards) in :mod:`dglx_dist.checkpoint.layout`, the protocol over ranks in
:mod:`dglx_dist.checkpoint.collective`.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from dglx_dist.checkpoint.files import find_latest, list_checkpoints, read_manifest
from dglx_dist.errors import CheckpointError, InvalidValueError

__all__ = ["Checkpointing", "CheckpointError", "find_latest", "list_checkpoints",
           "read_manifest"]


@dataclasses.dataclass(frozen=True)
class Checkpointing:
    """When ``Trainer.fit`` saves checkpoints.

    Attributes:
        dir: the checkpoint root (one ``epoch-NNNNNN`` directory per checkpoint); on a
            cluster, a directory every rank sees.
        every: save after every ``every`` epochs (and after the last one).
        keep: how many of the newest checkpoints to keep (older ones are removed after a
            new one is complete).
    """

    dir: Path
    every: int = 1
    keep: int = 2

    def __post_init__(self):
        object.__setattr__(self, "dir", Path(self.dir))
        if self.every < 1:
            raise InvalidValueError(f"Checkpointing.every={self.every}; expected >= 1 epochs")
        if self.keep < 1:
            raise InvalidValueError(f"Checkpointing.keep={self.keep}; expected >= 1")
