"""``dglx train --task link``: link prediction on a dataset's edges, through the drop-in API.

* Split: the dataset's edges are taken as undirected pairs (u < v; self-loops and repeats
  dropped) and cut 85/5/10 by the seed into training, validation and test pairs. The
  training graph holds both directions of each training pair (edge e's reverse is e + E, mod
  2E), so held-out pairs never pass messages.
* Training: a step scores a batch of training edges and ``negatives`` uniform negatives per
  edge by the dot product of the model's embeddings (binary cross-entropy). Where the strategy
  samples blocks (distdgl, p3) the batch's edges and their reverses are left out of them
  (DGL's ``exclude="reverse_id"``); the full-graph strategies pass messages over the whole
  training graph.
* Evaluation: each held-out pair is ranked against ``eval_negatives`` uniform negatives,
  each rank scoring its share of the pairs from the shared embeddings;
  :func:`~dglx_dist.api.ranking_metrics` gives MRR, Hits@K and AUC over every rank.

One JSON line per epoch (``task``, ``epoch``, ``loss``, ``epoch_time``, ``steps``, and the
validation metrics when evaluated) and one with the test metrics at the end.
"""
from __future__ import annotations

import dataclasses
import json
import time
from typing import TextIO

import dgl
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

__all__ = ["LinkConfig", "split_pairs", "train_link"]


@dataclasses.dataclass(frozen=True)
class LinkConfig:
    """What ``dglx train --task link`` trains with."""

    epochs: int = 10
    batch_size: int = 1024
    lr: float = 0.01
    weight_decay: float = 0.0
    negatives: int = 1
    eval_negatives: int = 100
    eval_every: int = 1
    seed: int = 0
    progress: bool = True


def split_pairs(g: dgl.DGLGraph, seed: int):
    """The training graph (both directions of the training pairs, ``g``'s node data), its
    reverse edge ids, and the validation and test pairs ``(u, v)``."""
    src, dst = g.edges()
    lo, hi = torch.minimum(src, dst), torch.maximum(src, dst)
    keep = lo != hi
    pairs = torch.unique(lo[keep] * g.num_nodes() + hi[keep])
    u, v = pairs // g.num_nodes(), pairs % g.num_nodes()
    perm = torch.randperm(u.numel(), generator=torch.Generator().manual_seed(seed))
    n_val, n_test = int(0.05 * u.numel()), int(0.10 * u.numel())
    val, test, train = perm[:n_val], perm[n_val:n_val + n_test], perm[n_val + n_test:]
    tu, tv = u[train], v[train]
    train_g = dgl.graph((torch.cat([tu, tv]), torch.cat([tv, tu])), num_nodes=g.num_nodes())
    for key, value in g.ndata.items():
        train_g.ndata[key] = value
    e = tu.numel()
    reverse = torch.cat([torch.arange(e) + e, torch.arange(e)])
    return train_g, reverse, (u[val], v[val]), (u[test], v[test])


def _scores(pair: dgl.DGLGraph, h: torch.Tensor) -> torch.Tensor:
    with pair.local_scope():
        pair.ndata["h"] = h
        pair.apply_edges(dgl.function.u_dot_v("h", "h", "s"))
        return pair.edata["s"].squeeze(1)


def _evaluate(model, g, pairs, k: int, seed: int) -> dict[str, float]:
    """Ranking metrics of this rank's share of ``pairs`` against ``k`` negatives each."""
    from dglx_dist.api import inference, ranking_metrics
    from dglx_dist.sampling import even_chunk

    h = inference(model, g)
    session = g.session
    gen = torch.Generator().manual_seed(seed)  # the same negatives on every rank
    neg = torch.randint(0, g.num_nodes(), (pairs[0].numel(), k), generator=gen)
    mine = even_chunk(torch.arange(pairs[0].numel()), session.world_size, session.rank)
    u, v, neg = pairs[0][mine], pairs[1][mine], neg[mine]
    hu = h[u]
    pos = (hu * h[v]).sum(1)
    negative = (hu.unsqueeze(1) * h[neg.reshape(-1)].reshape(u.numel(), k, -1)).sum(2)
    return ranking_metrics(pos, negative, ks=(1, 10, 50))


def _epoch(model, g, loader, opt, desc: str, progress: bool) -> tuple[float, int]:
    """One epoch of training steps: the sum of the step losses and the steps taken."""
    total, steps = 0.0, 0
    for input_nodes, pair, neg, blocks in tqdm(loader, desc=desc, leave=False,
                                               disable=not progress):
        h = model(blocks, g.ndata["feat"][input_nodes])
        pos, negative = _scores(pair, h), _scores(neg, h)
        scores = torch.cat([pos, negative])
        labels = torch.cat([torch.ones_like(pos), torch.zeros_like(negative)])
        loss = F.binary_cross_entropy_with_logits(scores, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total, steps = total + float(loss), steps + 1
    return total, steps


def train_link(graph: dgl.DGLGraph, strategy, model: torch.nn.Module, config: LinkConfig,
               out: TextIO, cache_dir) -> dict[str, float]:
    """Trains ``model`` (an encoder whose output rows are embeddings) for link prediction on
    ``graph``'s edges under ``strategy`` (collective); writes the JSON lines to ``out`` (rank
    0's; None elsewhere) and returns the test metrics."""
    import dglx_dist

    torch.manual_seed(config.seed)
    train_g, reverse, val, test = split_pairs(graph, config.seed)
    g = dglx_dist.distribute(train_g, strategy, cache_dir=cache_dir)
    model = dglx_dist.parallelize(model, g)
    fanouts = getattr(strategy.config, "fanouts", None)  # the sampled strategies' own
    node_sampler = dglx_dist.NeighborSampler(list(fanouts)) if fanouts else \
        dglx_dist.MultiLayerFullNeighborSampler(model._num_layers)
    exclude = "reverse_id" if fanouts else None  # full-graph steps cannot exclude
    sampler = dglx_dist.as_edge_prediction_sampler(
        node_sampler, exclude=exclude, reverse_eids=reverse if exclude else None,
        negative_sampler=dglx_dist.negative_sampler.Uniform(config.negatives))
    loader = dglx_dist.DataLoader(g, torch.arange(g.num_edges()), sampler,
                                  batch_size=config.batch_size, shuffle=True, seed=config.seed)
    opt = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    main = g.session.is_main
    for epoch in range(config.epochs):
        start = time.perf_counter()
        total, steps = _epoch(model, g, loader, opt, f"epoch {epoch}", config.progress and main)
        wall = dglx_dist.all_reduce(time.perf_counter() - start, op="max")
        loss = dglx_dist.all_reduce(total / max(steps, 1), op="mean")
        record = {"task": "link", "epoch": epoch, "strategy": g.strategy.registered_name,
                  "world_size": g.session.world_size, "steps": steps,
                  "loss": round(float(loss), 5), "epoch_time": round(float(wall), 4)}
        last = epoch == config.epochs - 1
        if config.eval_every and ((epoch + 1) % config.eval_every == 0 or last):
            metrics = _evaluate(model, g, val, config.eval_negatives, config.seed + 1)
            record.update({f"val_{k}": round(m, 4) for k, m in metrics.items()})
        _write(out, record)
    test_metrics = _evaluate(model, g, test, config.eval_negatives, config.seed + 2)
    _write(out, {f"test_{k}": round(m, 4) for k, m in test_metrics.items()})
    return test_metrics


def _write(out: TextIO | None, record: dict) -> None:
    if out is not None:
        out.write(json.dumps(record) + "\n")
        out.flush()
