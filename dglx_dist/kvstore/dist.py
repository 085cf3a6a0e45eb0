"""The distributed store: parts in shared memory on their servers, remote rows via the comm layer.

**Placement.** A policy with one part per server puts part ``p`` on server ``p``, shared by the
server's ranks (DistDGL); a policy with one part per rank puts part ``p`` on rank ``p``'s server
(a server then holds ``ranks_per_server`` parts). Any other part count is an error.

**Shared memory.** For every part a server holds, one rank of the server (the lowest local rank
that passed the part's rows to ``init_data``, else local rank 0) creates the part's tensor in a
file under ``/dev/shm`` named by a per-job token and fills it; the server's other ranks map the
same file; then it is unlinked (:class:`~dglx_dist.kvstore.shm.SharedParts`). Rows of parts on the caller's own server are read straight
from that memory: no comm call, no bytes counted.

**What is collective.** ``DistKVStore(session)``, ``init_data`` and ``close`` are collective;
``pull`` and ``push`` are too by default (``collective=True``): every rank of the job calls them
the same number of times in the same order (the fast path of training steps). A rank with
nothing to fetch or write passes empty ids; ranks may use *different* names (and ops) in the
same step, because requests carry the name's (and op's) registration index, which is why names
and ops must be registered in the same order everywhere. A rank whose arguments are bad still
takes part with an empty request, then raises.

**Non-collective.** ``pull(..., collective=False)`` and ``push(..., collective=False)`` involve
only the caller: every rank of a store built with ``serve=True`` (not the default: stores used
only collectively need no thread; with more than one rank) runs a serving thread on a process group of the store's own, which answers
requests for its server's rows from the shared memory (a :class:`~dglx_dist.kvstore.serve.Server`). A
pull sends each other server's ids to ONE rank there, the one with the caller's local index (as
``cross`` does), as a header plus the raw ids, and gets the rows back as raw bytes; own-server
rows are read locally meanwhile. A push goes to the rows' writers as below (rows this rank
writes itself are applied at once), each writer applies it and acknowledges, so when the call
returns a pull from any rank sees the values. The serving thread and the main thread of a rank
never apply at the same time (a lock); a collective push and non-collective pushes of other
ranks to the same rows are not ordered, and a pull may read rows while they are written (as in
DistDGL). ``close()`` waits for every rank (a barrier), then stops the threads; a store nobody
closed is stopped by the session's clean shutdown.

**Pull.** The requested ids are deduplicated (``torch.unique``; ``dedup=False`` skips that for
ids known to be unique, such as a block's input nodes, and writes rows straight into request
order instead of gathering them from a deduplicated buffer at the end); ids held by the own
server are read from shared memory (while the answers from other servers travel); the others
are grouped by owning server and sent to the ranks with this rank's local index on every
server (``session.cross``'s members, on process groups of the store's own, so that other
exchanges on ``cross`` do not queue behind rows under way) with ``all_to_all_v``: per
non-empty destination one int64 tensor ``[name_index, *ids]`` (so a request costs
``8 * (1 + unique ids)`` bytes). The peer reads its shared memory and answers with the rows
as raw bytes (uint8), so row widths may differ per peer; the caller scatters them back into
request order. A pull costs two ``all_to_all_v`` calls whenever the job has more than one
server; the answers' exchange skips the round of counts, since every caller knows how many
bytes it asked for. ``start_pull`` returns once the answers are on their way (own rows
read); waiting for it scatters them.

**Push.** Values of duplicate ids are combined first (the op's rule). Each row then goes to ONE
writer on its owning server, the server's local rank ``local_row % ranks_per_server``, through
``session.world.all_to_all_v`` (``[name_index, op_index, *ids]`` plus the values as raw bytes);
the writer combines what all sources sent (in rank order), applies the op to the shared rows,
and every rank finishes with ``session.server.barrier()``, so a following pull sees the writes.
Concurrent writes therefore never touch the same row.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

import torch

from dglx_dist.errors import StateError
from dglx_dist.kvstore.base import InitSpec, KVStore, TensorEntry
from dglx_dist.kvstore.ops import PushOp
from dglx_dist.kvstore.policy import PartitionPolicy
from dglx_dist.kvstore.serve import Server
from dglx_dist.kvstore.shards import Message, PullPlan, Shards
from dglx_dist.kvstore.shm import EMPTY_I64, EMPTY_U8, SharedParts, default_shm_dir
from dglx_dist.runtime.comm import PeerError

__all__ = ["DistKVStore"]

log = logging.getLogger(__name__)


class DistKVStore(KVStore):
    """Named tensors sharded over the job's servers (see the module docstring for what is
    collective).

    It holds a :class:`~dglx_dist.kvstore.shards.Shards` (the registered tensors, their
    placement and this server's parts), a :class:`~dglx_dist.kvstore.shm.SharedParts` (which
    creates the parts) and, when serving, a :class:`~dglx_dist.kvstore.serve.Server`.

    Args:
        session: the running session (communicators, topology, byte counters).
        seed: mixed into the seeds of callable initialisers.
        shm_dir: where shared tensors are created; default ``/dev/shm``.
        serve: run a serving thread (on a process group of its own), so that
            ``pull``/``push`` with ``collective=False`` work; a store only ever used
            collectively may skip it.

    Attributes:
        shm_dir: where shared tensors are created; token: the job's token in their names.
    """

    def __init__(self, session, *, seed: int = 0, shm_dir: str | Path | None = None,
                 serve: bool = False):
        super().__init__(seed)
        self.session = session
        # pulled rows go to a GPU from page-locked memory (runtime.transfer)
        self._shards = Shards(session.topology, session.rank, self._ops,
                              pin=session.device.type == "cuda")
        # the pulls' own groups: a sampler's exchanges on ``cross`` need not wait for rows
        # still travelling from a pull started earlier
        multi = session.topology.num_servers > 1
        self._cross = session.new_cross_comm("kvstore") if multi else None
        self.shm_dir = Path(shm_dir) if shm_dir is not None else default_shm_dir()
        self._parts = SharedParts(session.world, session.server, self.shm_dir, self.seed)
        self.token = self._parts.token
        self._server: Server | None = None
        if serve and session.world_size > 1:
            self._server = Server(session, self._shards)
            session.add_closer(self._server.stop)

    def part_servers(self, policy: PartitionPolicy) -> list[int]:
        """The server holding each part of ``policy``.

        Raises:
            ValueError: the part count is neither the number of servers nor the world size.
        """
        return self._shards.part_servers(policy)

    def _check_parts_held(self, policy: PartitionPolicy, parts: list[int]) -> None:
        self._shards.check_parts_held(policy, parts)

    def _checkpoints_part(self, part: int) -> bool:
        return self._shards.checkpoints(part)

    def _init_data(self, name: str, spec: InitSpec | None,
                   error: Exception | None) -> TensorEntry:
        return self._parts.create(self._shards, name, spec, error)

    # -- collective pull ---------------------------------------------------------------------
    def _pull(self, entry: TensorEntry, ids: torch.Tensor, dedup: bool) -> torch.Tensor:
        return self._start_pull(entry, ids, dedup)()

    def _start_pull(self, entry: TensorEntry, ids: torch.Tensor,
                    dedup: bool) -> Callable[[], torch.Tensor]:
        plan = self._shards.plan_pull(entry, ids, dedup)
        answers = self._start_exchange(plan) if self._cross is not None else None
        try:  # own rows are read while the answers travel
            plan.fill_local()
        except BaseException:
            if answers is not None:
                answers()  # the peers' answers are still received
            raise

        def finish() -> torch.Tensor:
            if answers is not None:
                replies = answers()
                for server in plan.remote:
                    plan.take(server, replies[server])
            return plan.rows()

        return finish

    def _pull_nothing(self) -> None:
        if self._cross is not None:
            self._start_exchange(None)()  # nothing to read locally either

    def _start_exchange(self, plan: PullPlan | None) -> Callable[[], list[torch.Tensor]]:
        """Sends the requests, answers the peers' and starts sending the answers; returns what
        waits for the answers to this rank's requests (and raises what answering failed
        with, once the exchange is over: a failed rank answers nothing, then fails too)."""
        send = [EMPTY_I64] * self._cross.size
        expect = [0] * self._cross.size  # the answers' sizes are known: no count round
        for server, (gids, nbytes) in (plan.requests() if plan else {}).items():
            send[server] = torch.cat([torch.tensor([plan.entry.index]), gids])
            expect[server] = nbytes
        requests = self._cross.all_to_all_v(send)
        answers, failure = [], None
        for source, request in enumerate(requests):
            try:
                answers.append(self._answer_pull(request, source))
            except RuntimeError as exc:  # answer nothing (the peer then fails too), no hang
                answers.append(EMPTY_U8)
                failure = exc
        pending = self._cross.start_all_to_all_v(answers, recv_rows=expect)

        def wait() -> list[torch.Tensor]:
            replies = pending.wait()
            if failure is not None:
                raise failure
            return replies

        return wait

    def _answer_pull(self, request: torch.Tensor, source: int) -> torch.Tensor:
        if request.numel() == 0:
            return EMPTY_U8
        entry = self._shards.entry_at(int(request[0]), f"server {source}")
        return self._shards.read(entry, request[1:])

    # -- collective push ---------------------------------------------------------------------
    def _push(self, entry: TensorEntry, op: PushOp, ids: torch.Tensor,
              values: torch.Tensor) -> None:
        self._push_exchange(self._shards.push_messages(entry, op, ids, values))

    def _push_nothing(self) -> None:
        self._push_exchange({})

    def _push_exchange(self, messages: dict[int, Message]) -> None:
        world = self.session.world
        heads, data = [EMPTY_I64] * world.size, [EMPTY_U8] * world.size
        for writer, (head, buf) in messages.items():
            heads[writer], data[writer] = head, buf
        if world.size > 1:
            heads, data = world.all_to_all_v(heads), world.all_to_all_v(data)
        try:
            self._shards.apply(dict(enumerate(zip(heads, data))))
        finally:
            self.session.server.barrier()

    # -- non-collective ----------------------------------------------------------------------
    def _pull_p2p(self, entry: TensorEntry, ids: torch.Tensor, dedup: bool) -> torch.Tensor:
        plan = self._shards.plan_pull(entry, ids, dedup)
        if plan.remote:
            return self._need_server("pull").pull(plan)
        plan.fill_local()
        return plan.rows()

    def _push_p2p(self, entry: TensorEntry, op: PushOp, ids: torch.Tensor,
                  values: torch.Tensor) -> None:
        messages = self._shards.push_messages(entry, op, ids, values)
        own = messages.pop(self.session.rank, None)
        if messages:
            self._need_server("push").push(messages, own)
        elif own is not None:
            self._shards.apply({self.session.rank: own})

    def _need_server(self, what: str) -> Server:
        if self._server is None:
            raise StateError(f"{what} with collective=False needs the serving threads: build "
                             "the store with serve=True and do not close it first")
        return self._server

    def close(self) -> None:
        """Stops the serving threads (collective when the store serves: every rank calls it,
        after its last pull or push) and drops this process's mappings (the files were
        unlinked at init). Idempotent."""
        if self._server is not None:
            failed = self.session.failure is not None  # then a barrier would only time out
            try:
                if not failed:
                    self.session.world.barrier()  # nobody asks this rank for rows any more
            except PeerError as exc:
                log.warning("rank %d: kvstore close: %s", self.session.rank, exc)
                failed = True
            self.session.remove_closer(self._server.stop)
            self._server.stop(job_failed=failed)
            self._server = None
        self._shards.release()
