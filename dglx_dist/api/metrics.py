"""Metrics over every rank: one call each (collective)."""
from __future__ import annotations

import math
import time
from typing import Any, Mapping

import torch

from dglx_dist.errors import InvalidValueError
from dglx_dist.memory import peak_rss_bytes
from dglx_dist.runtime.session import Session, current_session
from dglx_dist.strategies.epochs import EpochResult

__all__ = ["all_reduce", "accuracy", "ranking_metrics", "ranking_from_scores",
           "epoch_record", "PhaseTimer", "STEP_PHASES"]

_BYTES = ("sent_intra", "sent_inter", "recv_intra", "recv_inter")
_CACHE = ("cache_hits", "cache_misses", "cache_saved", "reused")
STEP_PHASES = ("sample", "pull", "forward", "backward+allreduce", "optimizer", "other",
               "sample work", "pull work")
"""The phases of a training step a record's ``phases_max`` gives (:class:`PhaseTimer`'s
laps): the step's wait for the loader's next batch, its wait for the batch's rows (handed
over, and read), forward with the loss, backward (with the gradients' all-reduce), the
optimizers, and the rest of the epoch; these add up to the epoch. ``sample work`` and
``pull work`` are not laps: the seconds the loader's draws took (the sampler's exchanges
included) and its pulls' calls took (their starts and the waits for their answers), on
whichever thread made them; what exceeds the ``sample`` and ``pull`` the step waited for ran
on the loader's worker thread, beside the step (``pull`` also holds the step's own read of
its rows)."""


def all_reduce(value, op: str = "sum", session: Session | None = None) -> torch.Tensor:
    """``value`` (a number or tensor) summed, averaged ("mean"), or the "max"/"min" over
    every rank; a new float64 tensor (collective)."""
    session = session or current_session()
    t = torch.as_tensor(value, dtype=torch.float64).clone().reshape(-1)
    if op in ("sum", "mean"):
        session.world.all_reduce(t)
        if op == "mean":
            t /= session.world_size
    elif op in ("max", "min"):
        every = torch.stack(session.world.all_gather(t))
        t = every.max(0).values if op == "max" else every.min(0).values
    else:
        raise InvalidValueError(f"all_reduce: op {op!r}; expected 'sum', 'mean', 'max' or 'min'")
    return t.reshape(torch.as_tensor(value).shape)


def accuracy(logits: torch.Tensor, labels: torch.Tensor, task: str | None = None,
             num_classes: int | None = None, session: Session | None = None) -> torch.Tensor:
    """The share of rows whose argmax is the label, over every rank's rows (collective;
    ranks may pass different numbers of rows, none included): a 0-d tensor, as torchmetrics'
    ``accuracy(preds, target, task="multiclass", num_classes=C)``, whose arguments it takes
    (a script's ``.item()`` and ``float()`` both work)."""
    if task not in (None, "multiclass", "binary"):
        raise InvalidValueError(f"accuracy: task {task!r}; expected 'multiclass' (argmax of "
                                "each row) or 'binary'")
    pred = logits.argmax(1) if logits.dim() > 1 else logits
    if task == "binary" and pred.is_floating_point():
        pred = (pred > 0.5).long()  # torchmetrics' threshold on probabilities
    counts = all_reduce(torch.tensor([float((pred == labels).sum()), float(labels.numel())]),
                        session=session)
    return counts[0] / counts[1] if counts[1] > 0 else counts[0] * 0  # float64, 0-d


def ranking_metrics(pos_score: torch.Tensor, neg_score: torch.Tensor,
                    ks: tuple[int, ...] = (1, 10, 50),
                    session: Session | None = None) -> dict[str, float]:
    """Link prediction's ranking metrics over every rank's positives (collective; ranks may
    pass different numbers of rows, none included): :func:`ranking_from_scores` of all
    ranks' scores together.

    Args:
        pos_score: (N,) scores of the positive pairs.
        neg_score: (N, K) scores of each positive's negatives.
    """
    session = session or current_session()
    pos, neg = _checked_scores(pos_score, neg_score)
    every_pos = torch.cat(session.world.all_gather_v(pos))
    every_neg = torch.cat(session.world.all_gather_v(neg))
    return ranking_from_scores(every_pos, every_neg, ks)


def _checked_scores(pos_score: torch.Tensor,
                    neg_score: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    pos = pos_score.detach().reshape(-1).double()
    neg = neg_score.detach().double()
    if neg.dim() != 2 or neg.shape[0] != pos.numel():
        raise InvalidValueError(f"ranking_metrics: neg_score has shape {tuple(neg.shape)}; "
                                f"expected ({pos.numel()}, K): K negatives per positive")
    return pos, neg


def ranking_from_scores(pos_score: torch.Tensor, neg_score: torch.Tensor,
                        ks: tuple[int, ...] = (1, 10, 50)) -> dict[str, float]:
    """The ranking metrics of scores held by one process (no communication).

    Each positive ``pos_score[i]`` is ranked against its own negatives ``neg_score[i]`` (K
    per positive, the protocol of OGB's link-prediction datasets): rank = 1 + the negatives
    scored above it + half of those tied with it. Returns ``mrr`` (mean of 1/rank),
    ``hits@k`` (share with rank <= k) for each k in ``ks``, and ``auc``: the probability that
    a positive outscores a negative (ties count half), over all positives and negatives (the
    ROC AUC).
    """
    pos, neg = _checked_scores(pos_score, neg_score)
    n = pos.numel()
    above = (neg > pos[:, None]).sum(1).double()
    tied = (neg == pos[:, None]).sum(1).double()
    rank = 1.0 + above + tied / 2
    out = {"mrr": float((1.0 / rank).mean()) if n else 0.0}
    out.update({f"hits@{k}": float((rank <= k).double().mean()) if n else 0.0 for k in ks})
    out["auc"] = _auc(pos, neg.reshape(-1))
    return out


def _auc(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """ROC AUC of positive and negative scores (the Mann-Whitney statistic, with tied scores
    given their average rank)."""
    if not pos.numel() or not neg.numel():
        return 0.0
    scores = torch.cat([pos, neg])
    values, inverse, counts = torch.unique(scores, return_inverse=True, return_counts=True)
    ends = torch.cumsum(counts, 0).double()
    average = ends - (counts.double() - 1) / 2  # 1-based average rank of each distinct score
    pos_ranks = average[inverse[:pos.numel()]].sum()
    n_pos, n_neg = pos.numel(), neg.numel()
    return float((pos_ranks - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def epoch_record(result: EpochResult, before: Mapping[str, int], after: Mapping[str, int],
                 strategy: str, saved_peak: int | None = None,
                 session: Session | None = None) -> dict[str, Any]:
    """The epoch's metrics record (``docs/metrics.md``) from this rank's ``result`` and the
    byte counters (``session.counter.snapshot()``) before and after its training: numbers
    summed (bytes, samples, loss) or maxed (time, memory) over ranks, then the strategy's
    extra fields (collective). ``saved_peak``: this rank's largest activation bytes of a
    forward, reported as ``peak_saved_mb`` (None: not measured, no such field). Where the
    epoch timed its steps' phases (``result.phases``), ``phases_max`` gives each of
    :data:`STEP_PHASES`, the largest over ranks (maxed with the time and memory: no
    collective of its own)."""
    session = session or current_session()
    started = time.time() - result.wall
    world, steps = session.world, result.steps
    by_server = [0.0] * session.topology.num_servers  # bytes each server sent to the others
    by_server[session.server_id] = after["sent_inter"] - before["sent_inter"]
    sums = torch.tensor([after[k] - before[k] for k in _BYTES] +
                        [result.samples, result.loss_sum] +
                        [after.get(k, 0) - before.get(k, 0) for k in _CACHE] + by_server,
                        dtype=torch.float64)
    world.all_reduce(sums)
    bad = result.first_nonfinite_step
    phases = [] if result.phases is None else [result.phases.get(k, 0.0) for k in STEP_PHASES]
    maxes = torch.tensor([result.wall, float(peak_rss_bytes()), float(saved_peak or 0),
                          -math.inf if bad is None else -bad, -started, *phases],
                         dtype=torch.float64)
    world.all_reduce(maxes, op="max")
    record = {"epoch": result.epoch, "strategy": strategy, "world_size": session.world_size,
              "servers": session.topology.num_servers,
              "started_at": round(-float(maxes[4]), 3),
              "epoch_time": round(float(maxes[0]), 4), "steps": steps,
              "samples": int(sums[4]),
              "loss": round(float(sums[5]) / max(steps, 1) / session.world_size, 5)}
    record.update({f"bytes_{k}": int(v) for k, v in zip(_BYTES, sums[:4])})
    record["bytes_sent_inter_busiest"] = int(sums[10:].max())
    hits, misses, saved, reused = (int(v) for v in sums[6:10])
    if hits + misses:  # a remote-row cache held rows (kvstore.cache)
        record.update(cache_hit_rate=round(hits / (hits + misses), 4), cache_saved_bytes=saved)
    if reused:  # read from this rank's copies of earlier pulls' rows (kvstore.copies)
        record["reused_bytes"] = reused
    record["peak_mem_mb"] = round(float(maxes[1]) / (1 << 20), 1)
    if saved_peak is not None:
        record["peak_saved_mb"] = round(float(maxes[2]) / (1 << 20), 2)
    if phases:
        record["phases_max"] = {k: round(float(v), 4) for k, v in zip(STEP_PHASES, maxes[5:])}
    if math.isfinite(float(maxes[3])):  # the earliest over ranks
        record["first_nonfinite_step"] = int(-maxes[3])
    record.update(result.extra)
    return record


class PhaseTimer:
    """Accumulates wall time per phase of a training step (``t``: seconds by phase), for
    the records' ``phases_max`` (:meth:`finish` as :attr:`EpochResult.phases
    <dglx_dist.strategies.epochs.EpochResult.phases>`; :func:`epoch_record` takes the
    largest over ranks)."""

    def __init__(self) -> None:
        self.t: dict[str, float] = {}
        self.work: dict[str, float] = {}  # overlapped with the laps: not in the epoch's sum
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        """Counts the time since the last lap (or :meth:`restart`) as phase ``name``'s."""
        now = time.perf_counter()
        self.t[name] = self.t.get(name, 0.0) + now - self._last
        self._last = now

    def restart(self) -> None:
        """Counts the time since the last lap as no phase's (it ends up in ``other``)."""
        self._last = time.perf_counter()

    def loader_epoch(self, times) -> None:
        """A loader's epoch (its :class:`~dglx_dist.api.loader.LoaderTimes`): of the waits
        lapped as ``sample``, the hand-overs' wait for rows and the pulls started on the
        calling thread become ``pull``'s, and the strategy's work before the first step is no
        phase's (``other``); its draws are ``sample work``, its pulls' starts and hand-overs
        ``pull work``."""
        sample = self.t.get("sample", 0.0)
        begin = min(times.begin, sample)
        moved = min(times.rows + times.start_here, sample - begin)
        self.t["sample"] = sample - begin - moved
        self.t["pull"] = self.t.get("pull", 0.0) + moved
        for name, took in (("sample work", times.draw), ("pull work", times.start + times.rows)):
            self.work[name] = self.work.get(name, 0.0) + took

    def finish(self, wall: float) -> dict[str, float]:
        """The phases' seconds of an epoch of ``wall`` seconds, what no phase took as
        ``other``, and the loader's work beside them (``sample work``, ``pull work``)."""
        self.t["other"] = wall - sum(v for k, v in self.t.items() if k != "other")
        return self.t | self.work

    def max_over_ranks(self, wall: float, session: Session | None = None) -> dict[str, float]:
        """:meth:`finish`, each phase the largest over the ranks (collective)."""
        finished = self.finish(wall)
        names = sorted(finished)
        maxes = all_reduce([finished[k] for k in names], op="max", session=session).tolist()
        return {k: round(v, 4) for k, v in zip(names, maxes)}
