"""DGL's node-classification loop (its GraphSAGE example's; on a typed graph its R-GCN
example's) with its phases timed (:data:`~dglx_dist.bench.dgl_distdgl_worker.PHASES`), over
a :class:`NodeJob`. Since our drop-in API carries DGL's names, the same loop trains both
sides of a benchmark: DGL's DistDGL (:func:`node_job`, in the worker's trainer:
:func:`train_nodes`) and our strategies on a typed dataset (:func:`dropin_job`, started
under torchrun as ``python -m dglx_dist.bench.dgl_distdgl_nodes``: :func:`main`; rank 0
writes ``dglx train``'s records as JSON lines). What the kind of graph changes is data
(:data:`MODELS_BY_KIND`). docs/benchmarks.md, "Graphs with node and edge types", says more.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import time
from typing import Any, Callable, NamedTuple

from dglx_dist.api.metrics import PhaseTimer
from dglx_dist.bench.dgl_distdgl import timed_epoch
from dglx_dist.cli_flags import add_flags, from_args, tuple_of
from dglx_dist.config import RunConfig
from dglx_dist.errors import DatasetFormatError, InvalidValueError
from dglx_dist.memory import peak_rss_bytes

__all__ = ["MASKS", "MODELS_BY_KIND", "NodeJob", "category_of", "dropin_job", "evaluate",
           "inference_batches", "main", "node_job", "train_epoch", "train_nodes", "typed",
           "whole_degree_hooks"]

MASKS = ("train", "val", "test")


def typed(g) -> bool:
    """Whether ``g`` (a DGLGraph, DGL's DistGraph or ours) has node or edge types."""
    return g.ntypes != ["_N"] or len(g.etypes) != 1


def category_of(g) -> str:
    """The node type with labels (the one the run classifies; ``_N`` without types) of
    ``g``, a DGLGraph, DGL's DistGraph or ours."""
    labeled = [nt for nt in g.ntypes if "label" in g.nodes[nt].data]
    if len(labeled) != 1:
        raise DatasetFormatError(f"expected one node type with labels (the typed dataset's "
                                 f"category), found {labeled or 'none'}")
    return labeled[0]


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
        model: the model evaluated (DGL's: the module under DDP; ours: ``parallelize``'s).
        ddp: the model trained.
        opts: the optimizers, zeroed and stepped in this order each step.
        loader: the training loader.
        nids: this trainer's seeds of each split (``train``, ``val``, ``test``), as the
            loaders take them (a tensor; on a typed graph, ``{ntype: tensor}``).
        inputs: the first layer's input rows of a step's ``input_nodes`` (pulled).
        labels: the labels of a step's seeds.
        loader_class: the evaluation's loader (DGL's ``DistNodeDataLoader``, or ours).
        sampling: where the evaluation's ``NeighborSampler`` and
            ``MultiLayerFullNeighborSampler`` come from (``dgl.dataloading``, or
            :mod:`dglx_dist`: no DGL needed).
        join: the context of an epoch's steps (DDP's ``join``: ranks may take uneven steps).
    """

    model: Any
    ddp: Any
    opts: list
    loader: Any
    nids: dict[str, Any]
    inputs: Callable[[Any], Any]
    labels: Callable[[Any], Any]
    loader_class: Callable[..., Any]
    sampling: Any
    join: Callable[[], Any] = contextlib.nullcontext


class Epoch(NamedTuple):
    """One epoch's training on this trainer (:func:`train_epoch`)."""

    wall: float
    steps: int
    samples: int
    """Seeds trained on."""
    loss_sum: float
    rows: int
    """Input rows of the steps."""
    timer: PhaseTimer
    """The phases' seconds (finished: ``other`` is what no phase took)."""


def _count(nodes) -> int:
    return sum(v.numel() for v in nodes.values()) if isinstance(nodes, dict) else nodes.numel()


def train_epoch(job: NodeJob) -> Epoch:
    """One epoch of DGL's example loop."""
    t0 = time.perf_counter()
    timer, steps, losses, rows, samples = PhaseTimer(), 0, 0.0, 0, 0
    with job.join():
        for input_nodes, seeds, blocks in job.loader:
            timer.lap("sample")
            x, y = job.inputs(input_nodes), job.labels(seeds)
            timer.lap("pull")
            losses += timed_step(timer, job.ddp, blocks, x, y, job.opts)
            steps, samples = steps + 1, samples + y.numel()
            rows += _count(input_nodes)
            timer.restart()
    wall = time.perf_counter() - t0
    timer.finish(wall)
    return Epoch(wall, steps, samples, losses, rows, timer)


def inference_batches(g, model, nids, fanouts, layers: int, batch_size: int, loader_class,
                      sampling):
    """The ``(input_nodes, seeds, blocks)`` of ``nids`` (``layers`` full neighbourhoods
    unless ``fanouts``) from ``loader_class`` and ``sampling``'s samplers (DGL's or ours),
    with ``model`` in eval mode and no gradients (back in train mode after)."""
    import torch

    sampler = (sampling.NeighborSampler(fanouts) if fanouts else
               sampling.MultiLayerFullNeighborSampler(layers))
    model.eval()
    try:
        with torch.no_grad():
            yield from loader_class(g, nids, sampler, batch_size=batch_size, shuffle=False,
                                    drop_last=False)
    finally:
        model.train()


def evaluate(g, job: NodeJob, nids, fanouts, batch_size: int) -> tuple[int, int]:
    """Correct predictions and count on ``nids`` (full neighborhoods unless ``fanouts``),
    each full layer's GraphConv normalised by its sources' out-degrees in the whole graph
    (:func:`whole_degree_hooks`), as ``dglx train`` and single-process DGL score."""
    hooks = whole_degree_hooks(g, job.model, fanouts)
    correct = total = 0
    for input_nodes, seeds, blocks in inference_batches(
            g, job.model, nids, fanouts, len(job.model.layers), batch_size, job.loader_class,
            job.sampling):
        y = job.labels(seeds)
        correct += int((job.model(blocks, job.inputs(input_nodes)).argmax(1) == y).sum())
        total += y.numel()
    for hook in hooks:
        hook.remove()
    return correct, total


def whole_degree_hooks(g, model, fanouts) -> list:
    """On a graph without types, forward pre-hooks on the model's layers that take every
    in-neighbour (``fanouts`` empty or -1) scaling their source rows so that a GraphConv
    normalises by the sources' out-degrees in the whole graph (DistDGL's ``g.out_degrees``)
    rather than within the block; the handles, to remove."""
    from dglx_dist.convs import adapter_for

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


class JobModel(NamedTuple):
    """The model of a job on a kind of graph, and its inputs (:data:`MODELS_BY_KIND`)."""

    model: Any
    embeds: dict[str, Any]
    """A ``DistEmbedding`` per featureless node type (trained by ``SparseAdam``)."""
    inputs: Callable[[Any], Any]
    labels: Callable[[Any], Any]


def _reference(args: argparse.Namespace, g, embedding, name) -> JobModel:
    """Our reference model (``--model``) over ``feat``, seeded."""
    import torch

    from dglx_dist.models import MODELS

    torch.manual_seed(args.seed)
    model = MODELS[args.model](g.ndata["feat"].shape[1], args.hidden, args.num_classes,
                               len(args.fanouts), dropout=args.dropout,
                               row_normalize=args.row_normalize, convs=args.convs)
    feat, label = g.ndata["feat"], g.ndata["label"]
    return JobModel(model, {}, lambda nodes: feat[nodes], lambda seeds: label[seeds].long())


def _rgcn(args: argparse.Namespace, g, embedding, name) -> JobModel:
    """The R-GCN over ``feat`` and ``embedding(...)`` (zeros; named ``name(ntype)``) per
    featureless type, seeded; the labeled type's labels."""
    import torch

    from dglx_dist.models import RGCN, node_inputs

    category = category_of(g)
    embeds = {nt: embedding(g.num_nodes(nt), args.hidden, name(nt),
                            part_policy=g.get_node_partition_policy(nt))
              for nt in g.ntypes if "feat" not in g.nodes[nt].data}
    in_sizes = {nt: g.nodes[nt].data["feat"].shape[1] for nt in g.ntypes if nt not in embeds}
    torch.manual_seed(args.seed)
    model = RGCN(in_sizes, g.etypes, args.hidden, args.num_classes, len(args.fanouts),
                 dropout=args.dropout, category=category)
    labels = g.nodes[category].data["label"]
    return JobModel(model, embeds, lambda nodes: node_inputs(g, nodes, embeds),
                    lambda seeds: labels[seeds[category]].long())


MODELS_BY_KIND: dict[bool, Callable[..., JobModel]] = {False: _reference, True: _rgcn}
"""The model of a job by whether its graph has types (:func:`typed`)."""


def splits(g, node_split, book, masks: tuple[str, ...]) -> dict[str, Any]:
    """This trainer's seeds of each split: ``node_split`` of the labeled type's masks, as the
    loaders take them (``{ntype: ids}`` on a typed graph)."""
    category = category_of(g)
    data = g.nodes[category].data
    ids = {m: node_split(data[f"{m}_mask"], book, ntype=category, force_even=True)
           for m in masks}
    return {m: {category: v} for m, v in ids.items()} if typed(g) else ids


def node_job(args: argparse.Namespace, g, masks: tuple[str, ...]) -> NodeJob:
    """DGL's side on its ``DistGraph`` ``g``: the model under DDP (``find_unused_parameters``
    on a typed graph: the last layer's relations into other types carry no message), Adam
    (and DGL's ``SparseAdam``) and ``DistNodeDataLoader`` over this trainer's share of the
    training nodes (DGL's GraphSAGE and R-GCN examples)."""
    import dgl
    import torch
    from torch.nn.parallel import DistributedDataParallel

    nids = splits(g, dgl.distributed.node_split, g.get_partition_book(), masks)
    job = MODELS_BY_KIND[typed(g)](args, g, dgl.distributed.DistEmbedding, "emb_{}".format)
    ddp = DistributedDataParallel(job.model, find_unused_parameters=typed(g))
    opts = [torch.optim.Adam(ddp.parameters(), lr=args.lr, weight_decay=args.weight_decay)]
    if job.embeds:
        opts.append(dgl.distributed.optim.SparseAdam(list(job.embeds.values()), lr=args.lr))
    dgl.seed(args.seed * 7919 + torch.distributed.get_rank())  # each trainer its draws
    loader = dgl.dataloading.DistNodeDataLoader(
        g, nids["train"], dgl.dataloading.NeighborSampler(args.fanouts),
        batch_size=args.batch_size, shuffle=True, drop_last=False)
    return NodeJob(job.model, ddp, opts, loader, nids, job.inputs, job.labels,
                   dgl.dataloading.DistNodeDataLoader, dgl.dataloading, ddp.join)


def dropin_job(args: argparse.Namespace, g) -> NodeJob:
    """Our side on ``distribute``'s graph ``g``, through the drop-in API: the model
    ``parallelize`` wraps under ``g``'s strategy, Adam (and our ``SparseAdam``) and our
    ``DataLoader`` over this rank's share of the training nodes."""
    import torch

    import dglx_dist

    nids = splits(g, dglx_dist.node_split, g, MASKS)
    job = MODELS_BY_KIND[typed(g)](args, g, dglx_dist.DistEmbedding, lambda nt: None)
    model = dglx_dist.parallelize(job.model, g)
    opts = [torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)]
    if job.embeds:
        opts.append(dglx_dist.SparseAdam(list(job.embeds.values()), lr=args.lr))
    loader = dglx_dist.DataLoader(g, nids["train"], dglx_dist.NeighborSampler(args.fanouts),
                                  batch_size=args.batch_size, shuffle=True, seed=args.seed)
    return NodeJob(model, model, opts, loader, nids, job.inputs, job.labels,
                   dglx_dist.DistNodeDataLoader, dglx_dist)


def train_nodes(args: argparse.Namespace, g, job: NodeJob, reduce) -> tuple[dict, float]:
    """The node-classification epochs, their records, validation accuracy after each (with
    ``--eval-every 1``) and test accuracy (collective; ``reduce(values, op)``: all-reduce).
    Returns the result and this trainer's peak memory in MiB before the test evaluation."""
    import torch.distributed as dist

    def epoch() -> tuple[float, int, float, dict[str, float]]:
        ran = train_epoch(job)
        return (ran.wall, ran.steps, ran.loss_sum / max(ran.steps, 1),
                {**ran.timer.t, "input_rows": ran.rows})

    total_of = lambda values: reduce(values, dist.ReduceOp.SUM)  # noqa: E731
    records = []
    for n in range(args.epochs):
        records.append(timed_epoch(args, reduce, n, epoch))
        if args.eval_every == 1:  # after the epoch's clock stopped, as dglx train's val_acc
            records[-1]["val_acc"] = _accuracy(g, job, "val", args.eval_fanouts,
                                              args.eval_batch_size, total_of)[0]
    peak_train = peak_rss_bytes() / 2**20
    test_acc, total = _accuracy(g, job, "test", args.eval_fanouts, args.eval_batch_size,
                               total_of)
    return {"records": records, "test_acc": test_acc, "test_nodes": total,
            "train_nodes_per_trainer": _count(job.nids["train"])}, peak_train


def _accuracy(g, job: NodeJob, split: str, fanouts, batch_size: int,
             total_of) -> tuple[float, int]:
    """Accuracy on ``split``'s seeds (:func:`evaluate`) over every trainer, and their count
    (collective: ``total_of(values)`` sums them over the trainers)."""
    correct, total = total_of(list(evaluate(g, job, job.nids[split], fanouts, batch_size)))
    return round(correct / max(total, 1), 4), int(total)


def train_dropin(args: argparse.Namespace) -> None:
    """Our side: trains on ``--partitions`` under ``--strategy`` (:func:`dropin_job`); rank
    0 writes the records on stdout (collective)."""
    import numpy as np
    import torch

    import dglx_dist
    from dglx_dist.api.metrics import epoch_record
    from dglx_dist.data.convert import dgl_installed
    from dglx_dist.report import json_record, print_line
    from dglx_dist.strategies.epochs import EpochResult

    config = from_args(RunConfig, args)
    if config.data.partitions is None:
        raise InvalidValueError("dgl_distdgl_nodes: --partitions is required (the harness "
                                "partitions the dataset first)")
    torch.manual_seed(config.loop.seed)
    if dgl_installed():  # DGL's sampling may serve the drop-in API there
        import dgl

        dgl.seed(config.loop.seed)
    np.random.seed(config.loop.seed)
    g = dglx_dist.distribute(config.data.partitions, config.strategy.build())
    job, session, loop = dropin_job(args, g), g.session, config.loop
    total_of = lambda values: dglx_dist.all_reduce(values).tolist()  # noqa: E731
    for epoch in range(loop.epochs):
        before = session.counter.snapshot()
        ran = train_epoch(job)
        phases = {"phases_max": ran.timer.max_over_ranks(ran.wall)}  # in the epoch's bytes
        record = epoch_record(EpochResult(epoch, ran.wall, ran.steps, ran.samples, ran.loss_sum,
                                          extra=phases), before, session.counter.snapshot(),
                              g.strategy.registered_name, session=session)
        last = epoch == loop.epochs - 1
        if last or loop.eval_every and (epoch + 1) % loop.eval_every == 0:
            record["val_acc"] = _accuracy(g, job, "val", (), args.eval_batch_size, total_of)[0]
        if last:
            record["test_acc"] = _accuracy(g, job, "test", (), args.eval_batch_size, total_of)[0]
        if session.is_main:  # the harness reads these lines
            print_line(json_record(record))


def main(argv: list[str] | None = None) -> int:
    """Our side with the options of ``argv`` (``dglx train``'s flags, ``--partitions``
    naming partitions made beforehand); returns the exit code."""
    p = argparse.ArgumentParser(description="our strategies in DGL's loop (drop-in API)")
    add_flags(p, RunConfig)
    p.add_argument("--fanouts", type=tuple_of(int), required=True, help="per layer, input first")
    p.add_argument("--batch-size", type=int, required=True, help="seeds per rank per step")
    p.add_argument("--num-classes", type=int, required=True)
    p.add_argument("--eval-batch-size", type=int, default=4096, help="seeds per step")
    train_dropin(p.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
