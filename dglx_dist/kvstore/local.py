"""An in-process store: every part in this process's memory.

Same interface and semantics as the distributed store, for single-process runs and unit tests,
and the reference the distributed store is tested against: pushing every rank's (ids, values)
concatenated in rank order here gives what the ranks' collective push gives there.
"""
from __future__ import annotations

from typing import Callable

import torch

from dglx_dist.kvstore.base import KVStore
from dglx_dist.kvstore.entries import InitSpec, TensorEntry, apply_op
from dglx_dist.kvstore.ops import combine_duplicates

__all__ = ["LocalKVStore"]


class LocalKVStore(KVStore):
    """All parts of every named tensor in one process (``seed`` as :class:`KVStore`'s)."""

    def _init_data(self, name: str, spec: InitSpec | None,
                   error: Exception | None) -> TensorEntry:
        if error is not None:
            raise error
        entry = TensorEntry.from_spec(spec, len(self._entries))
        for part in range(spec.policy.num_parts):
            entry.parts[part] = spec.initial_rows(part, self.seed).detach().clone().contiguous()
        return entry

    def _start_pull_many(self, pulls: list) -> Callable[[], list[torch.Tensor]]:
        rows = [self._rows(entry, ids) for entry, ids, _ in pulls]  # read at once
        return lambda: rows

    @staticmethod
    def _rows(entry: TensorEntry, ids: torch.Tensor) -> torch.Tensor:
        out = torch.empty((ids.numel(), *entry.trailing), dtype=entry.dtype)
        for piece in entry.policy.split(ids):
            piece.fill(out, entry.parts[piece.part])
        return out

    def _push_many(self, pushes: list) -> None:
        for entry, op, ids, values in pushes:  # one after another
            uniq, combined = combine_duplicates(ids, values, op.combine)
            for piece in entry.policy.split(uniq):
                apply_op(self._entries.values(), entry, op, piece.part, piece.local,
                         combined[piece.index()])
