"""The rows a loader puts on a step's blocks (DGL's ``prefetch_labels``,
``prefetch_node_feats`` and ``prefetch_edge_feats`` of the sampler), with or without types.

Each name's rows come from the strategy's own rows where it holds them
(:meth:`~dglx_dist.strategies.abilities.HoldsRows.source_rows`), else from the store (one
collective pull of all of a step's names, labels and features together: every rank is at the
same step). Labels go on the last block's destinations, features on the first block's
sources, edge features on each block's edges. When the step is handed over its ids become
the graph's own and :class:`~dglx_dist.api.step_rows.StepRows` starts the pull of the rows
the loop reads itself; the store's rows on the blocks are offered to the loop's reads of the
same ids (``g.ndata[name][input_nodes]`` is no second pull).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch

from dglx_dist.api.device_rows import DeviceRows, Lookup
from dglx_dist.api.graph import DistGraph
from dglx_dist.api.ndata import NodeDataView
from dglx_dist.api.samplers import edge_rows
from dglx_dist.errors import InvalidValueError, NotSupportedError
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
        delivery: where the steps go and how their rows get there (the loader's options,
            :class:`~dglx_dist.api.loader_call.Delivery`, their device decided).
    """

    def __init__(self, graph: DistGraph, sampler, delivery):
        self.graph, self.device = graph, delivery.device
        self.copies = DeviceCopies(delivery.device, delivery.pin, delivery.side_stream)
        node_sampler = getattr(sampler, "sampler", sampler)  # an edge-prediction sampler's
        self.labels = list(getattr(sampler, "prefetch_labels", None) or [])
        self.feats = list(getattr(node_sampler, "prefetch_node_feats", None) or [])
        self.edge_feats = getattr(node_sampler, "prefetch_edge_feats", None) or []
        # DGL's gpu_cache: rows kept on the device, by node data name
        self.kept = {name: self._kept(name, rows)
                     for name, rows in (delivery.gpu_cache or {}).items()}

    def _kept(self, name: str, rows: int) -> DeviceRows:
        """The ``gpu_cache`` of node data ``name``: the rows of the ``rows`` nodes of most
        out-edges, kept on the steps' device (refused where the steps do not read the
        store's rows of it)."""
        g = self.graph
        why = f"DataLoader: gpu_cache['node'][{name!r}]"
        g.refuse_types(why + " on a graph with node or edge types is not supported")
        ntype = g.node_space.ntype
        data = g.nodes[ntype].data
        if name in data and data[name]._held_by_strategy():  # (not prefetched either)
            raise NotSupportedError(f"{why}: strategy {g.strategy.registered_name!r} holds "
                                    f"{name!r} itself; expected no gpu_cache of it")
        if name not in data or name not in self.feats + self.labels:
            raise InvalidValueError(f"{why}: the steps do not read node data {name!r} "
                                    f"(their sampler prefetches {self.feats + self.labels}); "
                                    "expected one of those")
        view = data[name]
        top = torch.topk(g.out_degrees(), min(rows, g.num_nodes())).indices
        return DeviceRows(view, g.space(ntype).rows(top), self.device,
                          lambda: g.step_rows.stamp(view.name)[0])

    def start(self, step: Step | EdgeStep, store=None) -> UnderWay:
        """Starts the pulls of ``step``'s rows (collective: every rank at the same step); the
        result's ``finish`` hands the step over with them on its blocks (on the calling
        thread). ``store``: the graph's store on a worker thread's communicators
        (:meth:`~dglx_dist.kvstore.KVStore.on`), by default the graph's."""
        blocks = step_graphs(step)
        inputs = self._by_type(step.input_nodes)
        outputs = None if isinstance(step, EdgeStep) else self._by_type(step.output_nodes)
        wanted = self._wanted(inputs, outputs, blocks, store) if blocks else []

        def finish() -> Step | EdgeStep:
            edge_rows(self.graph, blocks, self.edge_feats)
            handed = self._handed(step, inputs, outputs, wanted)  # after the last step's writes
            got = [w.rows.wait() for w in wanted]
            ready = [self._copy(value) for value in got]
            placed = place_step(handed, self.device)
            for w, value in zip(wanted, ready):
                block = step_graphs(placed)[w.layer]
                frame = block.srcnodes[w.ntype] if w.side == "src" else block.dstnodes[w.ntype]
                frame.data[w.name] = value()
            for w, value in zip(wanted, got):  # the store's rows of the step's own ids,
                if w.stamp is not None and isinstance(value, torch.Tensor):  # offered to
                    ids = (inputs if w.side == "src" else outputs)[w.ntype]  # the loop's reads
                    self.graph.step_rows.offer(w.key, ids, w.stamp, value)
            return placed

        return UnderWay(finish, lambda: [w.rows.wait() for w in wanted])

    def _by_type(self, nodes) -> dict[str, torch.Tensor]:
        """A step's nodes by node type in the graph's own ids: the dict of a step with types
        as it is; a step of one type holds its partitioned ids (the one type's)."""
        if isinstance(nodes, dict):
            return nodes
        return {self.graph.node_space.ntype: self.graph.node_ids(nodes)}

    def _wanted(self, inputs: dict, outputs: dict | None, blocks: list,
                store=None) -> list[Wanted]:
        """The pulls of the step's labels and first-layer features (the store's in one
        exchange), of the node types that have them (as DGL's prefetch on a graph with
        types; the others are skipped)."""
        sides = [(0, "src", inputs, self.feats)]
        if outputs is not None:  # an edge step's labels are on its pair graph
            sides.insert(0, (-1, "dst", outputs, self.labels))
        sources = []
        for layer, side, nodes, names in sides:
            for ntype, ids in nodes.items():
                data, rows = self.graph.nodes[ntype].data, self.graph.space(ntype).rows(ids)
                for view in (data[name] for name in names if name in data):
                    where = (layer, side, ntype, view.key, view.name)
                    sources.append((where, view, *self._source(view, where, blocks[layer],
                                                               rows, store)))
        found = [None if held is not None or view.key not in self.kept else
                 self.kept[view.key].lookup(ids) for _, view, held, ids, _ in sources]
        pulled = iter(NodeDataView.start_together(  # the store's rows in one exchange
            [(view, ids if look is None else ids.index_select(0, look.miss))
             for (_, view, held, ids, _), look in zip(sources, found) if held is None], store))
        return [Wanted(*where, held if held is not None else
                       self._merged(next(pulled), self.kept.get(view.key), look),
                       stamp if look is None else None)  # (merged rows: on the device)
                for (where, view, held, _, stamp), look in zip(sources, found)]

    def _merged(self, pulled: PullUnderWay, kept: DeviceRows | None,
                look: Lookup | None) -> PullUnderWay:
        """The pull of a name's rows, merged with the kept rows where ``look`` says."""
        if look is None:
            return pulled
        return PullUnderWay(lambda: kept.merged(look, pulled.wait()))

    def _source(self, view, where: tuple, block, rows: torch.Tensor, store=None) -> tuple:
        """Where the rows of ``view`` for ``rows`` (going ``where``: layer, side, node
        type, name, store name) come from: ``(held, ids, stamp)``, ``held`` the
        strategy's own rows on their way (a first block's sources; collective), else None:
        the store's rows of ``ids``, with the pull's :meth:`StepRows.stamp`."""
        strategy, side = self.graph.strategy, where[1]
        if side == "src" and isinstance(strategy, HoldsRows):
            held = strategy.source_rows(view.name, block)
            if held is not None:
                return PullUnderWay(lambda: held), None, None
        if side == "src" and not self.graph.is_typed and block.num_src_nodes() != rows.numel():
            # a co-batch: its input nodes are its own rows among the sources
            return None, block.srcdata[NID], None
        stamp = self.graph.step_rows.stamp(view.name)
        if store is not None and stamp[0]:  # a worker thread's pull is not ordered after a
            stamp = None  # push still landing on an owner: once a name was pushed, its rows
            # stay on the blocks but answer no read of the loop (which pulls again)
        return None, rows, stamp

    def _copy(self, value) -> Callable[[], object]:
        """The copy of rows to the device, started (a handle, p3's column slice, as it is)."""
        return self.copies.start(value) if isinstance(value, torch.Tensor) else lambda: value

    def _handed(self, step: Step | EdgeStep, inputs: dict, outputs: dict | None,
                wanted: list[Wanted]) -> Step | EdgeStep:
        """``step`` with the graph's own node ids, as DGL hands them: dicts by type on a
        graph with types, the one type's ids without; the pull of the rows the loop reads
        itself with them, started (but those ``wanted`` brings)."""
        carried = frozenset((w.key, w.side) for w in wanted if w.stamp is not None)
        self.graph.step_rows.start(inputs, outputs, carried)
        if isinstance(step.input_nodes, dict):
            return step
        one = self.graph.node_space.ntype
        if isinstance(step, EdgeStep):
            return step._replace(input_nodes=inputs[one])
        return step._replace(input_nodes=inputs[one], output_nodes=outputs[one])
