"""DGL's DistDGL node-classification loop, run by the worker's trainer
(:mod:`dglx_dist.bench.dgl_distdgl_worker`): DGL's
examples/distributed/graphsage/node_classification.py loop with its phases timed
(:data:`~dglx_dist.bench.dgl_distdgl_worker.PHASES`), over a :class:`NodeJob`: our reference
model on a graph without types (:func:`node_job`), or the R-GCN on a typed one
(:func:`dglx_dist.bench.dgl_distdgl_typed.node_job`).
"""
from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any, Callable

from dglx_dist.api.metrics import PhaseTimer
from dglx_dist.bench.dgl_distdgl import epoch_bytes, sent_bytes
from dglx_dist.memory import peak_rss_bytes

__all__ = ["NodeJob", "evaluate", "node_job", "train_epoch", "train_nodes", "whole_degree_hooks"]


def timed_step(timer: PhaseTimer, model, blocks, x, y, opts) -> float:
    """One training step, each phase timed: forward with the cross-entropy, backward (with
    DDP's all-reduce), the optimizers in turn. Returns the loss."""
    import torch.nn.functional as F

    loss = F.cross_entropy(model(blocks, x), y)
    timer.lap("forward")
    for opt in opts:
        opt.zero_grad()
    loss.backward()
    timer.lap("backward+allreduce")
    for opt in opts:
        opt.step()
    timer.lap("optimizer")
    return float(loss)


@dataclasses.dataclass(frozen=True)
class NodeJob:
    """What DGL's node-classification loop trains (:func:`train_epoch`, :func:`evaluate`).

    Attributes:
        model: the model (evaluated as it is).
        ddp: the model under DDP (trained).
        opts: the optimizers, zeroed and stepped in this order each step.
        loader: the training loader (``DistNodeDataLoader``).
        nids: this trainer's seeds of each split (``train``, ``val``, ``test``), as the
            loaders take them (a tensor; on a typed graph, ``{ntype: tensor}``).
        inputs: the first layer's input rows of a step's ``input_nodes`` (pulled).
        labels: the labels of a step's seeds.
    """

    model: Any
    ddp: Any
    opts: list
    loader: Any
    nids: dict[str, Any]
    inputs: Callable[[Any], Any]
    labels: Callable[[Any], Any]


def _count(nodes) -> int:
    return sum(v.numel() for v in nodes.values()) if isinstance(nodes, dict) else nodes.numel()


def train_epoch(job: NodeJob) -> tuple[float, int, float, dict[str, float]]:
    """One epoch of DGL's example loop; returns wall time, steps, mean loss and phase times."""
    t0 = time.perf_counter()
    timer, steps, losses, rows = PhaseTimer(), 0, 0.0, 0
    with job.ddp.join():
        for input_nodes, seeds, blocks in job.loader:
            timer.lap("sample")
            x, y = job.inputs(input_nodes), job.labels(seeds)
            timer.lap("pull")
            losses += timed_step(timer, job.ddp, blocks, x, y, job.opts)
            steps += 1
            rows += _count(input_nodes)
            timer.restart()
    wall = time.perf_counter() - t0
    return wall, steps, losses / max(steps, 1), {**timer.finish(wall), "input_rows": rows}


def evaluate(g, job: NodeJob, nids, fanouts, batch_size: int) -> tuple[int, int]:
    """Correct predictions and count on ``nids`` (full neighborhoods unless ``fanouts``),
    each full layer's GraphConv normalised by its sources' out-degrees in the whole graph
    (:func:`whole_degree_hooks`), as ``dglx train`` and single-process DGL score."""
    import dgl
    import torch

    model = job.model
    sampler = (dgl.dataloading.NeighborSampler(fanouts) if fanouts else
               dgl.dataloading.MultiLayerFullNeighborSampler(len(model.layers)))
    loader = dgl.dataloading.DistNodeDataLoader(g, nids, sampler, batch_size=batch_size,
                                                shuffle=False, drop_last=False)
    hooks = whole_degree_hooks(g, model, fanouts)
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for input_nodes, seeds, blocks in loader:
            pred = model(blocks, job.inputs(input_nodes)).argmax(1)
            y = job.labels(seeds)
            correct += int((pred == y).sum())
            total += y.numel()
    model.train()
    for hook in hooks:
        hook.remove()
    return correct, total


def whole_degree_hooks(g, model, fanouts) -> list:
    """On a graph without types, forward pre-hooks on the model's layers that take every
    in-neighbour (``fanouts`` empty or -1) scaling their source rows so that a GraphConv
    normalises by the sources' out-degrees in the whole graph (DistDGL's ``g.out_degrees``)
    rather than within the block; the handles, to remove."""
    from dglx_dist.convs import adapter_for
    from dglx_dist.errors import InvalidValueError

    if len(g.ntypes) > 1:
        return []
    hooks = []
    for i, conv in enumerate(model.layers):
        try:
            adapter = adapter_for(conv)
        except InvalidValueError:  # not a conv this package knows: left as DGL computes it
            continue
        if fanouts and fanouts[i] != -1:
            continue

        def scaled(module, args, adapter=adapter):
            import dgl

            block, x = args[0], args[1]
            degree = g.out_degrees(block.srcdata[dgl.NID]).double()
            scale = adapter.degree_source_scale(module, block, degree)
            return None if scale is None else (block, x * scale, *args[2:])

        hooks.append(conv.register_forward_pre_hook(scaled))
    return hooks


def node_job(args: argparse.Namespace, g, masks: tuple[str, ...]) -> NodeJob:
    """Our reference model (``--model``) under DDP, Adam and the training loader over this
    trainer's share of the training nodes (DGL's GraphSAGE example)."""
    import dgl
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from dglx_dist.models import MODELS

    pb = g.get_partition_book()
    nids = {m: dgl.distributed.node_split(g.ndata[f"{m}_mask"], pb, force_even=True)
            for m in masks}
    torch.manual_seed(args.seed)
    model = MODELS[args.model](g.ndata["feat"].shape[1], args.hidden, args.num_classes,
                               len(args.fanouts), dropout=args.dropout,
                               row_normalize=args.row_normalize)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    dgl.seed(args.seed * 7919 + args.machine)
    loader = dgl.dataloading.DistNodeDataLoader(
        g, nids["train"], dgl.dataloading.NeighborSampler(args.fanouts),
        batch_size=args.batch_size, shuffle=True, drop_last=False)
    feat, label = g.ndata["feat"], g.ndata["label"]
    return NodeJob(model, ddp, [opt], loader, nids, inputs=lambda nodes: feat[nodes],
                   labels=lambda seeds: label[seeds].long())


def train_nodes(args: argparse.Namespace, g, job: NodeJob, reduce) -> tuple[dict, float]:
    """The node-classification epochs, their records, validation accuracy after each (with
    ``--eval-every 1``) and test accuracy (collective; ``reduce(values, op)``: all-reduce).
    Returns the result and this trainer's peak memory in MiB before the test evaluation."""
    import torch.distributed as dist

    nids = job.nids
    records: list[dict[str, Any]] = []
    for epoch in range(args.epochs):
        sent, started = sent_bytes(args.ifname), time.time()
        wall, steps, loss, phases = train_epoch(job)
        names = sorted(phases)
        maxes = reduce([wall, steps, -started] + [phases[k] for k in names], dist.ReduceOp.MAX)
        mean_loss = reduce([loss], dist.ReduceOp.SUM)[0] / args.machines
        records.append({"epoch": epoch, "started_at": round(-maxes[2], 3),
                        "epoch_time": round(maxes[0], 4), "steps": int(maxes[1]),
                        "loss": round(mean_loss, 5),
                        "phases_max": {k: round(v, 4) for k, v in zip(names, maxes[3:])},
                        **epoch_bytes(args.ifname, sent, reduce)})
        if args.eval_every == 1:  # after the epoch's clock stopped, as dglx train's val_acc
            correct, total = reduce(list(evaluate(g, job, nids["val"], args.eval_fanouts,
                                                  args.eval_batch_size)), dist.ReduceOp.SUM)
            records[-1]["val_acc"] = round(correct / max(total, 1), 4)
    peak_train = peak_rss_bytes() / 2**20
    correct, total = reduce(list(evaluate(g, job, nids["test"], args.eval_fanouts,
                                          args.eval_batch_size)), dist.ReduceOp.SUM)
    out = {"records": records, "test_acc": round(correct / max(total, 1), 4),
           "test_nodes": int(total), "train_nodes_per_trainer": _count(nids["train"])}
    return out, peak_train
