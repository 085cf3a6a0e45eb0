"""Benchmark: the time the package's own neighbour sampling takes per batch on one part of a
partitioned graph, optionally beside DGL's ``dgl.sampling.sample_neighbors`` + ``dgl.to_block``
on the same edges.

One part is loaded (its structure only, no features): its in-edges are every in-edge of its
core nodes, in global ids, as its member holds them in a distdgl run. The package's arm is
:class:`~dglx_dist.sampling.LocalSampler` over those edges drawing a GNN's blocks
(``draw_blocks``: uniform without replacement, fanouts input layer first, as DGL's
``NeighborSampler``) for batches of the part's training nodes, shuffled; a frontier node of
another part has no in-edge here and draws nothing, as a member draws for its own nodes only.
The ``dgl`` arm draws the same batches layer by layer with ``sample_neighbors`` and numbers
each layer with ``to_block`` (what DGL's ``NeighborSampler`` does), on a DGLGraph of the same
edges. The arms alternate batch by batch (``--batches`` in all, the first ``--warmup`` of
each arm left out), on ``--threads`` threads (1, as ``dglx bench`` runs each rank). Per arm:
the median time per batch, its 10th-90th percentile and its range, as thread CPU time (less
sensitive to other jobs on the machine) and wall time.

With ``--device cuda`` the package's arm draws with the sampler's copy on the GPU
(``LocalSampler.to``, a loader's ``use_uva=True``), each batch timed to its last kernel
(``torch.cuda.synchronize``); the seeds start on the host, as a loader's do. With
``--profile N``, N more batches of the package's arm under ``torch.profiler`` (the ops of most
self time on the host, and the device's copies and synchronisations by count) and under
cProfile (the functions of most cumulative time), printed to stderr.

Usage::

    python -m benchmarks.sampling_speed --partitions PARTDIR --batches 100
    python -m benchmarks.sampling_speed --partitions PARTDIR --fanouts 10,25 --dgl
    python -m benchmarks.sampling_speed --partitions PARTDIR --device cuda --profile 10

Prints one JSON object and a markdown table.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Callable


def _fanouts(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[round(q * (len(ordered) - 1))]


def _summary(cpu: list[float], wall: list[float]) -> dict:
    """Per-batch times (s) as milliseconds: medians, 10th-90th percentiles and ranges."""
    row = {"batches": len(cpu)}
    for name, values in (("cpu", cpu), ("wall", wall)):
        ms = [v * 1e3 for v in values]
        row.update({f"{name}_median_ms": round(statistics.median(ms), 2),
                    f"{name}_p10_ms": round(_quantile(ms, 0.1), 2),
                    f"{name}_p90_ms": round(_quantile(ms, 0.9), 2),
                    f"{name}_min_ms": round(min(ms), 2), f"{name}_max_ms": round(max(ms), 2)})
    return row


def _load(path: str, part: int):
    """The part's edges in global ids, its training nodes and the graph's node count."""
    import torch

    from dglx_dist.partition.load import PartitionDir
    from dglx_dist.sampling.local import WholeGraph

    pdir = PartitionDir(path)
    p = pdir.load_part(part, features=False)
    gid = torch.from_numpy(p.local_gid).long()
    graph = WholeGraph(gid.index_select(0, torch.from_numpy(p.src).long()),
                       gid.index_select(0, torch.from_numpy(p.dst).long()),
                       torch.from_numpy(p.eid).long(), pdir.num_nodes)
    return graph, torch.from_numpy(p.core_gid[p.train]).long()


def _dgl_arm(graph, fanouts: tuple[int, ...]) -> Callable:
    """DGL's draw of a batch's blocks: ``sample_neighbors`` then ``to_block``, per layer."""
    import dgl

    g = dgl.graph((graph.src, graph.dst), num_nodes=graph.num_nodes)
    g.create_formats_()

    def draw(seeds):
        nodes, blocks = seeds, []
        for fanout in reversed(fanouts):
            frontier = dgl.sampling.sample_neighbors(g, nodes, fanout)
            block = dgl.to_block(frontier, nodes)
            nodes = block.srcdata[dgl.NID]
            blocks.insert(0, block)
        return blocks

    return draw


def _run(arms: dict[str, Callable], batches: list, warmup: int,
         done: Callable[[], None] = lambda: None) -> dict[str, dict]:
    """Each arm's times per batch, the arms alternating batch by batch (the order swapped
    every batch); ``done`` waits for a batch's device work."""
    cpu: dict[str, list[float]] = {name: [] for name in arms}
    wall: dict[str, list[float]] = {name: [] for name in arms}
    names = list(arms)
    for i, seeds in enumerate(batches):
        for name in names if i % 2 == 0 else names[::-1]:
            c, w = time.thread_time(), time.perf_counter()
            arms[name](seeds)
            done()
            cpu[name].append(time.thread_time() - c)
            wall[name].append(time.perf_counter() - w)
    return {name: _summary(cpu[name][warmup:], wall[name][warmup:]) for name in names}


def _profile(draw: Callable, batches: list, done: Callable[[], None]) -> None:
    """``draw`` over ``batches`` under torch's profiler and under cProfile; tables to
    stderr."""
    import cProfile
    import sys

    import torch
    import torch.profiler as tp

    kinds = [tp.ProfilerActivity.CPU] + ([tp.ProfilerActivity.CUDA]
                                         if torch.cuda.is_available() else [])
    with tp.profile(activities=kinds) as prof:
        for seeds in batches:
            draw(seeds)
        done()
    events = prof.key_averages()
    print(events.table(sort_by="self_cpu_time_total", row_limit=30), file=sys.stderr)
    syncs = {e.key: e.count for e in events
             if any(k in e.key for k in ("Synchronize", "Memcpy", "item", "nonzero"))}
    print(json.dumps({"per_batch_counts": {k: round(v / len(batches), 1)
                                           for k, v in sorted(syncs.items())}}), file=sys.stderr)
    prof_c = cProfile.Profile()
    prof_c.enable()
    for seeds in batches:
        draw(seeds)
    done()
    prof_c.disable()
    from benchmarks.ours_profile import _cprofile_top

    print(json.dumps({"cprofile_top": _cprofile_top(prof_c, by="cumtime")}, indent=1),
          file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--partitions", required=True, help="a partition directory (dglx partition)")
    p.add_argument("--part", type=int, default=0, help="the part to load (default 0)")
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--fanouts", type=_fanouts, default=(10, 25),
                   help="per layer, input layer first (default 10,25)")
    p.add_argument("--batches", type=int, default=60, help="batches per arm (default 60)")
    p.add_argument("--warmup", type=int, default=3, help="first batches left out (default 3)")
    p.add_argument("--threads", type=int, default=1, help="threads (default 1)")
    p.add_argument("--seed", type=int, default=0, help="the shuffle's and the draws' seed")
    p.add_argument("--dgl", action="store_true",
                   help="also DGL's sample_neighbors + to_block on the same edges")
    p.add_argument("--device", default="cpu", help="where the package's arm draws (cuda: "
                   "the sampler's copy on the GPU, as use_uva=True)")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="then N batches of the package's arm profiled (stderr)")
    args = p.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # DGL's OpenMP reads it at import
    import torch

    from dglx_dist.sampling.local import LocalSampler

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    started = time.perf_counter()
    graph, train = _load(args.partitions, args.part)
    order = train[torch.randperm(train.numel(), generator=torch.Generator().manual_seed(args.seed))]
    count = max(order.numel() // args.batch_size, 1)  # batches of an epoch, taken in turn
    batches = [order[(i % count) * args.batch_size:(i % count + 1) * args.batch_size]
               for i in range(args.batches + args.warmup)]
    sampler = LocalSampler(graph).to(args.device)
    gpu = sampler.device.type == "cuda"
    done = torch.cuda.synchronize if gpu else (lambda: None)
    arms = {"dglx": lambda seeds: sampler.draw_blocks(seeds, args.fanouts)}
    if args.dgl:
        arms["dgl"] = _dgl_arm(graph, args.fanouts)
    del graph
    loaded = time.perf_counter() - started
    edges = sum(b.num_edges() for b in sampler.draw_blocks(batches[0], args.fanouts))
    result = _run(arms, batches, args.warmup, done)
    if args.profile:
        _profile(arms["dglx"], batches[:args.profile], done)
    rows = [{"arm": name, **row} for name, row in result.items()]
    print(json.dumps({"partitions": args.partitions, "part": args.part,
                      "device": str(sampler.device),
                      "edges_in_part": int(sampler.edges.src.numel()),
                      "train_nodes": int(train.numel()), "batch_size": args.batch_size,
                      "fanouts": list(args.fanouts), "threads": args.threads,
                      "edges_per_batch": edges, "load_s": round(loaded, 1), "arms": rows}))
    from dglx_dist.report import markdown_table

    print(markdown_table([{"arm": r["arm"], "batches": r["batches"],
                           "cpu ms/batch (median)": r["cpu_median_ms"],
                           "cpu p10-p90": f"{r['cpu_p10_ms']}-{r['cpu_p90_ms']}",
                           "wall ms/batch (median)": r["wall_median_ms"],
                           "wall range": f"{r['wall_min_ms']}-{r['wall_max_ms']}"}
                          for r in rows]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
