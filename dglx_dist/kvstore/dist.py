"""The distributed store: parts in shared memory on their servers, remote rows via the comm layer.

docs/kvstore.md ("How it works") describes the placement, the shared memory, the pull and
push messages and what is collective; details it leaves out:

* A part's file is created by the lowest local rank of its server that passed the part's rows
  to ``init_data`` (else local rank 0); :class:`~dglx_dist.kvstore.shm.SharedParts`.
* Requests carry a name's (and op's) registration index, so ranks may use different names in
  one step and must register names and ops in the same order. A rank whose arguments are bad
  takes part with an empty request, then raises; one that cannot answer a request answers
  nothing (its peer then fails too) rather than leaving it hanging.
* A pull's answers skip the round of counts (every caller knows what it asked for) and row
  widths may differ per peer (raw bytes). A push's writer combines what all sources sent in
  rank order, and every rank ends with ``session.server.barrier()`` (where its server has other
  ranks).
* ``collective=False`` sends the same messages point-to-point to the owners' serving threads
  (:mod:`~dglx_dist.kvstore.serve`). A serving thread and its rank's main thread never apply
  at the same time (a lock); a collective push and other ranks' non-collective ones to the same
  rows are not ordered, and a pull may read rows while they are written (as in DistDGL).

One module, over 400 lines: the pulls, the pushes, their point-to-point twins, a loader's
copy on its own groups (:meth:`DistKVStore.on`) and the cache's collective fill all plan
and send the same messages over the same shards.
"""
from __future__ import annotations

import copy
import functools
import logging
import time
from pathlib import Path
from typing import Callable

import torch

from dglx_dist.errors import InvalidValueError, ProtocolError, StateError
from dglx_dist.kvstore.base import KVStore
from dglx_dist.kvstore.cache import Held, RowCache, check_budget, choose_rows
from dglx_dist.kvstore.copies import ID_BYTES, Copies
from dglx_dist.kvstore.coalesce import ServerPulls
from dglx_dist.kvstore.entries import InitSpec, TensorEntry
from dglx_dist.kvstore.ops import PushOp
from dglx_dist.kvstore.policy import PartitionPolicy
from dglx_dist.kvstore.recent import RecentRows
from dglx_dist.kvstore.serve import Server
from dglx_dist.kvstore.shards import (Message, PullPlan, Shards, pack_messages,
                                       unpack_messages)
from dglx_dist.kvstore.shm import EMPTY_I64, EMPTY_U8, SharedParts, default_shm_dir
from dglx_dist.runtime.agree import on_every_rank
from dglx_dist.runtime.comm import PeerError

__all__ = ["DistKVStore"]

log = logging.getLogger(__name__)

REFILL_SHARE = 0.25
"""The cache goes on counting after a later fill only where that fill added at least this
share of the bytes the cache held: while it learns, every pull counts its remote rows and
keeps copies of the new ones, which a few rows more are not worth. The rows that fill
counted are added either way (their counting is paid for; writing them costs the fill only
them)."""


class DistKVStore(KVStore):
    """Named tensors sharded over the job's servers: a :class:`~dglx_dist.kvstore.shards.Shards`
    (the tensors, their placement, this server's parts), the :class:`SharedParts` that creates
    the parts and, when serving, a :class:`~dglx_dist.kvstore.serve.Server`.

    Args:
        session: the running session (communicators, topology, byte counters).
        seed: mixed into the seeds of callable initialisers.
        shm_dir: where shared tensors are created (attribute ``shm_dir``; their names carry
            ``token``); default ``/dev/shm``.
        serve: run a serving thread (on a process group of its own), so that ``pull``/``push``
            with ``collective=False`` work; a store only ever used collectively may skip it.
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
        self._server_pulls: ServerPulls | None = None  # pull_per_server()
        self.shm_dir = Path(shm_dir) if shm_dir is not None else default_shm_dir()
        self._parts = SharedParts(session.world, session.server, self.shm_dir, self.seed)
        self.token = self._parts.token
        self._server: Server | None = None
        self._written: set[int] = set()  # names written: no copies of them (_forget)
        self._written_alone: set[int] = set()  # names this rank pushed alone (forget_written)
        if serve and session.world_size > 1:
            self._server = Server(session, self._shards)
            session.add_closer(self._server.stop)

    def on(self, twin) -> "DistKVStore":
        """(:meth:`KVStore.on`.) After :meth:`pull_per_server` the copy's ranks coalesce
        their pulls too, on a twin of the server's group; it serves nothing."""
        other = copy.copy(self)
        other._cross = None if self._cross is None else twin(self._cross)
        other._server_pulls = None if self._server_pulls is None else self._server_pulls.on(twin)
        other._server = None
        return other

    @property
    def finish_exchanges(self) -> bool:
        """(:attr:`KVStore.finish_exchanges`.) After :meth:`pull_per_server`: a server's
        ranks pass each other the rows they got as a pull finishes."""
        return self._server_pulls is not None

    def part_servers(self, policy: PartitionPolicy) -> list[int]:
        """The server holding each part of ``policy`` (:meth:`Shards.part_servers`)."""
        return self._shards.part_servers(policy)

    def _check_parts_held(self, policy: PartitionPolicy, parts: list[int]) -> None:
        servers, me = self.part_servers(policy), self.session.server_id
        elsewhere = [p for p in parts if servers[p] != me]
        if elsewhere:
            raise InvalidValueError(f"part_data holds parts {elsewhere}, which live on other "
                                    f"servers; rank {self.session.rank} (server {me}) may only "
                                    f"pass parts {[p for p, s in enumerate(servers) if s == me]}")

    def _checkpoints_part(self, part: int) -> bool:
        ranks = self.session.topology.server_ranks(self.session.server_id)  # spread over it
        return ranks[part % len(ranks)] == self.session.rank

    def _init_data(self, name: str, spec: InitSpec | None,
                   error: Exception | None) -> TensorEntry:
        return self._parts.create(self._shards, name, spec, error)

    # -- collective --------------------------------------------------------------------------
    def _start_pull_many(self, pulls: list[tuple[TensorEntry, torch.Tensor, bool]]
                         ) -> Callable[[], list[torch.Tensor]]:
        plans = [self._planned(entry, ids, dedup) for entry, ids, dedup in pulls]

        failed: list[BaseException] = []

        def fill() -> None:  # own rows, read while the requests travel
            try:
                for plan in plans:
                    plan.fill_local()
            except BaseException as exc:  # noqa: BLE001  (raised below, the peers served)
                failed.append(exc)

        answers = None if self._cross is None else self._start_exchange(plans, fill)
        if answers is None:
            fill()
        if failed:
            if answers is not None:
                answers()  # the peers' answers are still received
            raise failed[0]

        def finish() -> list[torch.Tensor]:
            if answers is not None:
                for server, reply in enumerate(answers()):
                    offset = 0  # the plans' answers, one after another
                    for plan in plans:
                        if server in plan.remote:
                            size = plan.answer_bytes(server)
                            plan.take(server, reply[offset:offset + size])
                            offset += size
            return [plan.rows() for plan in plans]

        return finish

    def _pull_nothing(self) -> None:
        if self._cross is not None:
            self._start_exchange([])()  # nothing to read locally either

    def _start_exchange(self, plans: list[PullPlan], meanwhile: Callable[[], None] | None = None
                        ) -> Callable[[], list[torch.Tensor]]:
        """Sends the plans' requests, runs ``meanwhile`` while they travel, answers the peers'
        and starts sending the answers; returns what waits for the answers to this rank's
        requests (raw bytes per server). Once per server after :meth:`pull_per_server`, else
        each plan's own requests."""
        requests = [plan.requests() for plan in plans]
        send = functools.partial(self._send_requests, meanwhile=meanwhile)

        def alone() -> Callable[[], list[torch.Tensor]]:
            asked: dict[int, list[tuple[int, torch.Tensor]]] = {}
            expect = [0] * self._cross.size
            for plan, request in zip(plans, requests):
                for server, (gids, nbytes) in request.items():
                    asked.setdefault(server, []).append((plan.entry.index, gids))
                    expect[server] += nbytes  # the answers' sizes are known: no count round
            return send(asked, expect)

        if self._server_pulls is None:
            return alone()
        keyed = [(plan.entry.index, not plan.entry.policy.splits_columns,
                  {server: gids for server, (gids, _) in request.items()})
                 for plan, request in zip(plans, requests)]
        return self._server_pulls.start(keyed, send, alone)

    def pull_per_server(self) -> None:
        """From now on the ranks of a server make each collective pull together, so a row
        several of them want crosses the link once (:mod:`~dglx_dist.kvstore.coalesce`).
        Collective (it creates the server's process groups); nothing where a server has one
        rank or the job one server; idempotent."""
        session = self.session
        if self._server_pulls is None and self._cross is not None and session.server.size > 1:
            self._server_pulls = ServerPulls(
                session.new_server_comm("kvstore-server"),
                lambda index: self._shards.entry_at(index, "a pull"),
                session.topology.num_servers)

    def _send_requests(self, asked: dict[int, list[tuple[int, torch.Tensor]]],
                       expect: list[int], meanwhile: Callable[[], None] | None = None
                       ) -> Callable[[], list[torch.Tensor]]:
        """Sends the requests (per server, int64 ``[name index, ids]`` for one tensor, else
        ``[-k, (name index, id count) per tensor, the ids]``) with the answers' sizes
        ``expect``, runs ``meanwhile`` while they travel, answers the peers' and starts
        sending the answers (each tensor's rows, in order); returns what waits for the answers
        (and raises what answering failed with, once the exchange is over: a failed rank
        answers nothing, then fails too); ``meanwhile`` must not raise."""
        send = [EMPTY_I64] * self._cross.size
        for server, pulls in asked.items():
            head = [pulls[0][0]] if len(pulls) == 1 else [-len(pulls)] + [
                n for index, gids in pulls for n in (index, gids.numel())]
            send[server] = torch.cat([torch.tensor(head)] + [gids for _, gids in pulls])
        requests = self._cross.start_all_to_all_v(send)
        if meanwhile is not None:
            meanwhile()
        answers, failure = [], None
        for source, request in enumerate(requests.wait()):
            try:
                answers.append(self._answer(request, source))
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

    def _answer(self, request: torch.Tensor, source: int) -> torch.Tensor:
        """The rows a peer's request (:meth:`_start_exchange`) asks for, as raw bytes."""
        if request.numel() == 0:
            return EMPTY_U8
        if int(request[0]) >= 0:  # one pull
            heads, ids = [(int(request[0]), request.numel() - 1)], [request[1:]]
        else:
            k = -int(request[0])
            heads = request[1:1 + 2 * k].view(k, 2).tolist()
            ids = torch.split(request[1 + 2 * k:], [n for _, n in heads])
            if len(ids) != k or sum(n for _, n in heads) != request.numel() - 1 - 2 * k:
                raise ProtocolError(f"server {source} sent a malformed pull request")
        answers = [self._shards.read(self._shards.entry_at(index, f"server {source}"), gids)
                   for (index, _), gids in zip(heads, ids)]
        return answers[0] if len(answers) == 1 else torch.cat(answers)  # one: no copy

    def _push_many(self, pushes: list[tuple[TensorEntry, PushOp, torch.Tensor, torch.Tensor]]
                   ) -> None:
        messages: dict[int, list[Message]] = {}
        for entry, op, ids, values in pushes:
            for writer, message in self._shards.push_messages(entry, op, ids, values).items():
                messages.setdefault(writer, []).append(message)
        self._push_exchange(messages)

    def _push_nothing(self) -> None:
        self._push_exchange({})

    def _push_exchange(self, messages: dict[int, list[Message]]) -> None:
        """One exchange of every writer's messages (:func:`pack_messages`), applied; then a
        server barrier, so the next pull on this server sees the writes."""
        world = self.session.world
        send = [EMPTY_U8] * world.size
        for writer, batch in messages.items():
            send[writer] = pack_messages(batch)
        received = world.all_to_all_v(send) if world.size > 1 else send
        self._drop_written(messages)
        try:
            self._shards.apply_many({source: unpack_messages(buf)
                                     for source, buf in enumerate(received)})
        finally:
            if self.session.server.size > 1:  # alone on its server: nobody to wait for
                self.session.server.barrier()

    # -- non-collective ----------------------------------------------------------------------
    def _pull_p2p(self, entry: TensorEntry, ids: torch.Tensor, dedup: bool) -> torch.Tensor:
        plan = self._planned(entry, ids, dedup)
        if plan.remote:
            return self._need_server("pull").pull(plan)
        plan.fill_local()
        return plan.rows()

    def _push_p2p(self, entry: TensorEntry, op: PushOp, ids: torch.Tensor,
                  values: torch.Tensor) -> None:
        cache = self._shards.cache
        if cache is not None and entry.index in cache.held:
            raise StateError(f"push {entry.name!r} with collective=False: its rows are cached "
                             "on other servers (the strategy's cache_mb), which a push by one "
                             "rank cannot tell; push it collectively, or run without the cache")
        self._written_alone.add(entry.index)
        self._forget(entry.index)
        messages = self._shards.push_messages(entry, op, ids, values)
        own = messages.pop(self.session.rank, None)
        if messages:
            self._need_server("push").push(messages, own)
        elif own is not None:
            self._shards.apply_many({self.session.rank: [own]})

    def _need_server(self, what: str) -> Server:
        if self._server is None:
            raise StateError(f"{what} with collective=False needs the serving threads: build "
                             "the store with serve=True and do not close it first")
        return self._server

    # -- the remote-row cache (kvstore.cache) -------------------------------------------------
    def _planned(self, entry: TensorEntry, ids: torch.Tensor, dedup: bool) -> PullPlan:
        plan = self._shards.plan_pull(entry, ids, dedup)
        cache = self._shards.cache
        if cache is not None and cache.held:
            hits, misses = plan.cache_counts()
            self.session.counter.add_cache(hits, misses, hits * entry.row_bytes)
        if plan.reused:
            self.session.counter.add_reused(
                sum(q.pos.numel() for q, _ in plan.reused) * entry.row_bytes)
        return plan

    def start_cache(self, budget: int) -> None:
        """Starts a cache of other servers' rows of at most ``budget`` bytes per server
        (:mod:`~dglx_dist.kvstore.cache`): pulls count the remote rows until
        :meth:`fill_cache`. Collective: a budget larger than a server's free shared memory
        or available memory is refused on every rank."""
        on_every_rank(self.session, "the remote-row cache", lambda: check_budget(
            budget, self.shm_dir, self.session.server_id))
        self._shards.cache = RowCache(budget, budget // self.session.server.size,
                                      written=self._written)

    def keep_recent(self, budget: int) -> None:
        """Keeps copies of the other servers' rows this rank's pulls bring, at most ``budget``
        bytes per name, which its next pulls read instead of asking again
        (:mod:`~dglx_dist.kvstore.recent`). Call it on every rank or on none (a collective
        push then agrees which names it wrote)."""
        if budget <= 0:
            raise InvalidValueError(f"keep_recent: budget {budget}; expected a positive "
                                    "number of bytes")
        self._shards.recent = RecentRows(budget, self._written)

    def forget_written(self) -> None:
        """Drops every rank's copies of other servers' rows (:meth:`keep_recent`'s, and those
        a learning cache keeps) of the names some rank wrote alone (``collective=False``)
        since the last call: collective, at a barrier (other ranks see such writes after
        one, as in DGL). A name written is not copied any more."""
        if self._shards.recent is None and self._shards.cache is None:
            return
        written = torch.zeros(len(self._shards), dtype=torch.int64)
        written[sorted(self._written_alone)] = 1
        self._written_alone.clear()
        self.session.world.all_reduce(written, op="max")
        for index in torch.nonzero(written).squeeze(1).tolist():
            self._forget(index)

    def _forget(self, index: int) -> None:
        """Drops this rank's copies of name ``index`` (written): the recent rows', the
        cache's (held and kept); neither copies it any more."""
        self._written.add(index)  # first: an answer arriving meanwhile is not kept
        cache, recent = self._shards.cache, self._shards.recent
        if recent is not None:
            recent.drop(index)
        if cache is not None:
            if index in cache.held:
                log.info("rank %d: cached rows of %r dropped: written", self.session.rank,
                         self._shards.entry_at(index, "the cache").name)
            cache.drop(index)

    def set_aside_counts(self) -> bool:
        """Ends the cache's counting until :meth:`fill_cache`, which fills from the counts and
        copies made so far (e.g. an epoch's, where the pulls of an evaluation come next):
        later pulls count nothing. Not collective; False where the cache was not counting
        (then there is nothing to fill: the same on every rank)."""
        cache = self._shards.cache
        return cache is not None and cache.set_aside()

    def fill_cache(self) -> None:
        """Puts the rows this server's ranks pulled most often since the last fill, within the
        budget left, into its shared memory, from the copies its ranks kept as the rows
        arrived (a row no rank kept, beyond a rank's share of the budget, is pulled once);
        later pulls read them there. The cache goes on counting and keeping the rows still
        pulled from other servers, for the next fill, while every row counted fitted and
        (after a later fill) the rows added were :data:`REFILL_SHARE` of what was held
        (collective: every rank, at the same point, e.g. the start of the next epoch). Fills
        from the counts :meth:`set_aside_counts` ended with, if it was called; nothing when no
        cache is counting or has counts set aside."""
        cache, session = self._shards.cache, self.session
        if cache is None or not cache.fill_due:
            return
        start = time.perf_counter()
        counts, kept = cache.take_learnt()
        counts = self._server_counts(counts)
        entries = {index: self._shards.entry_at(index, "the cache") for index in counts}
        chosen = choose_rows(counts, {i: e.row_bytes for i, e in entries.items()},
                             cache.budget - cache.nbytes)
        added = sum(ids.numel() * (entries[i].row_bytes + ID_BYTES) for i, ids in chosen.items())
        few = bool(cache.held) and added < REFILL_SHARE * cache.nbytes
        lead = session.topology.server_ranks(session.server_id)[0]
        cache.fills += 1
        cache.held.update(self._hold(entries, chosen, kept, lead))
        every = sum(ids.numel() for ids in chosen.values()) == \
            sum(int((c > 0).sum()) for c in counts.values())  # (chosen: some of the counted)
        again = torch.tensor([int(every and not few and
                                  any(ids.numel() for ids in chosen.values()))])
        cache.counting = bool(session.world.all_reduce(again, op="max"))
        if session.rank == lead:
            seen = sum(int(c.sum()) for c in counts.values())
            covered = sum(int(counts[i].index_select(0, ids).sum()) for i, ids in chosen.items())
            log.info("server %d, fill %d: cached %d more rows of %s (%.1f of %.1f MB): %.1f%% "
                     "of the remote rows its ranks pulled since the last fill (%.2f s)",
                     session.server_id, cache.fills, sum(ids.numel() for ids in chosen.values()),
                     sorted(entries[i].name for i in chosen), cache.nbytes / 2**20,
                     cache.budget / 2**20, 100 * covered / max(seen, 1),
                     time.perf_counter() - start)

    def _hold(self, entries: dict[int, TensorEntry], chosen: dict[int, torch.Tensor],
              kept: dict[int, Copies], lead: int) -> dict[int, Held]:
        """The server's copies once the ``chosen`` rows join them (collective): each name's
        shared tensor grows by their rows, which ``lead`` writes (:meth:`_write_rows`); only
        the new rows are written. Where a name has one part on this server, its copies follow
        that part's rows in the part's own file, so that one gather reads a pull's own and
        cached rows (the part's tensor becomes a view of the grown one); else they have a
        file of their own."""
        cache, server = self._shards.cache, self.session.server_id
        base = {i: next(iter(entries[i].parts)) if len(entries[i].parts) == 1 else None
                for i in chosen}
        own = {i: 0 if base[i] is None else entries[i].parts[base[i]].shape[0] for i in chosen}
        had = {i: cache.held[i].ids if i in cache.held else chosen[i][:0] for i in chosen}
        names = {i: self._parts.part_file(i, base[i]) if base[i] is not None
                 else f"cache-{self._parts.token}-s{server}-{i}" for i in chosen}
        start = {i: own[i] + had[i].numel() for i in chosen}
        shapes = {i: ((start[i] + ids.numel(), *entries[i].trailing), entries[i].dtype)
                  for i, ids in chosen.items()}
        whole = self._parts.grow(names, dict.fromkeys(chosen, lead), shapes, start,
                                 "the remote-row cache", "copies")
        self._write_rows(entries, chosen, kept, lead,
                         {i: t[start[i]:] for i, t in whole.items()})
        if self.session.server.size > 1:
            self.session.server.barrier()  # the lead's rows are written
        held = {}
        for i, ids in chosen.items():
            n, every = own[i], torch.cat([had[i], ids])
            if base[i] is not None:
                entries[i].parts[base[i]] = whole[i][:n]
            held[i] = Held.of(every, whole[i][n:], entries[i].policy.num_rows,
                              base[i], None if base[i] is None else whole[i])
        return held

    def _write_rows(self, entries: dict[int, TensorEntry], chosen: dict[int, torch.Tensor],
                    kept: dict[int, Copies], lead: int, into: dict[int, torch.Tensor]) -> None:
        """Writes the rows of the ``chosen`` ids into ``into`` on ``lead`` (collective): each
        from the lowest rank of the server that kept it (sent within the server), the rest
        pulled by the lead from their servers."""
        server, missing = self.session.server, {}
        for i, ids in chosen.items():
            entry = entries[i]
            like = torch.empty((0, *entry.trailing), dtype=entry.dtype)
            have = kept[i].has(ids) if i in kept else torch.zeros(ids.numel(), dtype=torch.bool)
            holder = torch.where(have, server.group_rank, server.size)
            if server.size > 1:  # rows several ranks kept are sent by the lowest of them
                server.all_reduce(holder, op="min")
            sel = holder == server.group_rank
            direct = self.session.rank == lead and bool(sel.all())  # written in place
            mine = kept[i].rows_of(ids[sel], into[i] if direct else None) \
                if i in kept else like
            got = server.all_to_all_v([mine if m == lead else mine[:0] for m in server.members]
                                      ) if server.size > 1 else [mine]
            if self.session.rank == lead and not direct:
                for m, part in enumerate(got):
                    into[i][holder == m] = part
            missing[i] = holder == server.size
        cache, self._shards.cache = self._shards.cache, None  # the lead's pull is not cached
        try:
            asked = [(entries[i], chosen[i][gone], False) for i, gone in missing.items()]
            pulled = self._start_pull_many(asked if self.session.rank == lead else [])()
        finally:
            self._shards.cache = cache
        for (i, gone), got in zip(missing.items(), pulled):
            into[i][gone] = got

    def _server_counts(self, mine: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        """Pulls per remote row by this server's ranks (``mine``: this rank's), of every name
        some rank counted and no rank pushed (collective)."""
        flags = torch.zeros(2, len(self._shards), dtype=torch.int64)
        for index in mine:
            flags[0, index] = 1
        for name, pushes in self.pushes.items():
            flags[1, self._entries[name].index] = int(pushes > 0)
        self.session.world.all_reduce(flags, op="max")
        counts = {}
        for index in torch.nonzero(flags[0] > flags[1]).squeeze(1).tolist():
            counted = mine.get(index)
            if counted is None:
                entry = self._shards.entry_at(index, "the cache")
                counted = torch.zeros(entry.policy.num_rows, dtype=torch.int32)
            if self.session.server.size > 1:
                self.session.server.all_reduce(counted)
            counts[index] = counted
        return counts

    def _drop_written(self, messages: dict[int, list[Message]]) -> None:
        """Drops every rank's copies (:meth:`_forget`) of the names a collective push writes
        (collective: where a cache or the recent rows are on, the same on every rank)."""
        if self._shards.cache is None and self._shards.recent is None:
            return
        written = torch.zeros(len(self._shards), dtype=torch.int64)
        for batch in messages.values():
            for head, _ in batch:
                written[int(head[0])] = 1
        self.session.world.all_reduce(written, op="max")
        for index in torch.nonzero(written).squeeze(1).tolist():
            self._forget(index)

    @property
    def cache(self) -> RowCache | None:
        """The remote-row cache (None: none started)."""
        return self._shards.cache

    def close(self) -> None:
        """Stops the serving threads (collective when the store serves: every rank calls it,
        after its last pull or push) and drops this process's mappings (the files were
        unlinked at init). Idempotent."""
        if self._server is not None:
            # a failed job, or one ending early (a signal): a barrier would only time out
            failed = self.session.failure is not None or self.session.ended_early is not None
            try:
                if not failed:
                    self.session.world.barrier()  # nobody asks this rank for rows any more
            except PeerError as exc:
                log.warning("rank %d: kvstore close: %s", self.session.rank, exc)
                failed = True
            self.session.remove_closer(self._server.stop)
            self._server.stop(job_failed=failed)
            self._server = None
        for entry in self._entries.values():
            entry.parts.clear()
        self._shards.cache = self._shards.recent = None
        self._parts.close()
