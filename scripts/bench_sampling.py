"""Benchmark: what each DGL sampler costs per epoch through ``dglx_dist.DataLoader`` under
``distdgl``, beside single-process DGL drawing the same batches.

The graph of ``dglx bench``'s preset (``small``: 200k nodes, 2M edges, 2 servers x 2 ranks as
virtual servers on local gloo ranks; ``tiny`` for a quick look) with a random weight per edge
(``w``, uniform in [0, 1)). Every rank iterates a loader over its share of the training nodes
(batch 1000, fanouts 10, 25) and only samples: no features, no model. The samplers,
alternated epoch by epoch:

* ``uniform``: ``NeighborSampler([10, 25])``;
* ``prob``: ``NeighborSampler([10, 25], prob="w")``;
* ``labor``: ``LaborSampler([10, 25])`` (DGL's LABOR-0), through the graph's
  ``sample_labors``;
* ``custom``: a ``BlockSampler`` of the user's own over ``g.sample_neighbors`` (DGL's user
  guide's shape), run over the graph's ``sample_neighbors`` (:mod:`dglx_dist.api.structure`);
* ``out``: ``NeighborSampler([10, 25], edge_dir="out")`` (every out-edge of a layer's seeds
  gathered from every part, then drawn on the rank).

Per sampler: rank 0's seconds per epoch (a barrier on each side; median and min..max over
the epochs after the first), the bytes rank 0 sent per epoch (the sampler's exchanges:
requests, answers with sources and edge ids), and the mean source nodes per step of each
layer (input layer first). The ``DGL`` columns: the same sampler on the whole graph in one
process over rank 0's batches (uniform and weighted draws differ from the job's, their sizes
are comparable; LABOR's are the same draws when the seeds agree).

With ``--draws``, one process instead, no loader: each layer's draw of the package's own
sampler (:func:`~dglx_dist.sampling.in_edges.draw_in_edges`, torch) beside DGL's C++
``sample_neighbors`` on the same graph for the same nodes (batches of 1000 seeds, fanout 25
then 10 as the loader draws them, output layer first), and the block made of the drawn edges
(:class:`~dglx_dist.graphcore.block.Block`, handed to DGL) beside ``dgl.to_block``; the two
alternated call by call, per draw kind (uniform, ``prob``, ``replace``).

Usage::

    python scripts/bench_sampling.py --preset tiny          # ~1 min on 2 cores
    python scripts/bench_sampling.py --preset small --epochs 4 --out sampling.json
    python scripts/bench_sampling.py --preset small --draws  # ~1 min

Prints one JSON object and a markdown table.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import dgl
import torch

import dglx_dist
from dglx_dist.dgl.blocks import to_dgl_block
from dglx_dist.bench.presets import PRESETS
from dglx_dist.data import read_dataset, to_dgl
from dglx_dist.report import markdown_table
from dglx_dist.graphcore.block import Block
from dglx_dist.sampling.in_edges import InEdges, draw_in_edges
from dglx_dist.testing import run_workers

KINDS = ("uniform", "prob", "labor", "custom", "out")
FANOUTS = [10, 25]


class GuideSampler(dgl.dataloading.BlockSampler):
    """A user's own sampler, in the shape of DGL's user guide."""

    def __init__(self, fanouts):
        super().__init__()
        self.fanouts = fanouts

    def sample_blocks(self, g, seed_nodes, exclude_eids=None):
        output_nodes, blocks = seed_nodes, []
        for fanout in reversed(self.fanouts):
            frontier = g.sample_neighbors(seed_nodes, fanout)
            block = dgl.to_block(frontier, seed_nodes)
            block.edata[dgl.EID] = frontier.edata[dgl.EID]
            seed_nodes = block.srcdata[dgl.NID]
            blocks.insert(0, block)
        return seed_nodes, output_nodes, blocks


def sampler(kind: str):
    if kind == "custom":
        return GuideSampler(FANOUTS)
    if kind == "labor":
        return dgl.dataloading.LaborSampler(FANOUTS)
    if kind == "out":
        return dgl.dataloading.NeighborSampler(FANOUTS, edge_dir="out")
    return dgl.dataloading.NeighborSampler(FANOUTS, prob="w" if kind == "prob" else None)


def graph(preset: str, workdir: Path) -> dgl.DGLGraph:
    g = to_dgl(read_dataset(PRESETS[preset].dataset(0, workdir)))
    g.edata["w"] = torch.rand(g.num_edges(), generator=torch.Generator().manual_seed(1))
    return g


def _epoch(g, session, loader) -> tuple[float, int, list[int], list[torch.Tensor]]:
    g.barrier()
    before = session.counter.snapshot()
    start = time.perf_counter()
    sizes, batches = [0] * len(FANOUTS), []
    for _, output_nodes, blocks in loader:
        for i, b in enumerate(blocks):
            sizes[i] += b.num_src_nodes()
        batches.append(output_nodes)
    g.barrier()
    seconds = time.perf_counter() - start
    after = session.counter.snapshot()
    sent = sum(after[k] - before[k] for k in ("sent_inter", "sent_intra"))
    return seconds, sent, [s / max(len(batches), 1) for s in sizes], batches


def _worker(session, preset, workdir, epochs):
    g = dglx_dist.distribute(graph(preset, Path(workdir)), "distdgl",
                             cache_dir=str(Path(workdir) / "parts"), session=session)
    loaders = {k: dglx_dist.DataLoader(g, g.ndata["train_mask"], sampler(k),
                                       batch_size=1000, shuffle=True) for k in KINDS}
    out = {k: {"s": [], "bytes": [], "src": None} for k in KINDS}
    for epoch in range(epochs):
        for kind in KINDS:  # alternated epoch by epoch
            seconds, sent, src, batches = _epoch(g, session, loaders[kind])
            out[kind]["s"].append(seconds)
            out[kind]["bytes"].append(sent)
            out[kind]["src"] = src
            if epoch == 0 and kind == "uniform":
                out["batches"] = [b.tolist() for b in batches]
    g.close()
    return out


def _single(g, batches, epochs) -> dict:
    """Single-process DGL over rank 0's batches: seconds per epoch and sources per layer."""
    out = {}
    for kind in KINDS:
        seconds, src = [], [0] * len(FANOUTS)
        for _ in range(epochs):
            start = time.perf_counter()
            for seeds in batches:
                _, _, blocks = sampler(kind).sample_blocks(g, torch.tensor(seeds))
                for i, b in enumerate(blocks):
                    src[i] += b.num_src_nodes()
            seconds.append(time.perf_counter() - start)
        out[kind] = {"s": seconds, "src": [s / (epochs * len(batches)) for s in src]}
    return out


DRAW_KINDS = {"uniform": {}, "prob": {"prob": True}, "replace": {"replace": True}}


def _draw_layer(kind, g, edges, weights, nodes, fanout):
    """One layer's draw and block, ours or DGL's: (draw seconds, block seconds, sources)."""
    prob, replace = DRAW_KINDS[kind].get("prob"), DRAW_KINDS[kind].get("replace", False)
    start = time.perf_counter()
    if edges is None:
        frontier = dgl.sampling.sample_neighbors(g, nodes, fanout, prob="w" if prob else None,
                                                 replace=replace)
        drawn = time.perf_counter()
        block = dgl.to_block(frontier, nodes)
        return drawn - start, time.perf_counter() - drawn, block.srcdata[dgl.NID]
    row, pos = draw_in_edges(edges, nodes, fanout, replace, weights if prob else None)
    src, eid = edges.src.index_select(0, pos), edges.eid.index_select(0, pos)
    drawn = time.perf_counter()
    block = to_dgl_block(Block.untyped(nodes, src, nodes.index_select(0, row), eid,
                                       g.num_nodes()))
    return drawn - start, time.perf_counter() - drawn, block.srcdata[dgl.NID]


def draws(preset: str, repeats: int) -> None:
    """The ``--draws`` table: ours beside DGL's per layer, alternated call by call."""
    with tempfile.TemporaryDirectory() as tmp:
        g = graph(preset, Path(tmp))
    src, dst = g.edges()
    edges = InEdges.of(src, dst, g.num_nodes())
    train = torch.nonzero(g.ndata["train_mask"]).squeeze(1)
    batches = torch.split(train[torch.randperm(train.numel(),
                                               generator=torch.Generator().manual_seed(0))],
                          1000)[:10]
    times = {(k, who, layer, part): [] for k in DRAW_KINDS for who in ("ours", "DGL")
             for layer in (0, 1) for part in ("draw", "block")}
    for _ in range(repeats):
        for kind in DRAW_KINDS:
            for seeds in batches:
                for who in ("ours", "DGL"):  # alternated call by call
                    nodes = seeds
                    for layer, fanout in ((1, 25), (0, 10)):
                        d, b, nodes = _draw_layer(kind, g, edges if who == "ours" else None,
                                                  g.edata["w"], nodes, fanout)
                        times[kind, who, layer, "draw"].append(d)
                        times[kind, who, layer, "block"].append(b)
    rows, summary = [], {"preset": preset, "nodes": g.num_nodes(), "edges": g.num_edges(),
                         "batches": len(batches), "repeats": repeats}
    for kind in DRAW_KINDS:
        for layer in (1, 0):
            row = {"draw": kind, "layer (fanout)": f"{layer} ({25 if layer else 10})"}
            for who in ("ours", "DGL"):
                for part in ("draw", "block"):
                    ms = [t * 1e3 for t in times[kind, who, layer, part]]
                    summary[f"{kind}/{layer}/{who}/{part}_ms"] = {
                        "median": statistics.median(ms), "min": min(ms), "max": max(ms)}
                    row[f"{who} {part} ms"] = (f"{statistics.median(ms):.2f} "
                                               f"({min(ms):.2f}..{max(ms):.2f})")
            rows.append(row)
    print(json.dumps(summary))
    print(markdown_table(rows))


def _spread(values: list[float]) -> str:
    later = values[1:] or values
    return f"{statistics.median(later):.3f} ({min(later):.3f}..{max(later):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small", choices=["tiny", "small"])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--draws", action="store_true",
                        help="one process: each layer's draw and block, ours beside DGL's")
    args = parser.parse_args()
    if args.draws:
        return draws(args.preset, args.epochs)
    preset = PRESETS[args.preset]
    world = preset.servers * preset.ranks_per_server
    with tempfile.TemporaryDirectory() as tmp:
        preset.dataset(0, Path(tmp))  # generated once, before the ranks read it
        res = run_workers(_worker, world, Path(tmp) / "run", args.preset, tmp, args.epochs,
                          env={"DGLX_VIRTUAL_SERVERS": str(preset.servers)}, timeout=1800)
        single = _single(graph(args.preset, Path(tmp)), res[0]["batches"], args.epochs)
    rows, summary = [], {"preset": args.preset, "ranks": world, "servers": preset.servers,
                         "fanouts": FANOUTS, "batch_size": 1000, "epochs": args.epochs}
    for kind in KINDS:
        mine = res[0][kind]
        summary[kind] = {"s": mine["s"], "bytes": mine["bytes"], "src_per_layer": mine["src"],
                         "dgl_s": single[kind]["s"], "dgl_src_per_layer": single[kind]["src"]}
        rows.append({"sampler": kind, "distdgl s/epoch (rank 0)": _spread(mine["s"]),
                     "MiB sent (rank 0)": f"{statistics.median(mine['bytes']) / 2**20:.2f}",
                     "sources per step by layer": " / ".join(f"{s:.0f}" for s in mine["src"]),
                     "DGL s/epoch": _spread(single[kind]["s"]),
                     "DGL sources": " / ".join(f"{s:.0f}" for s in single[kind]["src"])})
    print(json.dumps(summary))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1))
    print(markdown_table(rows))


if __name__ == "__main__":
    sys.exit(main())
