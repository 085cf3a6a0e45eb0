"""``DataLoader``: DGL's node and edge data loaders over a :class:`~dglx_dist.api.DistGraph`.

It has the signature of ``dgl.dataloading.DataLoader`` (and DistDGL's ``DistNodeDataLoader``)
and yields ``(input_nodes, output_nodes, blocks)``; given ``as_edge_prediction_sampler`` (the
package's or DGL's) and edge ids, ``(input_nodes, pair_graph, neg_pair_graph, blocks)``
(:mod:`dglx_dist.api.link`): the package's blocks and pair graphs (DGL's loaders of these
names, in :mod:`dglx_dist.dgl`, hand a DGL script DGL's). What a step holds is the
strategy's. Building one is collective and checks the call on every rank first; every rank
takes the same number of steps per epoch (docs/porting.md: the ``DataLoader`` row, "Every
rank takes the same number of steps"; docs/architecture.md).
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import time
import warnings
from typing import Iterator

import torch

from dglx_dist.api.book import given_node_ids
from dglx_dist.api.graph import DistGraph
from dglx_dist.api.link import as_edge_prediction_sampler, is_edge_sampler
from dglx_dist.api.loader_call import call_options, call_signature, checked_call
from dglx_dist.api.pipeline import FedPairs, Lane, Worker
from dglx_dist.api.prefetch import Prefetch
from dglx_dist.api.split import edge_share, node_share
from dglx_dist.errors import InvalidTypeError, InvalidValueError, NotSupportedError
from dglx_dist.runtime.agree import differing_ranks, ids_digest, on_every_rank, same_call
from dglx_dist.sampling import even_chunk
from dglx_dist.strategies.abilities import DrawsOffThread
from dglx_dist.strategies.base import SetupRequest, implied_layers
from dglx_dist.strategies.steps import (EdgeStep, LoaderSpec, Step, UnderWay,
                                        sampled_epoch, sampled_plan)

__all__ = ["DataLoader", "DistNodeDataLoader", "DistEdgeDataLoader", "LoaderTimes"]


@dataclasses.dataclass
class LoaderTimes:
    """Seconds a loader's epoch spent, by what (:attr:`DataLoader.times`, the last
    iteration's; ``dglx bench``'s phases read them through the Trainer).

    Attributes:
        draw: the draws of its steps, the sampler's exchanges included, on whichever thread
            drew them (a worker thread's overlap the loop).
        start: the starts of the steps' pulls (planning them, reading the own server's rows,
            sending the requests and answering the peers'), on whichever thread; on a worker
            thread whose store finishes its pulls with exchanges of their own
            (``KVStore.finish_exchanges``), their finish too.
        start_here: of ``start``, what ran on the calling thread: part of the wait for each
            step the loop sees.
        rows: the hand-overs' wait for the steps' rows (and their copies to the device), on
            the calling thread: part of the wait for each step the loop sees too.
        begin: the strategy's work before the first step (``loader_epoch_start``: distdgl's
            cache fill), on the calling thread.
    """

    begin: float = 0.0
    draw: float = 0.0
    start: float = 0.0
    start_here: float = 0.0
    rows: float = 0.0

    def started(self, step, prefetch, store=None, here: bool = True):
        """``prefetch.start(step, store)``, timed (``start``; ``start_here`` too when ``here``)."""
        t0 = time.perf_counter()
        under = prefetch.start(step, store)
        took = time.perf_counter() - t0
        self.start += took
        self.start_here += took if here else 0.0
        return under


class DataLoader:
    """Mini-batches of a distributed graph's nodes, as ``dgl.dataloading.DataLoader``.

    Args:
        graph: the :class:`~dglx_dist.api.DistGraph`.
        indices: node ids to iterate (or a boolean mask): this rank's share (from
            :func:`~dglx_dist.api.node_split`), or the same ids on every rank, split here;
            edge ids (or an edge mask) with an edge-prediction sampler
            (:func:`~dglx_dist.api.edge_split`); on a graph with types, a dict of node
            (edge) type -> ids, per-type ids.
        graph_sampler: a :class:`~dglx_dist.api.NeighborSampler` or
            ``MultiLayerFullNeighborSampler`` (the package's, or DGL's), another DGL sampler
            (:func:`~dglx_dist.api.samplers.user_sampler`), or an
            ``as_edge_prediction_sampler`` of one (the package's or DGL's).
        batch_size: output nodes (edges) per batch.
        shuffle: reshuffle every epoch.
        drop_last: drop the last partial batch.
        device: where the steps' blocks and prefetched rows go (DGL's); by default the
            strategy's device (the rank's GPU in a GPU job, see
            :meth:`~dglx_dist.strategies.base.Strategy.compute_device`); ids stay on the host.
            A CUDA device the rank does not have is refused.
        use_ddp: split ``indices`` among the ranks (DGL's meaning); also done when they are
            the same on every rank.
        ddp_seed: the shuffling seed (also ``seed=``).
        use_prefetch_thread: False (and ``num_workers=0``): each step is drawn and its
            rows pulled when it is asked for, in turn with the loop. True (by default where
            the steps go to a GPU, as in DGL; or ``num_workers`` > 0): a worker thread
            draws the next ``prefetch_factor`` steps and starts the pulls of their
            rows while the loop computes (its exchanges on communicators of its own:
            :mod:`dglx_dist.api.pipeline`), where the strategy can draw off the calling
            thread (:class:`~dglx_dist.strategies.abilities.DrawsOffThread`; an edge
            loader's pairs are made on the calling thread, its blocks on the worker; not yet
            a user sampler's steps). Otherwise (by default on a CPU) the loader looks
            ``prefetch_factor`` steps ahead on the calling thread: the next steps drawn and
            their rows on their way before it hands this one over. The batches are the same
            every way
            (docs/porting.md says what a loop that writes rows sees).
        num_workers: DGL's sampler processes: with more than 0, that many processes per
            rank draw the steps (step ``i`` by process ``i % num_workers``, each
            ``prefetch_factor`` steps ahead) and the worker thread starts their rows' pulls
            (:mod:`dglx_dist.api.workers`); where the steps cannot be drawn off the calling
            thread, none run (said once, with a warning).
        prefetch_factor: how many steps the worker thread may draw ahead of the loop, or
            the calling thread draws ahead where there is no worker (DGL's; default 2).
        whole_degrees: dglx_dist's own (a graph without types): the blocks of full layers
            carry their sources' out-degrees in the whole graph, so a GraphConv normalises as
            on the whole graph; by default by the block's edges, as in DGL.
        **kwargs: DGL's ``pin_prefetcher`` and ``use_alternate_streams`` (rows reach a GPU
            from pinned memory, on a copy stream of their own; by default where the steps go
            to a GPU), ``persistent_workers`` (with ``num_workers`` > 0: the worker's
            communicators are kept between epochs, as they always are), ``use_uva`` (needs a
            GPU: the steps are drawn there, by a copy of the sampler whose structure is in
            its memory: :meth:`~dglx_dist.sampling.sampler.BlockSampler.to`; the steps' ids
            stay on the host) and ``gpu_cache`` (node data rows kept on the GPU:
            :mod:`~dglx_dist.api.device_rows`); :class:`~dglx_dist.api.loader_call.Delivery`.
    """

    def __init__(self, graph: DistGraph, indices, graph_sampler, device=None,
                 use_ddp: bool = False, ddp_seed: int = 0, batch_size: int = 1,
                 drop_last: bool = False, shuffle: bool = False,
                 use_prefetch_thread: bool | None = None, whole_degrees: bool = False,
                 num_workers: int = 0, prefetch_factor: int | None = None, **kwargs):
        kwargs.update({} if device is None else {"device": device})
        seed = int(kwargs.pop("seed", ddp_seed))
        if not isinstance(graph, DistGraph):
            raise InvalidTypeError(f"dglx_dist.DataLoader needs the graph dglx_dist.distribute (or "
                                   f"DistGraph) returned; got {type(graph).__name__}")
        session = graph.session
        depth, delivery = call_options(kwargs, num_workers, prefetch_factor)
        self.graph, self.sampler = graph, graph_sampler
        # collective, in this order: the arguments' check, the call's signature (ranks building
        # other loaders here stop, naming both), the ids' check and whether they are the same
        # on every rank, the strategy's setup (the first loader), and the loader's plan
        fields = on_every_rank(session, "DataLoader", lambda: checked_call(
            graph, graph_sampler, batch_size, whole_degrees))
        spec = self.spec = LoaderSpec(batch_size=int(batch_size), shuffle=bool(shuffle),
                                      drop_last=bool(drop_last), seed=seed,
                                      whole_degrees=bool(whole_degrees), **fields)
        # (how deep it draws is part of the call: a worker's groups are made collectively)
        lookahead = use_prefetch_thread is not False or bool(num_workers)
        asked = bool(num_workers) or bool(use_prefetch_thread)  # None: DGL's default, below
        pairs, call = spec.pairs, call_signature(spec, graph_sampler, lookahead, depth, asked,
                                                  int(num_workers))
        same_call(session, call)
        ids, every = self._own_ids(indices, use_ddp, edges=pairs is not None)
        layers = len(spec.fanouts) or implied_layers(graph.strategy) or 2
        self.strategy = graph.setup(SetupRequest(layers, by=call))
        # ids the same on every rank, unshuffled, into sampled blocks: DGL's use_ddp split, a
        # contiguous run of them per rank, in their order, batches in that order (a
        # layer-wise inference over arange(N) writes y[output_nodes[0]:output_nodes[-1] + 1])
        run = None if every is None or spec.shuffle else \
            even_chunk(every, session.world_size, session.rank)
        if run is not None and self.strategy.capabilities.draws_blocks:
            ids = run
        part_ids = graph.part_ids(ids) if ids is run else \
            ids if pairs else graph.part_ids(ids).sort().values
        plan = on_every_rank(session, "DataLoader",
                             lambda: self.strategy.loader_plan(part_ids, self.spec))
        self._own = plan is not None
        if spec.whole_degrees and not self._own:
            raise NotSupportedError(f"{call}: strategy {self.strategy.registered_name!r} "
                                    f"samples these blocks as DGL does; whole_degrees needs "
                                    f"a strategy that draws them itself (distdgl, p3)")
        if not self._own and run is not None:  # a strategy's own split, but sampled blocks
            ids, part_ids = run, graph.part_ids(run)
        self.plan = plan if self._own else sampled_plan(session.world, part_ids, self.spec)
        self.indices, self.epoch, self.lookahead = ids, 0, lookahead
        self.delivery = delivery.on(delivery.device or self.strategy.compute_device(session))
        self.device = self.delivery.device
        self.prefetch = Prefetch(graph, graph_sampler, self.delivery)
        self.depth, self.times = depth, LoaderTimes()
        # DGL's use_uva: the calling thread's sampler on the steps' GPU (a worker's: below)
        self._on_device = self._uva_sampler(call) if self.delivery.uva else None
        # DGL's default: the thread where the steps go to a GPU (on a CPU the model's step
        # and the draws share the cores; the loader looks ahead on the calling thread)
        threaded = asked or (use_prefetch_thread is None and self.device.type == "cuda")
        self._threaded = self._off_thread(threaded, num_workers, call)  # (collective)

    def _drawer(self, twin):
        """The sampler the steps are drawn with, exchanging on ``twin(comm)`` where it
        exchanges on ``comm``: the strategy's, or the graph's where the loader's steps are
        DGL's sampled ones; None where they cannot be drawn off the calling thread (a
        user's sampler seeds torch's global generator; a strategy that draws in turn)."""
        if self._own:
            return self.strategy.thread_sampler(self.spec, twin) if \
                isinstance(self.strategy, DrawsOffThread) else None
        return None if self.spec.draw is not None else self.graph.sampler().on(twin)

    def _uva_sampler(self, call: str):
        """The calling thread's sampler on the steps' GPU (``use_uva=True``); refused where
        the steps are not drawn by the package's samplers."""
        sampler = self._drawer(lambda comm: comm)
        if sampler is None:
            who = "a user's sampler" if self.spec.draw is not None else \
                f"strategy {self.strategy.registered_name!r}"
            raise NotSupportedError(f"{call}: use_uva=True draws the steps on the GPU with the "
                                    f"package's samplers, and {who} draws them on the host; "
                                    "expected use_uva=False")
        return sampler.to(self.device)

    def _off_thread(self, threaded: bool, num_workers: int, call: str):
        """:meth:`_thread_parts` where a worker thread draws this loader's steps (``threaded``
        and the strategy draws ahead), else None; said once where ``num_workers`` asked for
        processes and none run."""
        parts = None
        if threaded and self.lookahead and not self.strategy.capabilities.steps_in_turn:
            parts = self._thread_parts(num_workers)
        if num_workers and parts is None and self.graph.session.is_main:
            warnings.warn(f"{call}: num_workers={num_workers}: strategy "
                          f"{self.strategy.registered_name!r} draws these steps on the calling "
                          f"thread (a user's sampler, or a strategy that draws in turn); no "
                          f"sampler processes run", stacklevel=3)
        return parts

    def _thread_parts(self, num_workers: int):
        """What this loader's worker thread draws and pulls with (on the graph's
        :class:`~dglx_dist.api.pipeline.Lane`): the sampler, or with ``num_workers`` the
        lane's sampler processes (:class:`~dglx_dist.api.workers.SamplerProcs`), and the
        store; or None: its steps are drawn on the calling thread (collective: the lane's groups and processes
        are made on first use)."""
        if self._drawer(lambda comm: comm) is None:  # (nothing exchanged to know it)
            return None
        lane = _lane(self.graph)
        if num_workers:
            procs = lane.procs(num_workers, self.depth, self._own,
                               lambda: self._drawer(lambda comm: comm))
            return lane, procs, self.graph.store.on(lane.twin)
        sampler = self._drawer(lane.twin)
        if self.delivery.uva:
            sampler = sampler.to(self.device)
        return lane, sampler, self.graph.store.on(lane.twin)

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration is (DGL's ``set_epoch``: it seeds the shuffling and
        sampling); by default each iteration is the one after the last."""
        self.epoch = int(epoch)

    def _own_ids(self, indices, use_ddp: bool,
                 edges: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """This rank's node (edge) ids: its share when every rank passed the same ids (or
        ``use_ddp``), else the ids as given (collective); and all of the ids (sorted) where
        they were node ids split here (on a graph without types), else None."""
        g, session = self.graph, self.graph.session

        def read() -> torch.Tensor:
            # (per-type) ids in, original homogeneous ids out
            return self.spec.pairs.read_ids(indices) if edges else given_node_ids(g, indices)

        ids = on_every_rank(session, "DataLoader", read)
        same = not differing_ranks(session, ids_digest(ids))
        if use_ddp or (same and session.world_size > 1):
            every = torch.unique(ids)
            share = (edge_share if edges else node_share)(every, g)
            return share, None if edges or g.is_typed else every
        return ids, None

    def __len__(self) -> int:
        return self.plan.steps

    def __iter__(self) -> Iterator[tuple]:
        epoch, self.epoch = self.epoch, self.epoch + 1
        self.times = LoaderTimes()
        if self._own:
            t0 = time.perf_counter()
            self.strategy.loader_epoch_start(self.spec)
            self.times.begin = time.perf_counter() - t0
        ahead = self.lookahead and not self.strategy.capabilities.steps_in_turn
        # the lane is free unless another loader's loop runs around this one (the calling
        # thread decides, at the same step on every rank): then this one looks ahead here
        if self._threaded is not None and self._threaded[0].take():
            steps = self._pipelined(epoch)
        else:
            steps = self._here(self._drawn(epoch), self.depth if ahead else 0)
        for step in steps:
            if isinstance(step, EdgeStep):
                pairs = (step.pair_graph,) if step.neg_pair_graph is None else \
                    (step.pair_graph, step.neg_pair_graph)
                yield step.input_nodes, *pairs, step.blocks
            else:
                yield step.input_nodes, step.output_nodes, step.blocks
        self.graph.step_rows.settle()
        if self._own:
            self.strategy.loader_epoch_done(self.spec)
        # every rank takes the same steps: once all have finished the loop body of the last
        # one, what they wrote during the epoch (a layer-wise inference's DistTensor rows) is
        # where every rank reads it
        self.graph.barrier()

    def _drawn(self, epoch: int, sampler=None, spec=None) -> Iterator[Step | EdgeStep]:
        """The epoch's steps, drawn by ``sampler`` (a worker thread's, with ``spec``: its
        pairs fed) or the strategy's, each draw timed (``times.draw``)."""
        spec, sampler = spec or self.spec, sampler or self._on_device
        if self._own:
            steps = self.strategy.loader_epoch(self.plan, spec, epoch) if sampler is None \
                else self.strategy.loader_epoch(self.plan, spec, epoch, sampler=sampler)
        else:
            steps = sampled_epoch(sampler or self.graph.sampler(), self.graph.session.rank,
                                  self.plan, spec, epoch)
        times = self.times
        while True:
            t0 = time.perf_counter()
            step = next(steps, None)
            times.draw += time.perf_counter() - t0
            if step is None:
                return
            yield step

    def _handed(self, under: UnderWay) -> Step | EdgeStep:
        """``under`` handed over (its rows waited for: ``times.rows``)."""
        t0 = time.perf_counter()
        step = under.finish()
        self.times.rows += time.perf_counter() - t0
        return step

    def _pipelined(self, epoch: int) -> Iterator[Step | EdgeStep]:
        """Each step of ``epoch`` with its rows, drawn and its pulls started on a worker
        thread, :attr:`depth` steps ahead (:mod:`dglx_dist.api.pipeline`), handed over here;
        the lane given back at the end."""
        lane, sampler, store = self._threaded
        session, done = self.graph.session, False
        wait = session.env.timeout + 30
        try:
            # an edge loader's pairs are made here, as the worker is allowed each step (and
            # the steps its sampler reads ahead of the one it draws: its window)
            fed = None if self.spec.pairs is None else \
                FedPairs(self.spec, self.plan, epoch, session.rank, wait)
            for _ in range(sampler.window - 1 if fed is not None else 0):
                fed.allow()
            spec = self.spec if fed is None else dataclasses.replace(self.spec, pairs=fed)
            started = (self.times.started(step, self.prefetch, store, here=False)
                       for step in self._drawn(epoch, sampler, spec))
            if store.finish_exchanges:  # (a server's ranks pass each other their rows)
                started = map(self._settled, started)
            worker = Worker(started, self.depth, session.rank, wait,
                            allow=None if fed is None else fed.allow)
        except BaseException:
            lane.give_back()
            raise
        # an iterator a script still holds at exit: the worker finishes the steps it was
        # allowed before the groups go (every rank's worker draws the same ones)
        closer = functools.partial(worker.close, _drain)
        session.add_closer(closer)
        try:
            for under in worker:
                yield self._handed(under)
            done = True
        finally:
            # a loop left early (a break on every rank, or an error on this one; not at
            # exit, where the session went first): every rank's worker draws the steps it
            # was allowed and their pulls are waited for, so no peer waits on this rank.
            # After a peer's failure nothing is waited for: its steps never come, and the
            # launcher's signal must not find this rank still waiting in a generator's close
            session.remove_closer(closer)
            if not done and session.is_open and session.failure is None:
                worker.close(_drain)
                self.graph.step_rows.leave_loop(())
            elif not done:
                worker.stop()
            lane.give_back()

    def _settled(self, under: UnderWay) -> UnderWay:
        """``under`` with its rows waited for on the worker thread, whose communicators
        their pull finishes on (timed as its starts: ``times.start``)."""
        t0 = time.perf_counter()
        under.drain()
        self.times.start += time.perf_counter() - t0
        return under

    def _here(self, steps: Iterator[Step | EdgeStep],
              ahead: int) -> Iterator[Step | EdgeStep]:
        """Each step with its rows, drawn on the calling thread: in turn (``ahead`` 0: each
        when the previous one is done), or ``ahead`` steps ahead: before a step is handed
        over, the next ``ahead`` ones are drawn and their rows are on their way, so they
        travel while the caller computes this one and while the steps after are drawn (the
        store's pulls have groups of their own, so the sampler's exchanges do not wait for
        them)."""
        def start() -> UnderWay | None:  # the next step drawn, its rows' pulls started
            step = next(steps, None)
            return None if step is None else self.times.started(step, self.prefetch)

        pending: collections.deque[UnderWay] = collections.deque()
        under = start()
        while under is not None:
            ready = self._handed(under)  # starts the pull of the rows the loop reads itself,
            while len(pending) < ahead and (after := start()) is not None:  # which travel
                pending.append(after)  # while the steps after are drawn
            try:
                yield ready
            except GeneratorExit:  # the caller left the loop (a break, or an error); not
                if self.graph.session.is_open:  # at exit: the session went first
                    self.graph.step_rows.leave_loop(pending)
                raise
            if not ahead and (after := start()) is not None:  # in turn: once it is done
                pending.append(after)
            under = pending.popleft() if pending else None


def _drain(under: UnderWay) -> None:
    under.drain()


def _lane(graph: DistGraph) -> Lane:
    """The graph's loader lane (made by its first loader that draws on a worker thread)."""
    if graph.loader_lane is None:
        graph.loader_lane = Lane(graph.session)
    return graph.loader_lane


DistNodeDataLoader = DataLoader
"""DGL's distributed name for the same loader."""

_EDGE_SAMPLER_ARGS = ("exclude", "reverse_eids", "reverse_etypes", "negative_sampler")


class DistEdgeDataLoader(DataLoader):
    """DGL's distributed link-prediction loader: :class:`DataLoader` over edge ids, with DGL's
    signature. A block sampler comes with the edge-prediction options (``exclude``,
    ``reverse_eids``, ``reverse_etypes``, ``negative_sampler``) among the keyword arguments
    and is wrapped with :func:`~dglx_dist.api.link.as_edge_prediction_sampler`, as DGL's
    loader does; a sampler wrapped already (the package's or DGL's) is used as it is."""

    def __init__(self, g: DistGraph, eids, graph_sampler, device=None, **kwargs):
        options = {k: kwargs.pop(k) for k in _EDGE_SAMPLER_ARGS if k in kwargs}
        if not is_edge_sampler(graph_sampler):
            graph_sampler = as_edge_prediction_sampler(graph_sampler, **options)
        elif options:
            raise InvalidValueError(f"DistEdgeDataLoader: {sorted(options)} given with a "
                                    "sampler that as_edge_prediction_sampler wrapped already; "
                                    "pass them to that call only")
        super().__init__(g, eids, graph_sampler, device, **kwargs)
