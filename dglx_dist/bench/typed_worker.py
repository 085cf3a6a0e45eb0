"""Our strategies training the R-GCN on a graph with node and edge types, through the drop-in
API, as a user's DGL script does (docs/heterographs.md): ``dglx bench``'s runner of a typed
dataset starts it under torchrun (``python -m dglx_dist.bench.typed_worker``): a loop of
its own rather than the Trainer's, so that it times each phase of a step as DGL's side does.

The loop is DGL's distributed R-GCN loop with our names: ``distribute`` of the partition
directory (made beforehand, as DGL's are), ``node_split(..., ntype=)`` of the labeled type's
masks, ``DataLoader(g, {ntype: ids}, NeighborSampler(fanouts))``, a ``DistEmbedding`` (zeros)
per featureless type stepped by ``dglx_dist.SparseAdam``,
``parallelize(RGCN(...))`` (:class:`~dglx_dist.models.RGCN`, the model DGL's side trains,
same seed: same initial weights) and Adam. Every epoch's metrics record is ``dglx train``'s
(:func:`~dglx_dist.api.metrics.epoch_record`: wall time, steps, bytes intra/inter server from
the comm layer's counters, peak memory), then the validation accuracy (full neighbourhoods,
outside the epoch's clock); the last also carries the test accuracy. Rank 0 writes them as
JSON lines on stdout, for the harness.
"""
from __future__ import annotations

import argparse
import sys
import time

from dglx_dist.cli_flags import add_flags, from_args
from dglx_dist.config import RunConfig
from dglx_dist.errors import InvalidValueError

__all__ = ["main", "train"]

EVAL_BATCH = 4096
"""Seeds per evaluation step (DGL's side: its worker's ``--eval-batch-size`` default)."""


class _Job:
    """The graph, the model and its inputs, the optimizers and the loaders of a run."""

    def __init__(self, g, config: RunConfig, fanouts: list[int], batch_size: int):
        import torch

        import dglx_dist
        from dglx_dist.bench.dgl_distdgl_typed import category_of
        from dglx_dist.models import RGCN

        self.g, self.category = g, category_of(g)
        data = g.nodes[self.category].data
        self.ids = {m: dglx_dist.node_split(data[f"{m}_mask"], g, ntype=self.category)
                    for m in ("train", "val", "test")}
        self.embeds = {nt: dglx_dist.DistEmbedding(
            g.num_nodes(nt), config.model.hidden, part_policy=g.get_node_partition_policy(nt))
            for nt in g.ntypes if "feat" not in g.nodes[nt].data}
        in_sizes = {nt: g.nodes[nt].data["feat"].shape[1] for nt in g.ntypes
                    if nt not in self.embeds}
        torch.manual_seed(config.loop.seed)
        model = RGCN(in_sizes, g.etypes, config.model.hidden, g.pdir.num_classes,
                     len(fanouts), dropout=config.model.dropout, category=self.category)
        self.model = dglx_dist.parallelize(model, g)
        self.opts = [config.optimizer.adam(self.model.parameters()),
                     dglx_dist.SparseAdam(list(self.embeds.values()),
                                                            lr=config.optimizer.lr)]
        self.loader = dglx_dist.DataLoader(
            g, {self.category: self.ids["train"]}, dglx_dist.NeighborSampler(fanouts),
            batch_size=batch_size, shuffle=True, seed=config.loop.seed)
        self.full = dglx_dist.MultiLayerFullNeighborSampler(len(fanouts))
        self.labels = data["label"]

    def logits(self, input_nodes, blocks):
        from dglx_dist.models import node_inputs

        return self.model(blocks, node_inputs(self.g, input_nodes, self.embeds))

    def epoch(self, epoch: int):
        """One epoch's training on this rank, as an :class:`EpochResult` whose record gets
        the phases' seconds (``phases_max``: the largest over ranks, as DGL's side)."""
        from dglx_dist.api.metrics import PhaseTimer
        from dglx_dist.bench.dgl_distdgl_nodes import timed_step
        from dglx_dist.models import node_inputs
        from dglx_dist.strategies.epochs import EpochResult

        self.model.train()
        t0, steps, samples, losses = time.perf_counter(), 0, 0, 0.0
        timer = PhaseTimer()
        for input_nodes, output_nodes, blocks in self.loader:
            timer.lap("sample")
            seeds = output_nodes[self.category]
            x, y = node_inputs(self.g, input_nodes, self.embeds), self.labels[seeds].long()
            timer.lap("pull")
            loss = timed_step(timer, self.model, blocks, x, y, self.opts)
            steps, samples, losses = steps + 1, samples + seeds.numel(), losses + loss
            timer.restart()
        wall = time.perf_counter() - t0
        return EpochResult(epoch, wall, steps, samples, losses,
                           extra={"phases_max": timer.max_over_ranks(wall)})

    def accuracy(self, split: str) -> float:
        """Accuracy on ``split``'s nodes with full neighbourhoods (collective)."""
        import torch

        import dglx_dist

        loader = dglx_dist.DataLoader(self.g, {self.category: self.ids[split]}, self.full,
                                      batch_size=EVAL_BATCH)
        self.model.eval()
        correct = total = 0
        with torch.no_grad():
            for input_nodes, output_nodes, blocks in loader:
                y = self.labels[output_nodes[self.category]].long()
                correct += int((self.logits(input_nodes, blocks).argmax(1) == y).sum())
                total += y.numel()
        correct, total = dglx_dist.all_reduce([correct, total]).tolist()
        return round(correct / max(total, 1), 4)


def train(config: RunConfig, fanouts: list[int], batch_size: int) -> None:
    """Trains the R-GCN on ``config``'s partitions under its strategy; rank 0 writes the
    records on stdout (collective)."""
    import dgl
    import numpy as np
    import torch

    import dglx_dist
    from dglx_dist.api.metrics import epoch_record
    from dglx_dist.report import json_record

    torch.manual_seed(config.loop.seed)
    dgl.seed(config.loop.seed)
    np.random.seed(config.loop.seed)
    g = dglx_dist.distribute(config.data.partitions, config.strategy.build())
    job, session = _Job(g, config, fanouts, batch_size), g.session
    for epoch in range(config.loop.epochs):
        before = session.counter.snapshot()
        result = job.epoch(epoch)
        record = epoch_record(result, before, session.counter.snapshot(),
                              g.strategy.registered_name, session=session)
        last = epoch == config.loop.epochs - 1
        if last or config.loop.eval_every and (epoch + 1) % config.loop.eval_every == 0:
            record["val_acc"] = job.accuracy("val")
        if last:
            record["test_acc"] = job.accuracy("test")
        if session.is_main:  # the harness reads these lines
            sys.stdout.write(json_record(record) + "\n")
            sys.stdout.flush()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_flags(p, RunConfig)  # dglx train's flags; --partitions names the typed partitions
    p.add_argument("--fanouts", required=True, help="per layer, input layer first")
    p.add_argument("--batch-size", type=int, required=True, help="seeds per rank per step")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Trains with the options of ``argv``; returns the exit code."""
    args = parse_args(argv)
    config = from_args(RunConfig, args)
    if config.data.partitions is None:
        raise InvalidValueError("typed_worker: --partitions is required (the harness "
                                "partitions the typed dataset first)")
    train(config, [int(f) for f in args.fanouts.split(",")], args.batch_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
