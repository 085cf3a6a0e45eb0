"""Dorylus's interval pipeline on one graph server (bounded pipeline asynchronous computation):
each vertex interval walks a program of stages (the conv type's
:class:`~dglx_dist.convs.dorylus_base.LayerKind` says what each computes); this module runs
the graph stages here, the tensor stages through the
:class:`~dglx_dist.offload.controller.TaskController`, gates stages (``mode``, ``staleness``)
and moves the scatters' messages. The programs, the modes and the weight update:
docs/strategies/dorylus.md, "What it does".
"""
from __future__ import annotations

import dataclasses
import time
from typing import Iterator

import torch

from dglx_dist.errors import DeadlineError, InternalError
from dglx_dist.runtime.comm import Comm, Transfer
from dglx_dist.strategies.dorylus.graph import GraphServer
from dglx_dist.convs.dorylus_base import LayerKind, Stage
from dglx_dist.strategies.dorylus.params import Applied, WeightUpdates

__all__ = ["Pipeline", "TensorSpec"]

GRAPH_KINDS = ("GA", "SC", "BGA", "BSC")
_DIRS = {"train": 0, "eval": 2}  # tag spaces: forward = base, backward = base + 1


@dataclasses.dataclass
class _Interval:
    index: int
    epoch: int = -1
    stage: int = 0
    busy: bool = False
    version: int = -1
    ps: int = 0
    finished: bool = True  # done with ``epoch``


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """What the tensor tasks need besides weights: dropout per layer and its seed; and the
    tasks the conv type's kind may submit (its adapter's ``dorylus.tasks``; empty: any)."""

    dropout: tuple[float, ...]
    seed: int
    tasks: frozenset[str] = frozenset()


class Pipeline:
    """Runs programs over the intervals of one graph server (see the module docstring).

    Args:
        gs: the graph server (partition, routes, graph tasks).
        controller: the task controller for tensor tasks.
        comm: the group the scatters go through.
        layers: the conv type's buffers, graph tasks, messages and requests
            (:class:`~dglx_dist.convs.dorylus_base.LayerKind`).
        num_layers: layers of the model.
        ps: the parameter servers (weights by version, stashes, :meth:`checkout`).
        timeout: seconds without progress before the run fails naming what it waits for.
    """

    def __init__(self, gs: GraphServer, controller, comm: Comm, layers: LayerKind,
                 num_layers: int, ps, timeout: float):
        self.gs, self.ctl, self.comm, self.ps, self.layers = gs, controller, comm, ps, layers
        self.L, self.timeout = num_layers, timeout
        self._sends: list[Transfer] = []
        self._recvs: dict[tuple, Transfer] = {}
        self._recv_epoch: dict[tuple, int] = {}
        self._waiting: dict[tuple, int] = {}  # (space, epoch, layer) -> receives not in yet
        self._routes = {(back, r.peer, r.interval): r
                        for back, routes in ((False, gs.fwd_recv), (True, gs.bwd_recv))
                        for r in routes}

    # -- messages ------------------------------------------------------------------------------
    def _tag(self, space: int, epoch: int, layer: int, interval: int) -> int:
        tag = ((epoch * 4 + space) * self.L + layer) * self.gs.num_intervals + interval
        return tag % (1 << 30)

    def _post_recvs(self, space: int, epoch: int, program: list[Stage]) -> None:
        for st in program:
            if st.kind not in ("SC", "BSC"):
                continue
            back = st.kind == "BSC"
            routes = self.gs.bwd_recv if back else self.gs.fwd_recv
            for r in routes:
                tag = self._tag(space + back, epoch, st.layer, r.interval)
                buf = torch.empty(self.layers.recv_numel(back, st.layer, r))
                self._recvs[(space + back, epoch, st.layer, r.peer, r.interval)] = \
                    self.comm.start_recv(buf, r.peer, tag)
                key = (space + back, epoch, st.layer)
                self._waiting[key] = self._waiting.get(key, 0) + 1

    def _poll_recvs(self) -> bool:
        got = False
        for key in [k for k, t in self._recvs.items() if t.done()]:
            t = self._recvs.pop(key)
            space, epoch, layer, peer, interval = key
            self._waiting[(space, epoch, layer)] -= 1
            back = space % 2 == 1
            slot = (space, layer, peer, interval)
            if self._recv_epoch.get(slot, -1) <= epoch:  # never overwrite newer rows
                self._recv_epoch[slot] = epoch
                self.layers.unpack(back, layer, self._routes[(back, peer, interval)], t.tensor)
            got = True
        return got

    def _scatter(self, space: int, epoch: int, st: Stage, i: int) -> None:
        back = st.kind == "BSC"
        for r in (self.gs.bwd_send if back else self.gs.fwd_send):
            if r.interval == i:
                tag = self._tag(space + back, epoch, st.layer, i)
                msg = self.layers.pack(back, st.layer, r).contiguous()
                self._sends.append(self.comm.start_send(msg, r.peer, tag))

    def _layer_complete(self, space: int, epoch: int, layer: int, back: bool,
                        done: dict) -> bool:
        """Sync gating: every interval here and every message for this layer arrived."""
        if done.get((back, layer), 0) < self.gs.num_intervals:
            return False
        return self._waiting.get((space + back, epoch, layer), 0) == 0

    # -- tensor tasks --------------------------------------------------------------------------
    def _submit(self, key, st: Stage, it: _Interval, train: bool, extra: dict) -> None:
        weights = self.ps.weights(it.ps, it.version)
        header, arrays = self.layers.request(st, it.index, it.epoch, weights, train, extra)
        tasks = self.layers.spec.tasks
        if tasks and header.get("op") not in tasks:
            raise InternalError(f"{type(self.layers).__name__} submitted tensor task "
                                f"{header.get('op')!r} for stage {st.kind}{st.layer}; its conv "
                                f"type's tasks are {sorted(tasks)} (dglx_dist.convs)")
        self.ctl.submit(key, header, arrays)

    # -- the loop ------------------------------------------------------------------------------
    def run(self, program: list[Stage], epochs: range, *, train: bool, sync: bool,
            extra: dict | None = None) -> dict:
        """Runs ``program`` for every interval and epoch in ``epochs`` (no weight updates in
        between); returns the accumulators: ``grads`` and ``loss`` per epoch, ``logits``."""
        acc = self._accumulators()
        for _ in self._walk(program, epochs, acc, train, sync, 0, extra or {}, None):
            pass  # yields only applied weight updates, of which there are none
        return acc

    def train(self, program: list[Stage], epochs: range, updates: WeightUpdates, *,
              sync: bool, staleness: int, extra: dict) -> Iterator[Applied]:
        """Runs the training ``program`` for every interval and epoch in ``epochs``, yielding
        each epoch's :class:`~dglx_dist.strategies.dorylus.params.Applied` update once it is
        applied (the pipeline is suspended until the caller asks for more).

        ``updates``: ``epoch_done(e, acc)`` is called once every interval here finished epoch
        e (it starts the weight update), ``poll()`` advances updates under way and returns one
        once applied, and ``applied`` is the last epoch whose update is applied;
        intervals start epoch e only once epoch e-1-S is applied, and the run ends once the
        last is.
        """
        yield from self._walk(program, epochs, self._accumulators(), True, sync, staleness,
                              extra, updates)

    def _accumulators(self) -> dict:
        return {"grads": {}, "loss": {},
                "logits": torch.zeros(self.gs.n, self.layers.logits_width)}

    def _walk(self, program: list[Stage], epochs: range, acc: dict, train: bool, sync: bool,
              staleness: int, extra: dict, updates: WeightUpdates | None) -> Iterator[Applied]:
        space = _DIRS["train" if train else "eval"]
        its = [_Interval(i) for i in range(self.gs.num_intervals)]
        counts: dict[int, dict] = {}
        posted: set[int] = set()
        bound = 0 if sync else staleness
        last_progress = last_tune = time.monotonic()
        while True:
            progressed = self._poll_recvs()
            applied = updates.poll() if updates is not None else None
            if applied is not None:
                progressed = True
                yield applied
            progressed = self._take_results(its, program, acc) or progressed
            for it in sorted(its, key=lambda t: (t.epoch, t.stage)):
                if it.busy:
                    continue
                if it.stage == len(program) and not it.finished:
                    self._end_epoch(it, counts.setdefault(it.epoch, {}), len(its), acc, updates)
                    progressed = True
                if it.finished:
                    if not self._begin_epoch(it, program, epochs, space, bound, posted, updates):
                        continue
                    progressed = True
                st, cnt = program[it.stage], counts.setdefault(it.epoch, {})
                if st.gate is not None and (sync or it.epoch == epochs.start):
                    back, need = st.gate
                    if not self._layer_complete(space, it.epoch, need, back, cnt):
                        continue
                progressed = True
                if st.kind in GRAPH_KINDS:
                    self._graph_task(space, st, it, cnt)
                    it.stage += 1
                    break  # poll results between graph tasks
                it.busy = True
                self._submit(("dorylus", it.epoch, it.index, it.stage), st, it, train, extra)
            self._sends = [t for t in self._sends if not t.done()]
            if all(it.finished and it.epoch == epochs.stop - 1 for it in its) and \
                    (updates is None or updates.applied >= epochs.stop - 1):
                break
            now = time.monotonic()
            if now - last_tune > 0.05:
                self.ctl.observe_queue(self._graph_ready(its, program))
                last_tune = now
            if progressed:
                last_progress = now
            elif now - last_progress > self.timeout:
                self._stalled(now - last_progress, updates)
            elif self.ctl.in_flight:
                self.ctl.wait_any(0.002)
            else:  # waiting on peers' messages or the weight update: yield the core to them
                time.sleep(0.0005)
        self._drain()

    def _take_results(self, its: list[_Interval], program: list[Stage], acc: dict) -> bool:
        """Hands finished tensor tasks to the layers and moves their intervals on; True if any."""
        progressed = False
        for key, _, out in self.ctl.poll():
            it = its[key[2]]
            self.layers.result(program[key[3]], it.index, it.epoch, out, acc)
            it.busy, it.stage, progressed = False, it.stage + 1, True
        return progressed

    def _end_epoch(self, it: _Interval, cnt: dict, num_intervals: int, acc: dict,
                   updates: WeightUpdates | None) -> None:
        """``it`` ran the whole program for its epoch; the last interval starts the update."""
        it.finished = True
        cnt["end"] = cnt.get("end", 0) + 1
        self.ps.release(it.ps, it.version)
        if cnt["end"] == num_intervals and updates is not None:
            updates.epoch_done(it.epoch, acc)

    def _begin_epoch(self, it: _Interval, program: list[Stage], epochs: range, space: int,
                     bound: int, posted: set[int], updates: WeightUpdates | None) -> bool:
        """Starts ``it``'s next epoch (posting that epoch's receives once); False when there is
        none or the staleness bound holds it back."""
        nxt = epochs.start if it.epoch < 0 else it.epoch + 1
        if nxt >= epochs.stop or (updates is not None and nxt > epochs.start and
                                  updates.applied < nxt - 1 - bound):
            return False
        if nxt not in posted:
            self._post_recvs(space, nxt, program)
            posted.add(nxt)
        it.epoch, it.stage, it.finished = nxt, 0, False
        it.ps, it.version = self.ps.checkout()
        return True

    @staticmethod
    def _graph_ready(its: list[_Interval], program: list[Stage]) -> int:
        """Intervals whose next stage is a graph task they could run now."""
        return sum(1 for it in its if not it.busy and not it.finished
                   and it.stage < len(program) and program[it.stage].kind in GRAPH_KINDS)

    def _graph_task(self, space: int, st: Stage, it: _Interval, cnt: dict) -> None:
        self.layers.graph_task(st, it.index)
        if st.kind in ("SC", "BSC"):
            self._scatter(space, it.epoch, st, it.index)
            key = (st.kind == "BSC", st.layer)
            cnt[key] = cnt.get(key, 0) + 1

    def _stalled(self, waited: float, updates: WeightUpdates | None) -> None:
        """No progress for ``waited`` seconds: what the run waits on from its peers (messages,
        then a weight update's all-reduce) fails as a collective that timed out, naming the
        rank that failed (:meth:`~dglx_dist.runtime.comm.Comm.stalled`); with nothing from
        peers outstanding, the executor is what stalled."""
        peers = [*self._recvs.values(), *(t for t in self._sends if not t.done()),
                 *(updates.in_flight() if updates is not None else ())]
        if peers:
            raise peers[0].fail(waited)
        raise DeadlineError(f"dorylus pipeline on rank {self.comm.global_rank}: no progress for "
                            f"{waited:.0f}s with {self.ctl.in_flight} invocations in flight")

    def _drain(self) -> None:
        deadline = time.monotonic() + self.timeout
        for t in self._sends + list(self._recvs.values()):
            while not t.done():
                if time.monotonic() > deadline:
                    raise t.fail(self.timeout)
                time.sleep(0.001)
        self._sends, self._recvs, self._waiting = [], {}, {}
