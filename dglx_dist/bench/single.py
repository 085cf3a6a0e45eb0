"""The single-process DGL baseline of ``dglx bench``: plain DGL, one process, no dglx_dist
runtime.

The same model, seed, fanouts and Adam as every other system, the run config's
:data:`~dglx_dist.config.TRAINING` flags as ``dglx train`` takes them, and one JSON line per
epoch in the shape of ``dglx train``'s metrics records (evaluation with full neighbourhoods,
outside ``epoch_time``; docs/benchmarks.md). The harness runs it as a child process::

    python -m dglx_dist.bench.single --data DIR --model gcn --epochs 5 --fanouts 10,25 ...
"""
from __future__ import annotations

import argparse
import sys
import time

from dglx_dist.cli_flags import add_flags, from_args
from dglx_dist.config import TRAINING, RunConfig
from dglx_dist.errors import InvalidValueError
from dglx_dist.memory import peak_rss_bytes
from dglx_dist.report import json_record, print_line

__all__ = ["main", "train"]


def _accuracy(model, g, nids) -> float:
    import torch

    model.eval()
    with torch.no_grad():
        pred = model([g] * len(model.layers), g.ndata["feat"]).argmax(1)
    model.train()
    return round(float((pred[nids] == g.ndata["label"][nids]).float().mean()), 4)


def _epoch(model, opt, loader, labels) -> tuple[float, int, float]:
    """One epoch; returns its wall time, steps and mean loss."""
    import torch.nn.functional as F

    t0, steps, losses = time.perf_counter(), 0, 0.0
    for _input_nodes, seeds, blocks in loader:
        x = blocks[0].srcdata["feat"]
        loss = F.cross_entropy(model(blocks, x), labels[seeds].long())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses += float(loss.detach())
        steps += 1
    return time.perf_counter() - t0, steps, losses / max(steps, 1)


def train(args: argparse.Namespace) -> None:
    """Trains and prints the per-epoch records (``args``: :func:`parse_args`')."""
    import dgl
    import torch

    from dglx_dist.data import read_dataset, to_dgl
    from dglx_dist.models import MODELS

    torch.set_num_threads(args.threads)
    config = from_args(RunConfig, args, sections=TRAINING)
    fanouts = [int(x) for x in args.fanouts.split(",")]
    if config.task.name != "node" or len(fanouts) != config.model.layers:
        raise InvalidValueError(f"single-process DGL trains node classification with one "
                                f"fanout per layer; got --task {config.task.name}, --layers "
                                f"{config.model.layers} and --fanouts {args.fanouts}")
    ds = read_dataset(args.data)
    g = to_dgl(ds)
    m, loop = config.model, config.loop
    torch.manual_seed(loop.seed)
    model = MODELS[m.name](ds.feat.shape[1], m.hidden, ds.num_classes, m.layers,
                           dropout=m.dropout, row_normalize=m.row_normalize, convs=m.convs)
    opt = config.optimizer.adam(model.parameters())
    dgl.seed(loop.seed)
    ids = {m: torch.nonzero(g.ndata[f"{m}_mask"]).flatten() for m in ("train", "val", "test")}
    loader = dgl.dataloading.DataLoader(g, ids["train"], dgl.dataloading.NeighborSampler(fanouts),
                                        batch_size=args.batch_size, shuffle=True,
                                        drop_last=False)
    for epoch in range(loop.epochs):
        wall, steps, loss = _epoch(model, opt, loader, g.ndata["label"])
        record = {"epoch": epoch, "strategy": "dgl", "world_size": 1, "servers": 1,
                  "epoch_time": round(wall, 4), "steps": steps,
                  "samples": int(ids["train"].numel()), "loss": round(loss, 5),
                  "bytes_sent_intra": 0, "bytes_sent_inter": 0,
                  "peak_mem_mb": round(peak_rss_bytes() / 2**20, 1)}
        last = epoch == loop.epochs - 1
        if last or (loop.eval_every and (epoch + 1) % loop.eval_every == 0):
            record["val_acc"] = _accuracy(model, g, ids["val"])
        if last:
            record["test_acc"] = _accuracy(model, g, ids["test"])
        print_line(json_record(record))  # the harness reads these lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="dataset directory")
    add_flags(p, RunConfig, sections=TRAINING)  # node classification; --layers fanouts
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--fanouts", default="10,25", help="per layer, input layer first")
    p.add_argument("--threads", type=int, default=1)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Trains with the options of ``argv``; returns the exit code."""
    train(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
