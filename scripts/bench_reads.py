"""Benchmark: how a training loop's node-data reads cost per epoch through the drop-in API.

Mini-batch GraphSAGE on Cora under ``distdgl`` (``NeighborSampler([10, 10])``, batch 64,
every node a seed), on local gloo ranks: 2 ranks as 2 servers, 4 ranks as 2 virtual servers.
Four ways of reading a batch's features and labels, alternated epoch by epoch:

* ``loader ids``: ``g.ndata["feat"][input_nodes]`` as a script writes it, with the very ids
  the loader handed over: from the second step on, the rows the loader pulled for the step
  (all ranks together, while the next step was sampled), the default;
* ``alone``: the same reads with a copy of the ids (``input_nodes.clone()``): each rank asks
  the owners by itself (the serving threads answer), as every read did before loaders
  pulled them;
* ``collective``: the copies' reads made through the collective path (every rank pulls at
  the same step, when it reads);
* ``prefetch``: DGL's ``NeighborSampler(..., prefetch_node_feats=["feat"],
  prefetch_labels=["label"])``: the loader pulls the rows, all ranks together.

Times are rank 0's per epoch (a barrier on each side), the first round left out; the table
gives the median and the spread (min..max). Compare modes within one run.

Usage::

    python scripts/bench_reads.py            # ~2 min on 2 cores
    python scripts/bench_reads.py --epochs 10 --out reads.json

Prints one JSON object and a markdown table.
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import dglx_dist
from dglx_dist.api.ndata import NodeDataView
from dglx_dist.data import CoraGraphDataset
from dglx_dist.models import SAGE
from dglx_dist.report import markdown_table
from dglx_dist.testing import run_workers

log = logging.getLogger("bench_reads")
MODES = ("loader ids", "alone", "collective", "prefetch")


def _epoch(g, loader, model, opt, mode: str) -> float:
    g.barrier()
    start = time.perf_counter()
    ids = (lambda t: t) if mode == "loader ids" else (lambda t: t.clone())
    for input_nodes, output_nodes, blocks in loader:
        if mode == "prefetch":
            x, y = blocks[0].srcdata["feat"], blocks[-1].dstdata["label"]
        else:
            x, y = g.ndata["feat"][ids(input_nodes)], g.ndata["label"][ids(output_nodes)]
        loss = F.cross_entropy(model(blocks, x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    g.barrier()
    return time.perf_counter() - start


def worker(session, cache: str, epochs: int) -> dict[str, list[float]]:
    dataset = CoraGraphDataset()
    g = dglx_dist.distribute(dataset[0], "distdgl", cache_dir=cache, session=session)
    every = torch.arange(g.num_nodes())
    plain = dglx_dist.DataLoader(g, every, dglx_dist.NeighborSampler([10, 10]), batch_size=64,
                                 shuffle=True)
    ahead = dglx_dist.DataLoader(g, every, dglx_dist.NeighborSampler(
        [10, 10], prefetch_node_feats=["feat"], prefetch_labels=["label"]), batch_size=64,
        shuffle=True)
    model = dglx_dist.parallelize(SAGE(g.ndata["feat"].shape[1], 16, dataset.num_classes, 2), g)
    opt = torch.optim.Adam(model.parameters())
    rows = NodeDataView.rows
    times: dict[str, list[float]] = {m: [] for m in MODES}
    for _ in range(epochs + 1):
        for mode in MODES:
            NodeDataView.rows = ((lambda self, ids, collective=False: rows(self, ids, True))
                                 if mode == "collective" else rows)
            times[mode].append(_epoch(g, ahead if mode == "prefetch" else plain, model, opt,
                                      mode))
    NodeDataView.rows = rows
    return {m: t[1:] for m, t in times.items()}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=5, help="timed epochs per mode")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stderr)
    cache = tempfile.mkdtemp(prefix="bench-reads-cache-")
    table = []
    for world in (2, 4):
        log.info("world %d ...", world)
        res = run_workers(worker, world, tempfile.mkdtemp(prefix="bench-reads-"), cache,
                          args.epochs, env={"DGLX_VIRTUAL_SERVERS": "2"}, timeout=1800)
        row = {"ranks": world}
        for mode, t in res[0].items():
            t = sorted(t)
            row[mode] = f"{statistics.median(t):.3f} s ({t[0]:.3f}..{t[-1]:.3f})"
        table.append(row)
    result = {"config": {"epochs": args.epochs}, "rows": table}
    print(json.dumps(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    print(markdown_table(table))
    return result


if __name__ == "__main__":
    main()
