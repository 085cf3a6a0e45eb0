"""The rows a loader puts on a step's blocks (DGL's ``prefetch_labels``,
``prefetch_node_feats`` and ``prefetch_edge_feats`` of the sampler), with or without types.

Each name's rows come from the strategy's own rows where it holds them
(:meth:`~dglx_dist.strategies.abilities.HoldsRows.source_rows`), else from the store (a
collective pull: every rank is at the same step). Labels go on the last block's destinations,
features on the first block's sources, edge features on each block's edges. When the step is
handed over its ids become the graph's own and :class:`~dglx_dist.api.step_rows.StepRows`
starts the pull of the rows the loop reads itself; the store's rows on the blocks are offered
to the loop's reads of the same ids (``g.ndata[name][input_nodes]`` is no second pull).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch

from dglx_dist.api.graph import DistGraph
from dglx_dist.api.samplers import edge_rows
from dglx_dist.kvstore.base import PullUnderWay
from dglx_dist.runtime.transfer import DeviceCopies
from dglx_dist.graphcore.frames import NID
from dglx_dist.strategies.abilities import HoldsRows
from dglx_dist.strategies.steps import EdgeStep, Step, UnderWay, place_step, step_graphs

__all__ = ["Prefetch"]


class Wanted(NamedTuple):
    """One name's rows for one side of a step, on their way."""

    layer: int  # the block they go on
    side: str  # "src" (the block's sources) or "dst" (its destinations)
    ntype: str
    name: str  # the user's name
    key: str  # the store's name
    rows: PullUnderWay
    stamp: tuple[int, int] | None  # when the store's pull started (StepRows.stamp; None:
    # the rows are not the store's rows of the step's ids, so no read of the loop takes them)


class Prefetch:
    """A loader's prefetch of its steps' rows (see the module docstring).

    Args:
        graph: the loader's graph.
        sampler: the loader's sampler (an edge-prediction sampler's node sampler names the
            features; its labels are edge data, on the pair graph: :mod:`dglx_dist.api.link`).
        device: where the steps go (the strategy's device).
    """

    def __init__(self, graph: DistGraph, sampler, device: torch.device):
        self.graph, self.device = graph, device
        self.copies = DeviceCopies(device)
        node_sampler = getattr(sampler, "sampler", sampler)  # an edge-prediction sampler's
        self.labels = list(getattr(sampler, "prefetch_labels", None) or [])
        self.feats = list(getattr(node_sampler, "prefetch_node_feats", None) or [])
        self.edge_feats = getattr(node_sampler, "prefetch_edge_feats", None) or []

    def start(self, step: Step | EdgeStep) -> UnderWay:
        """Starts the pulls of ``step``'s rows (collective: every rank at the same step); the
        result's ``finish`` hands the step over with them on its blocks."""
        blocks = step_graphs(step)
        state = getattr(step.blocks, "state", None)  # none on a subgraph
        # a typed co-batch's outputs are some of its last block's destinations: no rows
        skip = not blocks or self.graph.is_typed and state is not None and \
            state.rows is not None
        wanted = [] if skip else self._wanted(step, blocks)

        def finish() -> Step | EdgeStep:
            edge_rows(self.graph, blocks, self.edge_feats)
            handed = self._handed(step, wanted)  # after the last step's writes
            got = [w.rows.wait() for w in wanted]
            ready = [self._copy(value) for value in got]
            placed = place_step(handed, self.device)
            for w, value in zip(wanted, ready):
                block = step_graphs(placed)[w.layer]
                frame = block.srcnodes[w.ntype] if w.side == "src" else block.dstnodes[w.ntype]
                frame.data[w.name] = value()
            self._offer(handed, wanted, got)
            return placed

        return UnderWay(finish, lambda: [w.rows.wait() for w in wanted])

    def _wanted(self, step: Step | EdgeStep, blocks: list) -> list[Wanted]:
        """The pulls of the step's labels (first: few bytes) and first-layer features."""
        edge, out = isinstance(step, EdgeStep), []
        sides = [(0, "src", step.input_nodes, self.feats)]
        if not edge:  # an edge step's labels are on its pair graph
            sides.insert(0, (-1, "dst", step.output_nodes, self.labels))
        for layer, side, nodes, names in sides:
            for ntype, rows in self._rows(nodes).items():
                data = self.graph.nodes[ntype].data  # g.ndata's, on a graph without types
                for name in names:
                    if name in data or not self.graph.is_typed:  # types without it
                        view = data[name]
                        out.append(self._source(view, (layer, side, ntype, name, view.name),
                                                blocks[layer], rows))
        return out

    def _rows(self, nodes) -> dict[str, torch.Tensor]:
        """A step's nodes as store rows by node type (a step on a graph without types holds
        partitioned ids, its rows already)."""
        if not self.graph.is_typed:
            return {self.graph.node_space.ntype: nodes}
        return {t: self.graph.space(t).rows(ids) for t, ids in nodes.items()}

    def _source(self, view, where: tuple, block, rows: torch.Tensor) -> Wanted:
        """The rows of ``view`` for ``rows`` (going ``where``: layer, side, node type,
        name, store name), on their way, from the first source that has them: the strategy's own (a
        first block's sources; collective), else the store."""
        strategy, side = self.graph.strategy, where[1]
        if side == "src" and isinstance(strategy, HoldsRows):
            held = strategy.source_rows(view.name, block)
            if held is not None:
                return Wanted(*where, PullUnderWay(lambda: held), None)
        if side == "src" and not self.graph.is_typed and block.num_src_nodes() != rows.numel():
            # a co-batch: its input nodes are its own rows among the sources
            return Wanted(*where, view.start_rows(block.srcdata[NID], unique=True), None)
        stamp = self.graph.step_rows.stamp(view.name)
        return Wanted(*where, view.start_rows(rows, unique=True), stamp)

    def _copy(self, value) -> Callable[[], object]:
        """The copy of rows to the device, started (a handle, p3's column slice, as it is)."""
        return self.copies.start(value) if isinstance(value, torch.Tensor) else lambda: value

    def _handed(self, step: Step | EdgeStep, wanted: list[Wanted]) -> Step | EdgeStep:
        """``step`` with the graph's own node ids (a typed step's are per type already); the
        pull of the rows the loop reads itself with them, started (but those ``wanted``
        brings)."""
        graph = self.graph
        if not graph.is_typed:
            ids = {"input_nodes": graph.node_ids(step.input_nodes)}
            if not isinstance(step, EdgeStep):
                ids["output_nodes"] = graph.node_ids(step.output_nodes)
            step = step._replace(**ids)
        by_type = (lambda n: n) if graph.is_typed else (lambda n: {graph.node_space.ntype: n})
        outputs = getattr(step, "output_nodes", None)
        carried = frozenset((w.key, w.side) for w in wanted if w.stamp is not None)
        graph.step_rows.start(by_type(step.input_nodes),
                              None if outputs is None else by_type(outputs), carried)
        return step

    def _offer(self, step: Step | EdgeStep, wanted: list[Wanted], got: list) -> None:
        """The store's rows of the step's own ids, offered to the loop's reads of those ids
        (by value: ``g.ndata[name][input_nodes]`` is then the rows on the blocks)."""
        for w, value in zip(wanted, got):
            if w.stamp is not None and isinstance(value, torch.Tensor):
                nodes = step.input_nodes if w.side == "src" else step.output_nodes
                ids = nodes[w.ntype] if self.graph.is_typed else nodes
                self.graph.step_rows.offer(w.key, ids, w.stamp, value)
