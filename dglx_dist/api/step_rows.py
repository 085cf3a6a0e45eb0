"""Rows a loader pulls for its step before the loop asks for them (docs/porting.md, "Reads
with the loader's ids are pulled for the step").

A graph's :class:`StepRows` turns a loop's own reads of a step's rows (``g.ndata[name]`` with
the loader's input or output nodes, ``emb(input_nodes)`` of a ``DistEmbedding``) into one
collective exchange per step (:meth:`~dglx_dist.kvstore.KVStore.start_pull_many`), started
when the loader hands the step over and travelling while it samples the next: every
``DistEmbedding``'s rows of the input nodes of its type, and every name a loop read with the
loader's ids before (:meth:`StepRows.note`), but those on the blocks already
(:meth:`StepRows.offer`). A read with ids of the same values
(:func:`~dglx_dist.kvstore.embedding.same_ids`) takes the rows once; a push to the name or the
graph's barrier drops the offer.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable

import torch

from dglx_dist.kvstore.embedding import same_ids
from dglx_dist.runtime.peer import PeerError

if TYPE_CHECKING:
    from dglx_dist.api.ndata import NodeSpace

__all__ = ["StepRows"]

log = logging.getLogger(__name__)


class StepRows:
    """One graph's prefetched rows (see the module docstring).

    Args:
        store: the graph's store.
    """

    def __init__(self, store):
        self.store = store
        self.embeddings: list = []  # the graph's DistEmbeddings, in creation order
        self.wanted: dict[tuple[str, str], NodeSpace] = {}  # (store name, side) -> its space
        self._offers: dict[str, tuple[torch.Tensor, tuple[int, int], Callable]] = {}
        self.barriers = 0  # the graph's barriers passed (other ranks' writes seen after one)
        self._handed: list[tuple[str, str, torch.Tensor]] = []  # (side, node type, ids)
        self._pending = None

    def start(self, input_nodes: dict[str, torch.Tensor],
              output_nodes: dict[str, torch.Tensor] | None,
              carried: frozenset[tuple[str, str]] = frozenset()) -> None:
        """Starts the pull of a step with per-type ``input_nodes`` and ``output_nodes``
        (collective: every rank at the same step); ``carried``: the (store name, side) pairs
        whose rows the loader put on the step's blocks itself (offered with :meth:`offer`,
        not pulled again)."""
        self.settle()
        sides = {"src": input_nodes, "dst": output_nodes or {}}
        self._handed = [(side, ntype, ids) for side, nodes in sides.items()
                        for ntype, ids in nodes.items()]
        self._offers = {}
        embs = [(e, input_nodes[e.space.ntype]) for e in self.embeddings
                if e.space.ntype in input_nodes]
        data = [(name, sides[side][space.ntype], space) for (name, side), space
                in sorted(self.wanted.items(), key=lambda kv: kv[0])
                if space.ntype in sides[side] and (name, side) not in carried]
        rows = [e.space.rows(ids) for e, ids in embs] + [s.rows(ids) for _, ids, s in data]
        if not rows:
            return
        names = [e.name for e, _ in embs] + [name for name, _, _ in data]
        pending = self.store.start_pull_many(list(zip(names, rows)), dedup=False)
        self._pending = pending
        for i, (emb, ids) in enumerate(embs):
            emb.inner.offer(ids, rows[i], lambda i=i: pending.wait()[i])
        for i, (name, ids, _) in enumerate(data, start=len(embs)):
            self._offers[name] = (ids, self.stamp(name), lambda i=i: pending.wait()[i])

    def stamp(self, name: str) -> tuple[int, int]:
        """When rows of store name ``name`` are pulled: the pushes to it so far (this rank's
        writes, every collective push) and the graph's barriers passed (after one, every
        rank's writes are seen, as in DGL). Rows pulled under another stamp are stale."""
        return self.store.pushes.get(name, 0), self.barriers

    def offer(self, name: str, ids: torch.Tensor, stamp: tuple[int, int],
              rows: torch.Tensor) -> None:
        """Rows of store name ``name`` for ids ``ids`` that the loader put on the step's
        blocks, pulled under ``stamp`` (:meth:`stamp`): a read of those ids takes them
        (once) unless a push or a barrier came since."""
        self._offers[name] = (ids, stamp, lambda: rows)

    def take(self, name: str, ids: object) -> torch.Tensor | None:
        """The rows of store name ``name`` offered for ids of ``ids``' values, if no push to
        the name and no barrier came since they were pulled; None otherwise."""
        offer = self._offers.pop(name, None)
        if offer is None or not same_ids(offer[0], ids) or offer[1] != self.stamp(name):
            return None
        return offer[2]()

    def note(self, name: str, space: NodeSpace, ids: object) -> None:
        """Remembers that store name ``name`` (of node space ``space``) was read with the
        values of ids a loader handed over, so that the next steps pull it."""
        if name not in self.store.names():
            return
        side = next((side for side, ntype, handed in self._handed
                     if ntype == space.ntype and same_ids(handed, ids)), None)
        if side is not None:
            self.wanted[(name, side)] = space

    def settle(self) -> None:
        """Waits for the pull under way, if any (its rows stay offered)."""
        if self._pending is not None:
            self._pending.wait()
            self._pending = None

    def leave_loop(self, under) -> None:
        """A loader's loop left early (a break on every rank, or an error on this one): the
        rows every rank started pulling still arrive, the next steps' (``under``, their
        :class:`~dglx_dist.strategies.steps.UnderWay`) and this one's, and nothing new
        starts, so that a rank leaving on its own error waits on no peer (a peer's failure
        met here is the session's to report)."""
        try:
            for pending in under:
                pending.drain()
            self.settle()
        except PeerError as exc:
            log.debug("rows under way at a loop's end: %s", exc)
