"""DGL's own DistDGL training link prediction (``--task link`` of the worker,
:mod:`dglx_dist.bench.dgl_distdgl_worker`): the split, model, negatives and ranking of
``dglx train --task link`` (:mod:`dglx_dist.tasks.link`) through DGL's
``DistEdgeDataLoader``, as DGL's distributed link-prediction example does
(docs/benchmarks.md, "Link prediction"). ``partition`` (:func:`partition_link`) writes DGL's
partitions of the training graph and beside them the id maps and held-out pairs
(:data:`ARRAYS`); the trainer (:func:`train_link_dgl`) ranks the held-out pairs as ``dglx
train`` does.

Two things DGL's own definitions say that DGL 2.1's distributed loop does not do, done here
so that both sides train the same math (docs/benchmarks.md, "Link prediction"):

* ``exclude="reverse_id"`` leaves the batch's edges and their reverses out of the blocks
  (``dgl.dataloading.find_exclude_eids``), but ``DistGraph.sample_neighbors`` accepts
  ``exclude_edges`` and ignores it: :func:`excluding_sampler` drops them from each layer's
  frontier (ours leave them out of the draw itself).
* ``negative_sampler.Uniform`` draws every destination independently, from torch's
  generator; trainers seeded alike would draw the same destinations at every step, so each
  trainer's generator is seeded by its rank once the model is built (as ``dglx train``
  does; its negatives are drawn from each step's own seed).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from dglx_dist.bench.dgl_distdgl import timed_epoch

__all__ = ["ARRAYS", "excluding_sampler", "link_config", "partition_link", "train_link_dgl"]

ARRAYS = ("new_nid", "new_eid", "reverse", "val_u", "val_v", "test_u", "test_v")
"""The ``.npy`` files ``partition`` writes beside DGL's partitions (``link_<name>.npy``)."""


def link_config(args: argparse.Namespace):
    """The :class:`~dglx_dist.config.RunConfig` of the worker's options (its
    :data:`~dglx_dist.config.TRAINING` flags, and its ``--batch-size`` training edges per
    step)."""
    from dglx_dist.cli_flags import from_args
    from dglx_dist.config import TRAINING, RunConfig

    return from_args(RunConfig, args, sections=TRAINING).updated(
        task={"edge_batch_size": args.batch_size})


def partition_link(args: argparse.Namespace, graph_name: str) -> None:
    """Splits the dataset's edges as ``dglx train --task link`` does and partitions the
    training graph with DGL; writes the id maps and held-out pairs."""
    import dgl
    import torch

    from dglx_dist.data import read_dataset, to_dgl
    from dglx_dist.tasks.link import split_pairs

    train, reverse, val, test = split_pairs(read_dataset(args.data), args.seed)
    train_g = to_dgl(train)
    orig_nid, orig_eid = dgl.distributed.partition_graph(
        train_g, graph_name, args.parts, args.out, part_method="metis", balance_edges=True,
        return_mapping=True)
    new_nid, new_eid = torch.argsort(orig_nid), torch.argsort(orig_eid)  # the inverse maps
    arrays = {"new_nid": new_nid, "new_eid": new_eid,
              "reverse": new_eid[reverse[orig_eid]],  # DGL edge e's reverse, in DGL's ids
              "val_u": val[0], "val_v": val[1], "test_u": test[0], "test_v": test[1]}
    for name, value in arrays.items():
        np.save(Path(args.out, f"link_{name}.npy"), torch.as_tensor(value).numpy())


def excluding_sampler(fanouts: list[int]):
    """DGL's ``NeighborSampler(fanouts)`` whose blocks leave out ``exclude_eids``, as DGL's
    sampler does on a single machine, also on a ``DistGraph`` (whose ``sample_neighbors``
    ignores them in DGL 2.1): each layer's frontier is drawn as DGL draws it, then the
    excluded edges are removed before ``to_block`` (a destination that drew one has one
    neighbour fewer, where DGL's single-machine draw would take another if it has one)."""
    import dgl
    import torch

    class _Excluding(dgl.dataloading.NeighborSampler):
        def sample_blocks(self, g, seed_nodes, exclude_eids=None):
            output_nodes, blocks = seed_nodes, []
            for fanout in reversed(self.fanouts):
                frontier = g.sample_neighbors(seed_nodes, fanout, edge_dir=self.edge_dir,
                                              prob=self.prob, replace=self.replace)
                if exclude_eids is not None:
                    drop = torch.isin(frontier.edata[dgl.EID], exclude_eids)
                    frontier = dgl.remove_edges(frontier, torch.nonzero(drop).squeeze(1))
                block = dgl.to_block(frontier, seed_nodes)
                block.edata[dgl.EID] = frontier.edata[dgl.EID]
                seed_nodes = block.srcdata[dgl.NID]
                blocks.insert(0, block)
            return seed_nodes, output_nodes, blocks

    return _Excluding(fanouts)


def _arrays(part_config: str) -> dict[str, Any]:
    import torch

    root = Path(part_config).parent
    return {n: torch.from_numpy(np.load(root / f"link_{n}.npy")) for n in ARRAYS}


def _epoch(g, loader, model, opt) -> tuple[float, int, float, dict[str, float]]:
    """One epoch of DGL's link-prediction loop: wall time, steps, mean loss and the seconds
    of each phase of the step (as :func:`dglx_dist.tasks.link._epoch` times ours)."""
    from dglx_dist.api.metrics import PhaseTimer
    from dglx_dist.tasks.link import timed_link_step

    t0, steps, total, timer = time.perf_counter(), 0, 0.0, PhaseTimer()
    with model.join():
        for batch in loader:
            total, steps = total + timed_link_step(timer, g, model, batch, opt), steps + 1
            timer.restart()
    wall = time.perf_counter() - t0
    return wall, steps, total / max(steps, 1), timer.finish(wall)


def _embeddings(g, model, nodes, fanouts: list[int], layers: int, hidden: int, name: str):
    """The output rows of ``nodes`` (DGL's ids) with ``fanouts`` (empty: full
    neighbourhoods), in a DistTensor (collective)."""
    import dgl
    import torch
    import torch.distributed as dist

    from dglx_dist.bench.dgl_distdgl_nodes import inference_batches

    emb = dgl.distributed.DistTensor((g.num_nodes(), hidden), torch.float32, name=name)
    wanted = torch.zeros(g.num_nodes(), dtype=torch.bool)
    wanted[nodes] = True
    mine = dgl.distributed.node_split(wanted, g.get_partition_book(), force_even=True)
    for input_nodes, seeds, blocks in inference_batches(g, model, mine, fanouts, layers, 4096,
                                                        dgl.dataloading.DistNodeDataLoader,
                                                        dgl.dataloading):
        emb[seeds] = model(blocks, g.ndata["feat"][input_nodes])
    dist.barrier()
    return emb


def _evaluate(g, model, arrays, which: str, args, task, seed: int,
              epoch: int) -> dict[str, float]:
    """Ranking metrics of the held-out pairs ``which`` (val, test) that ``dglx train --task
    link`` ranks with ``seed`` and ``task`` (:func:`~dglx_dist.tasks.link.heldout`), after
    ``epoch``."""
    import torch
    import torch.distributed as dist

    from dglx_dist.api.metrics import ranking_from_scores
    from dglx_dist.sampling import even_chunk
    from dglx_dist.tasks.link import heldout, heldout_scores

    to_dgl = arrays["new_nid"]  # original ids -> DGL's
    u, v, neg, nodes = heldout((arrays[f"{which}_u"], arrays[f"{which}_v"]), task,
                               g.num_nodes(), seed)
    emb = _embeddings(g, model, to_dgl[nodes], args.eval_fanouts, len(args.fanouts),
                      args.hidden, f"link_emb_{which}_{epoch}")
    mine = even_chunk(torch.arange(u.numel()), dist.get_world_size(), dist.get_rank())
    pos, negative = heldout_scores(emb, to_dgl[u[mine]], to_dgl[v[mine]], to_dgl[neg[mine]])
    return ranking_from_scores(_gather(pos), _gather(negative), ks=(1, 10, 50)) | {
        "pairs": u.numel()}


def _gather(t):
    """Every trainer's rows of ``t``, in rank order (rows may differ by trainer)."""
    import torch
    import torch.distributed as dist

    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, torch.tensor([t.shape[0]]))
    padded = torch.zeros((int(max(sizes)), *t.shape[1:]), dtype=t.dtype)
    padded[:t.shape[0]] = t
    every = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(every, padded)
    return torch.cat([e[:int(n)] for e, n in zip(every, sizes)])


def train_link_dgl(args: argparse.Namespace, g, reduce) -> dict[str, Any]:
    """DGL's DistDGL link-prediction loop on ``g`` (a DistGraph); returns the per-epoch
    records and the test metrics (every trainer). ``reduce(values, op)``: all-reduce."""
    import dgl
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from dglx_dist.models import MODELS
    from dglx_dist.tasks.link import rank_seed, train_edge_ids

    config, arrays, layers = link_config(args), _arrays(args.part_config), len(args.fanouts)
    torch.manual_seed(args.seed)
    model = MODELS[args.model](g.ndata["feat"].shape[1], args.hidden, args.hidden, layers,
                               dropout=args.dropout, row_normalize=args.row_normalize,
                               convs=args.convs)
    ddp = DistributedDataParallel(model)  # rank 0's weights on every trainer
    opt = torch.optim.Adam(ddp.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    dgl.seed(args.seed * 7919 + torch.distributed.get_rank())  # each trainer its draws
    torch.manual_seed(rank_seed(args.seed, torch.distributed.get_rank()))  # own negatives
    chosen = torch.zeros(g.num_edges(), dtype=torch.bool)
    chosen[arrays["new_eid"][train_edge_ids(g.num_edges(), config.task, config.loop.seed)]] = True
    loader = dgl.dataloading.DistEdgeDataLoader(
        g, dgl.distributed.edge_split(chosen, g.get_partition_book(), force_even=True),
        excluding_sampler(args.fanouts), exclude="reverse_id",
        reverse_eids=arrays["reverse"],
        negative_sampler=dgl.dataloading.negative_sampler.Uniform(config.task.negatives),
        batch_size=config.task.edge_batch_size, shuffle=True, drop_last=False)
    records = []
    for epoch in range(config.loop.epochs):
        records.append(timed_epoch(args, reduce, epoch,
                                   lambda: _epoch(g, loader, ddp, opt)))
        metrics = _evaluate(g, model, arrays, "val", args, config.task, config.loop.seed + 1,
                            epoch)
        records[-1].update({f"val_{k}": round(m, 4) for k, m in metrics.items()})
    test = _evaluate(g, model, arrays, "test", args, config.task, config.loop.seed + 2,
                     config.loop.epochs)
    return {"records": records, "test": {f"test_{k}": round(m, 4) for k, m in test.items()}}
