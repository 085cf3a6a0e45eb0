"""DGL's distributed loaders over the package's: ``DistNodeDataLoader`` and
``DistEdgeDataLoader`` (:class:`~dglx_dist.api.DataLoader` and its edge form, yielding DGL's
blocks and pair graphs, :func:`~dglx_dist.dgl.blocks.dgl_batch`), and
``dgl.distributed.DistDataLoader``: batches of a dataset's items, each given to the script's
``collate_fn``, as DistDGL's first examples sample (``collate_fn`` calling
``dgl.distributed.sample_neighbors`` and ``dgl.to_block``). ``collate_fn`` runs in the trainer
and sampling is collective, so every rank takes the same number of steps per epoch, as
:class:`~dglx_dist.api.DataLoader` does (:func:`~dglx_dist.strategies.steps.equal_step_sizes`;
docs/porting.md). Building one is collective.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch.utils.data import default_collate

from dglx_dist.api import loader
from dglx_dist.dgl.blocks import dgl_batch
from dglx_dist.errors import InvalidValueError
from dglx_dist.runtime.agree import same_call
from dglx_dist.runtime.session import current_session
from dglx_dist.strategies.steps import agreed_steps, equal_step_sizes

__all__ = ["DistNodeDataLoader", "DistEdgeDataLoader", "DistDataLoader"]


class DGLBatches:
    """A loader of the package's whose batches a DGL script gets as DGL's loaders give them:
    DGL's blocks (with their rows) and pair graphs."""

    def __iter__(self) -> Iterator[tuple]:
        batches = super().__iter__()
        try:
            for batch in batches:
                yield dgl_batch(batch)
        finally:  # a loop left early leaves the package's loader as its own break does
            batches.close()


class DistNodeDataLoader(DGLBatches, loader.DataLoader):
    """DGL's ``DistNodeDataLoader`` (and ``dgl.dataloading.DataLoader`` over a distributed
    graph): :class:`~dglx_dist.api.DataLoader`, DGL's blocks out."""


class DistEdgeDataLoader(DGLBatches, loader.DistEdgeDataLoader):
    """DGL's ``DistEdgeDataLoader``: :class:`~dglx_dist.api.loader.DistEdgeDataLoader`, DGL's
    blocks and pair graphs out."""


def _scalar(item: Any) -> Any:
    """An item as DGL hands it to ``collate_fn``: a tensor (or numpy scalar) of one value as
    a number, a ``(type, id)`` pair with its id so."""
    if isinstance(item, tuple):
        return tuple(_scalar(x) for x in item)
    one = isinstance(item, np.generic) or (isinstance(item, torch.Tensor) and item.numel() == 1)
    return item.item() if one else item


class DistDataLoader:
    """DGL's ``DistDataLoader(dataset, batch_size, shuffle=False, collate_fn=None,
    drop_last=False, queue_size=None)`` (collective to build).

    Args:
        dataset: indexable items with a length (a tensor or array of node ids, a list).
        batch_size: items per batch.
        shuffle: a new order each epoch (torch's global generator, as DGL's).
        collate_fn: ``collate_fn(items)`` makes a batch of a list of items (default: torch's
            ``default_collate``).
        drop_last: leave out a last partial batch.
        queue_size: DGL's prefetch depth; accepted (batches are made when asked for).
    """

    def __init__(self, dataset, batch_size: int, shuffle: bool = False,
                 collate_fn: Callable | None = None, drop_last: bool = False,
                 queue_size: int | None = None):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidValueError(f"DistDataLoader: batch_size {batch_size!r}; expected an "
                                    "integer >= 1")
        try:
            n = len(dataset)
        except TypeError:
            raise InvalidValueError(f"DistDataLoader: dataset of type {type(dataset).__name__} "
                                    "has no len(); expected indexable items (ids)") from None
        self.session = current_session()
        same_call(self.session, f"DistDataLoader(batch_size={batch_size}, shuffle={shuffle}, "
                                f"drop_last={drop_last})")
        self.dataset, self.batch_size, self.shuffle = dataset, batch_size, shuffle
        self.collate_fn, self.drop_last = collate_fn or default_collate, drop_last
        self.steps = agreed_steps(self.session.world, n, batch_size, drop_last)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[Any]:
        n = len(self.dataset)
        order = torch.randperm(n) if self.shuffle else torch.arange(n)
        start = 0
        for size in equal_step_sizes(n, self.steps, self.batch_size, self.drop_last):
            items = [_scalar(self.dataset[i]) for i in order[start:start + size].tolist()]
            start += size
            yield self.collate_fn(items)
