"""``dglx train --task link``: link prediction on a dataset's edges, through the drop-in API.

* Split: the dataset's edges are taken as undirected pairs (u < v; self-loops and repeats
  dropped) and cut 85/5/10 by the seed into training, validation and test pairs. The
  training graph holds both directions of each training pair (edge e's reverse is e + E, mod
  2E), so held-out pairs never pass messages.
* Training: a step scores a batch of training edges (all of them each epoch, or a seeded
  random ``train_edges`` of them, the same every epoch; the settings are the run config's
  :class:`~dglx_dist.config.TaskConfig`) and ``negatives`` uniform negatives per edge (each
  rank and step its own draws: :func:`~dglx_dist.api.link.negatives_drawn`; each rank its own
  dropout: :func:`rank_seed`) by the dot product of the model's embeddings (binary
  cross-entropy). Where the strategy samples blocks (distdgl, p3) the batch's edges and their
  reverses are left out of them
  (DGL's ``exclude="reverse_id"``); the full-graph strategies pass messages over the whole
  training graph.
* Evaluation: each held-out pair (or a seeded ``eval_pairs`` of them) is ranked against
  ``eval_negatives`` uniform negatives, each rank scoring its share of the pairs from the
  embeddings of the nodes they name (full neighbourhoods, or the strategy's
  ``eval_fanouts``);
  :func:`~dglx_dist.api.ranking_metrics` gives MRR, Hits@K and AUC over every rank.

One JSON line per epoch (``task`` and the fields of node classification's records from
:func:`~dglx_dist.api.metrics.epoch_record`: ``epoch_time``, ``steps``, ``loss``, bytes,
memory; then the validation metrics when evaluated) and one with the test metrics at the end.

Nothing here needs DGL: a step's pairs are scored in torch from ``pair.edges()``, which
DGL's pair graphs (DGL's loaders') and the package's both give, and the drop-in API
is imported when the task runs.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from dglx_dist.config import RunConfig, TaskConfig
from dglx_dist.console import EpochBar, bar_disable
from dglx_dist.data.dataset import GraphDataset
from dglx_dist.errors import InvalidValueError, NotSupportedError
from dglx_dist.report import key_values
from dglx_dist.runtime.failure import same_on_every_rank
from dglx_dist.strategies.epochs import EpochResult
from dglx_dist.strategies.cost.shapes import split_sizes

if TYPE_CHECKING:
    from dglx_dist.api.metrics import PhaseTimer

__all__ = ["at_most", "check_eval_pairs", "eval_negatives", "heldout", "heldout_scores",
           "link_loss", "rank_seed", "reverse_ids", "split_once", "split_pairs", "timed_link_step", "train_edge_ids", "train_link"]
log = logging.getLogger(__name__)


def split_pairs(ds: GraphDataset, seed: int):
    """The training graph (both directions of the training pairs, ``ds``'s nodes and their
    data, no edge data), its reverse edge ids, and the validation and test pairs ``(u, v)``:
    each undirected pair of distinct nodes once, shuffled by ``seed``, 5% to validation and
    10% to test."""
    n = ds.num_nodes
    src, dst = torch.from_numpy(ds.src).long(), torch.from_numpy(ds.dst).long()
    lo, hi = torch.minimum(src, dst), torch.maximum(src, dst)
    keep = lo != hi
    pairs = torch.unique(lo[keep] * n + hi[keep])
    u, v = pairs // n, pairs % n
    perm = torch.randperm(u.numel(), generator=torch.Generator().manual_seed(seed))
    n_val, n_test, _ = split_sizes(u.numel())
    val, test, train = perm[:n_val], perm[n_val:n_val + n_test], perm[n_val + n_test:]
    tu, tv = u[train], v[train]
    train_ds = ds.replace(src=torch.cat([tu, tv]).numpy(), dst=torch.cat([tv, tu]).numpy(),
                          extra={}, edata={})
    return train_ds, reverse_ids(train_ds.num_edges), (u[val], v[val]), (u[test], v[test])


def reverse_ids(num_edges: int) -> torch.Tensor:
    """Each edge's reverse in a training graph of :func:`split_pairs`: (e + E/2) mod E."""
    e = num_edges // 2
    return torch.cat([torch.arange(e) + e, torch.arange(e)])


def rank_seed(seed: int, rank: int) -> int:
    """The seed of rank ``rank``'s torch generator once its model is built (the same
    weights on every rank: DDP's are rank 0's): its dropout (and any negative sampler drawn
    outside a loader's steps) its own, where ranks seeded alike would all draw the same
    numbers (torch's CPU dropout takes one number from the generator whatever its size)."""
    return (seed * 1_000_003 + 7 * rank + 1) % 2**62


def split_once(data: Path, seed: int, session, cache_dir) -> tuple[Path, tuple, tuple]:
    """:func:`split_pairs` of dataset ``data``, made once by rank 0 into the partition cache
    (collective): the training graph as a dataset directory (partitioned as any dataset is,
    and reused by later runs) with the held-out pairs beside its tables, so that no other
    rank holds the whole graph. Returns it and the validation and test pairs (every rank).
    A dataset that holds such pairs already (``dglx data import ogbl-*``: a split given with
    the data, laid out as this split's output is) is its own training graph."""
    from dglx_dist.data import read_dataset, write_dataset
    from dglx_dist.data.format import HELDOUT_ARRAYS, META_FILE
    from dglx_dist.prepare import checked_cache, derived_key, made_by_rank0

    given = all((Path(data) / f"{name}.npy").is_file() for name in HELDOUT_ARRAYS)
    out = Path(data) if given else checked_cache(cache_dir) / derived_key(data, "link-split",
                                                                          [seed])

    def make() -> None:
        train, _, val, test = split_pairs(read_dataset(data), seed)
        pairs = dict(zip(HELDOUT_ARRAYS, (*val, *test)))
        train = train.replace(extra={"link_split_of": str(data), "seed": seed})
        write_dataset(train, out,
                      arrays={name: ids.numpy() for name, ids in pairs.items()})

    if not given:
        made_by_rank0(session, out, META_FILE, make, f"splitting the edges of {data}")
    pairs = {name: torch.from_numpy(np.load(out / f"{name}.npy")) for name in HELDOUT_ARRAYS}
    return out, (pairs["val_u"], pairs["val_v"]), (pairs["test_u"], pairs["test_v"])


def _scores(pair, h: torch.Tensor) -> torch.Tensor:
    """The dot product of each pair's ends' rows of ``h`` (DGL's ``u_dot_v``)."""
    u, v = pair.edges()
    return (h.index_select(0, u.long()) * h.index_select(0, v.long())).sum(1)


def link_loss(pair, neg, h: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of the positive pairs' dot products (label 1) and the negatives'
    (label 0)."""
    pos, negative = _scores(pair, h), _scores(neg, h)
    labels = torch.cat([torch.ones_like(pos), torch.zeros_like(negative)])
    return F.binary_cross_entropy_with_logits(torch.cat([pos, negative]), labels)


def eval_negatives(num_pairs: int, num_nodes: int, k: int, seed: int) -> torch.Tensor:
    """(num_pairs, k) uniform negative destinations for held-out pairs, a function of the
    seed alone (the same on every rank and in every system compared)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, num_nodes, (num_pairs, k), generator=gen)


def heldout_scores(emb, u: torch.Tensor, v: torch.Tensor,
                   neg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dot-product scores of pairs ``(u, v)`` and of each ``u`` with its negatives ``neg``
    (N, K), from ``emb`` (any row-indexable table of embeddings)."""
    hu = emb[u]
    negative = (hu.unsqueeze(1) * emb[neg.reshape(-1)].reshape(u.numel(), neg.shape[1], -1))
    return (hu * emb[v]).sum(1), negative.sum(2)


def at_most(flag: str, asked: int | None, available: int, what: str) -> None:
    """Refuses a count flag that asks for more than there are (one line, alike on every
    rank), as every count flag of the link task is: ``what`` names the ``available`` ones.

    Raises:
        InvalidValueError: ``asked`` > ``available``.
    """
    if asked is not None and asked > available:
        raise same_on_every_rank(InvalidValueError(
            f"{flag} {asked}: {what} has only {available}; pass at most that, or leave it out "
            "to use them all"))


def check_eval_pairs(task: TaskConfig, *sets, say: bool = True) -> None:
    """Refuses ``--eval-pairs`` above the size of every held-out set ``sets`` (``(u, v)``
    pairs), as ``--train-edges`` above the training edges is; a set smaller than it is ranked
    whole, which the log says (``say``: on this rank)."""
    sizes = [u.numel() for u, _ in sets]
    at_most("--eval-pairs", task.eval_pairs, max(sizes), "the largest held-out set")
    if say and task.eval_pairs is not None and min(sizes) < task.eval_pairs:
        log.info("--eval-pairs %d: the held-out sets have %s pairs; a smaller one is ranked "
                 "whole", task.eval_pairs, sizes)


def heldout(pairs, task: TaskConfig, num_nodes: int, seed: int):
    """The held-out pairs ``(u, v)`` ranked with ``seed`` (:attr:`TaskConfig.eval_pairs
    <dglx_dist.config.TaskConfig.eval_pairs>` of them, a seeded choice, or all), their
    negatives (N, ``eval_negatives``) and every node whose embedding the ranking reads; a
    function of the arguments alone, so every rank and every system compared ranks the same."""
    u, v = pairs
    if task.eval_pairs is not None and task.eval_pairs < u.numel():
        gen = torch.Generator().manual_seed(seed + 5)
        keep = torch.randperm(u.numel(), generator=gen)[:task.eval_pairs].sort().values
        u, v = u[keep], v[keep]
    neg = eval_negatives(u.numel(), num_nodes, task.eval_negatives, seed)
    return u, v, neg, torch.unique(torch.cat([u, v, neg.reshape(-1)]))


def _evaluate(model, g, pairs, task: TaskConfig, seed: int, fanouts) -> dict[str, float]:
    """Ranking metrics over every rank's share of the held-out ``pairs`` (:func:`heldout`;
    embeddings with ``fanouts``, empty: full neighbourhoods) and how many were ranked."""
    from dglx_dist.api import inference, ranking_metrics
    from dglx_dist.sampling import even_chunk

    u, v, neg, nodes = heldout(pairs, task, g.num_nodes(), seed)
    h = inference(model, g, nodes, fanouts=fanouts or None)
    session = g.session
    mine = even_chunk(torch.arange(u.numel()), session.world_size, session.rank)
    pos, negative = heldout_scores(h, u[mine], v[mine], neg[mine])
    return ranking_metrics(pos, negative, ks=(1, 10, 50)) | {"pairs": u.numel()}


def train_edge_ids(num_edges: int, task: TaskConfig, seed: int) -> torch.Tensor:
    """The training graph's edges an epoch trains on (:attr:`TaskConfig.train_edges
    <dglx_dist.config.TaskConfig.train_edges>`, chosen by ``seed``)."""
    at_most("--train-edges", task.train_edges, num_edges, "the training graph's edge set")
    if task.train_edges is None or task.train_edges == num_edges:
        return torch.arange(num_edges)
    gen = torch.Generator().manual_seed(seed + 3)
    return torch.randperm(num_edges, generator=gen)[:task.train_edges].sort().values


def timed_link_step(timer: PhaseTimer, g, model, batch, opt, device=None) -> float:
    """One link-prediction step on ``batch`` (a loader's ``input_nodes, pair, neg, blocks``),
    each phase timed after the loader's (``sample``): the feature read (``pull``), forward
    with the loss, backward, the optimizer. Returns the loss."""
    input_nodes, pair, neg, blocks = batch
    timer.lap("sample")
    x = g.ndata["feat"][input_nodes]  # read on the host, as in DistDGL
    x = x.to(device) if device is not None and isinstance(x, torch.Tensor) else x
    timer.lap("pull")
    loss = link_loss(pair, neg, model(blocks, x))
    timer.lap("forward")
    opt.zero_grad()
    loss.backward()
    timer.lap("backward+allreduce")
    opt.step()
    timer.lap("optimizer")
    return float(loss)


def _epoch(model, g, loader, opt, epoch: int, progress: bool) -> EpochResult:
    """One epoch of training steps on this rank, with the seconds of each phase of the step
    (its record's ``phases_max``: the largest over ranks, as DGL's side of ``dglx bench``
    times them): the loader's next batch, the feature read, forward with the loss,
    backward, the optimizer."""
    start = time.perf_counter()
    total, steps, samples = 0.0, 0, 0
    from dglx_dist.api.metrics import PhaseTimer  # the drop-in API: imported when it runs

    timer = PhaseTimer()
    batches = tqdm(loader, desc=f"epoch {epoch}", leave=False, disable=bar_disable(progress))
    for batch in batches:
        total += timed_link_step(timer, g, model, batch, opt, loader.device)
        steps, samples = steps + 1, samples + batch[1].num_edges()
        timer.restart()
    timer.loader_epoch(loader.times)
    wall = time.perf_counter() - start
    return EpochResult(epoch, wall, steps, samples, total, phases=timer.finish(wall))


def train_link(data: Path, strategy, model: torch.nn.Module, config: RunConfig,
               out: TextIO | None, session) -> dict[str, float]:
    """Trains ``model`` (an encoder whose output rows are embeddings) for link prediction on
    the edges of dataset ``data`` under ``strategy`` (collective, in ``session``) as
    ``config`` says (its task, optimizer and loop; the partition cache of its data; progress
    bars from its job); writes the JSON lines to ``out`` (rank 0's; None elsewhere) and
    returns the test metrics."""
    import dglx_dist
    from dglx_dist.api.metrics import epoch_record
    from dglx_dist.prepare import ensure_partitions

    task, loop = config.task, config.loop
    if config.job.gpu_cache:
        raise NotSupportedError("--gpu-cache keeps the rows a loader puts on its blocks, and "
                                "the link task reads its features in the loop "
                                "(g.ndata['feat'][input_nodes]); expected --task node")
    torch.manual_seed(loop.seed)
    train_dir, val, test = split_once(data, loop.seed, session, config.data.cache_dir)
    check_eval_pairs(task, val, test, say=session.is_main)  # before training, not after
    parts = ensure_partitions(train_dir, strategy, session, config.data.cache_dir)
    g = dglx_dist.distribute(parts, strategy, session=session)
    reverse = reverse_ids(g.num_edges())
    model = dglx_dist.parallelize(model.to(strategy.compute_device(g.session)), g)
    torch.manual_seed(rank_seed(loop.seed, g.session.rank))  # each rank its own dropout
    fanouts = getattr(strategy.config, "fanouts", None)  # the sampled strategies' own
    eval_fanouts = getattr(strategy.config, "eval_fanouts", ())  # theirs, or full
    node_sampler = dglx_dist.NeighborSampler(list(fanouts)) if fanouts else \
        dglx_dist.MultiLayerFullNeighborSampler(model._num_layers)
    exclude = "reverse_id" if fanouts else None  # full-graph steps cannot exclude
    sampler = dglx_dist.as_edge_prediction_sampler(
        node_sampler, exclude=exclude, reverse_eids=reverse if exclude else None,
        negative_sampler=dglx_dist.negative_sampler.Uniform(task.negatives))
    loader = dglx_dist.DataLoader(g, train_edge_ids(g.num_edges(), task, loop.seed), sampler,
                                  batch_size=task.edge_batch_size, shuffle=True, seed=loop.seed,
                                  **config.job.train_loader())
    opt = config.optimizer.adam(model.parameters())
    session, show = g.session, config.job.progress and g.session.is_main
    with EpochBar(loop.epochs, show) as bar:
        for epoch in range(loop.epochs):
            before = session.counter.snapshot()
            result = _epoch(model, g, loader, opt, epoch, show)
            record = {"task": "link", **epoch_record(result, before, session.counter.snapshot(),
                                                     g.strategy.registered_name, session=session)}
            last = epoch == loop.epochs - 1
            if loop.eval_every and ((epoch + 1) % loop.eval_every == 0 or last):
                metrics = _evaluate(model, g, val, task, loop.seed + 1, eval_fanouts)
                record.update({f"val_{k}": round(m, 4) for k, m in metrics.items()})
            _write(out, record)
            bar.update(record)
            if session.is_main:  # the detail with -v
                log.debug("epoch %d: %s", epoch, key_values(record))
    test_metrics = _evaluate(model, g, test, task, loop.seed + 2, eval_fanouts)
    _write(out, {f"test_{k}": round(m, 4) for k, m in test_metrics.items()})
    return test_metrics


def _write(out: TextIO | None, record: dict) -> None:
    if out is not None:
        out.write(json.dumps(record) + "\n")
        out.flush()
