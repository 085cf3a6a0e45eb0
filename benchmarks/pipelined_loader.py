"""The epoch of distdgl's loop in turn (``use_prefetch_thread=False``), its look-ahead on
the calling thread (a CPU job's default) and the pipelined loader (a worker thread
``prefetch_factor`` steps deep; issue 79, item 1), alternating, on a synthetic graph. Under torchrun, from the repository root, 2 ranks as 2 virtual servers::

    DGLX_VIRTUAL_SERVERS=2 OMP_NUM_THREADS=1 torchrun --nproc-per-node 2 \\
        -m benchmarks.pipelined_loader --runs 3

Each rank trains GraphSAGE (hidden 32) with the sampler's prefetched features and labels;
every run times one epoch per mode (after one warm-up epoch of each), barrier to barrier.
Rank 0 prints one JSON object per mode (the epochs, their median and range) and a markdown
table.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

__all__ = ["main"]

MODES = {"in turn": {"use_prefetch_thread": False},
         "one ahead (the CPU's default)": {},
         "pipelined, depth 2": {"use_prefetch_thread": True},
         "pipelined, depth 4": {"use_prefetch_thread": True, "prefetch_factor": 4}}


def _epoch(g, loader, model, opt) -> float:
    import torch.nn.functional as F

    g.barrier()
    t0 = time.perf_counter()
    for _, _, blocks in loader:
        loss = F.cross_entropy(model(blocks, blocks[0].srcdata["feat"]),
                               blocks[-1].dstdata["label"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    g.barrier()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=50_000)
    p.add_argument("--edges", type=int, default=1_000_000)
    p.add_argument("--feat-dim", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=500)
    p.add_argument("--fanouts", default="10,25")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--cache", default="/tmp/dglx-bench-pipelined")
    args = p.parse_args(argv)

    import torch

    import dglx_dist
    from dglx_dist.data.convert import user_graph
    from dglx_dist.data.synthetic import SyntheticConfig, generate_synthetic
    from dglx_dist.models import SAGE
    from dglx_dist.report import markdown_table

    config = SyntheticConfig(num_nodes=args.nodes, num_edges=args.edges,
                             feat_dim=args.feat_dim, train_frac=0.2)
    g = dglx_dist.distribute(user_graph(generate_synthetic(config)), "distdgl",
                             cache_dir=args.cache)
    ids = dglx_dist.node_split(g.ndata["train_mask"], g)
    sampler = dglx_dist.NeighborSampler([int(f) for f in args.fanouts.split(",")],
                                        prefetch_node_feats=["feat"], prefetch_labels=["label"])
    loaders = {mode: dglx_dist.DataLoader(g, ids, sampler, batch_size=args.batch_size,
                                          shuffle=True, **options)
               for mode, options in MODES.items()}
    torch.manual_seed(0)
    model = dglx_dist.parallelize(SAGE(args.feat_dim, 32, config.num_classes, 2), g)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for run in range(args.runs + 1):  # run 0 warms up
        for mode, loader in loaders.items():
            seconds = _epoch(g, loader, model, opt)
            if run:
                times[mode].append(seconds)
    rows = [{"mode": mode, "steps": len(loaders[mode]),
             "epoch s (median)": round(statistics.median(t), 3),
             "range": f"{min(t):.3f}-{max(t):.3f}",
             "vs in turn": round(statistics.median(t) / statistics.median(times["in turn"]), 2)}
            for mode, t in times.items()]
    if g.session.is_main:
        for row, mode in zip(rows, MODES):
            print(json.dumps({**row, "epochs": times[mode]}))
        print(markdown_table(rows))
    g.close()


if __name__ == "__main__":
    main()
