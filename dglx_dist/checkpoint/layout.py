"""Which files a training checkpoint holds and what is in each (the names inside an
``epoch-NNNNNN`` directory; the directory itself is :mod:`dglx_dist.checkpoint.files`').

* ``rank-RRRRR.pt``: rank R's state (model, optimizer, strategy, epoch and step counters, RNG
  states, metrics history; see :meth:`Trainer.save <dglx_dist.trainer.Trainer.save>`).
* ``embE-K-partPPPPP.pt``: part P of the K-th named tensor (sorted by name: the rows, then the
  sparse optimizer's state such as ``NAME/adam_m``) of the E-th embedding the trainer was given,
  as ``{"name", "part", "rows"}``; written by the one rank whose KVStore server holds the part
  (:meth:`~dglx_dist.kvstore.base.KVStore.checkpoint_parts`) and restored into it in place.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

import torch

from dglx_dist.checkpoint.files import decode, encode
from dglx_dist.errors import CheckpointError

if TYPE_CHECKING:  # only the type: the checkpoint format does not depend on the KVStore
    from dglx_dist.kvstore.embedding import DistEmbedding

__all__ = ["rank_file", "Shard", "embedding_shards", "encode_shards", "restore_shards"]


def rank_file(rank: int) -> str:
    """The name of rank ``rank``'s state file."""
    return f"rank-{int(rank):05d}.pt"


@dataclasses.dataclass(frozen=True, eq=False)
class Shard:
    """One embedding part this rank saves and restores.

    Attributes:
        file: its file name in the checkpoint.
        name: the KVStore tensor's name.
        part: the part's index.
        rows: the part's local rows (restored in place).
    """

    file: str
    name: str
    part: int
    rows: torch.Tensor


def embedding_shards(embeddings: Sequence[DistEmbedding]) -> Iterator[Shard]:
    """The parts of ``embeddings`` (and of their sparse optimizers' state) this rank writes,
    in the same order on every save and load."""
    for e, emb in enumerate(embeddings):
        names = sorted(n for n in emb.store.names()
                       if n == emb.name or n.startswith(emb.name + "/"))
        for k, name in enumerate(names):
            for part, rows in sorted(emb.store.checkpoint_parts(name).items()):
                yield Shard(f"emb{e}-{k}-part{part:05d}.pt", name, part, rows)


def encode_shards(embeddings: Sequence[DistEmbedding]) -> dict[str, bytes]:
    """File name -> bytes of every shard this rank writes."""
    return {s.file: encode({"name": s.name, "part": s.part, "rows": s.rows})
            for s in embedding_shards(embeddings)}


def restore_shards(embeddings: Sequence[DistEmbedding], read: Callable[[str], bytes]) -> None:
    """Copies every shard of this rank back into its rows; ``read(name)`` gives a file's
    verified bytes. Raises :class:`~dglx_dist.errors.CheckpointError` on a shard of another
    tensor, part or shape."""
    for s in embedding_shards(embeddings):
        stored = decode(read(s.file), s.file)
        if stored.get("name") != s.name or stored.get("part") != s.part or \
                tuple(stored["rows"].shape) != tuple(s.rows.shape):
            raise CheckpointError(f"{s.file} holds {stored.get('name')!r} part "
                                  f"{stored.get('part')}; expected {s.name!r} part {s.part} of "
                                  f"shape {tuple(s.rows.shape)}")
        s.rows.copy_(stored["rows"])
