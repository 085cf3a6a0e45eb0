"""Benchmark: a conv's linear map before the sum over the edges or after it, on this CPU.

``dglx_dist.nn.SAGEConv`` ("mean" and "gcn": ``fc_neigh``) and ``GraphConv`` (its weight) map
the sources' rows before their sum, or the sums after it (the same rows in exact arithmetic).
DGL maps first wherever the map narrows the rows. :func:`dglx_dist.nn.graphconv.map_first`
picks the order that does less work on a CPU, by
:data:`~dglx_dist.nn.graphconv.MESSAGE_COST`. This script times SAGEConv's mean term in
both orders, forward and backward, on random blocks (destination ``i`` takes ``fanout``
sources drawn uniformly), the input rows with and without a gradient (a first layer's
features have none), one thread, and prints which order the rule picks and how much slower
the pick is than the faster order (1.00: it picked the faster).

Usage::

    python benchmarks/map_order.py                  # the default grid, about a minute
    python benchmarks/map_order.py --shapes 98000:26000:10 --widths 128:32 --reps 12

Prints one JSON object and a markdown table.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from dglx_dist.graphcore.block import Block
from dglx_dist.nn.graphconv import MESSAGE_COST, map_first
from dglx_dist.nn.sageconv import averaged
from dglx_dist.report import markdown_table

SHAPES = "98000:26000:10,26000:1000:25,100000:90000:12,50000:20000:5"
"""Blocks as sources:destinations:fanout: the 1M-node benchmark's first and second layers
(fanouts 10,25, batch 1000), a near-full layer, a thinner one."""
WIDTHS = "128:32,602:16,100:47,256:128"
"""(in, out) widths of the map: g1m's first layer, Reddit's and ogbn-products' features."""


def random_block(num_src: int, num_dst: int, fanout: int, seed: int = 0) -> Block:
    """Destination ``i`` with ``fanout`` in-edges from sources drawn uniformly below
    ``num_src``."""
    gen = torch.Generator().manual_seed(seed)
    dst = torch.arange(num_dst).repeat_interleave(fanout)
    src = torch.randint(0, num_src, (dst.numel(),), generator=gen)
    return Block.untyped(torch.arange(num_dst), src, dst, torch.arange(dst.numel()),
                         num_nodes=num_src)


def timed(block: Block, widths: tuple[int, int], first: bool, grad: bool, reps: int) -> float:
    """Median milliseconds of the mean aggregator's neighbourhood term, forward and
    backward, in the given order (the first two repetitions warm up)."""
    fc = torch.nn.Linear(*widths, bias=False)
    x = torch.randn(block.num_src_nodes(), widths[0], requires_grad=grad)
    took = []
    for _ in range(reps):
        t0 = time.perf_counter()
        averaged(block, x, fc, first, "mean", None).sum().backward()
        took.append(time.perf_counter() - t0)
    return statistics.median(took[2:]) * 1e3


def measure(shape: tuple[int, int, int], widths: tuple[int, int], grad: bool,
            reps: int) -> dict:
    block = random_block(*shape)  # (its sources: the destinations and those drawn)
    first, after = (timed(block, widths, order, grad, reps) for order in (True, False))
    pick = map_first(block, torch.empty(block.num_src_nodes(), widths[0]), widths[1])
    return {"sources": block.num_src_nodes(), "destinations": shape[1],
            "edges": block.num_edges(), "in": widths[0], "out": widths[1], "grad": grad,
            "first_ms": round(first, 2), "after_ms": round(after, 2),
            "rule": "first" if pick else "after",
            "pick_vs_best": round((first if pick else after) / min(first, after), 2)}


def _pairs(text: str) -> list[tuple[int, ...]]:
    return [tuple(int(x) for x in item.split(":")) for item in text.split(",") if item]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default=SHAPES, help="sources:destinations:fanout,...")
    p.add_argument("--widths", default=WIDTHS, help="in:out,...")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [measure(shape, widths, grad, args.reps) for shape in _pairs(args.shapes)
            for widths in _pairs(args.widths) for grad in (False, True)]
    picks = [r["pick_vs_best"] for r in rows]
    print(json.dumps({"message_cost": MESSAGE_COST, "threads": args.threads, "rows": rows,
                      "pick_vs_best_mean": round(statistics.mean(picks), 3),
                      "pick_vs_best_worst": max(picks)}))
    print(markdown_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
