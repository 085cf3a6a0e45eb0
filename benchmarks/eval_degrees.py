"""Study: how much of a GCN's accuracy is its evaluation's normalisation (issue 36, item 3).

Trains the bench's reference GCN in one process with plain DGL (``dglx bench``'s ``dgl``
row: the same model, seed, fanouts, Adam and global batch) and after every epoch scores the
same weights three ways on the validation nodes: on the whole graph (what single-process DGL
reports), and on blocks of full neighbourhoods for batches of ``--batches`` validation nodes,
where GraphConv divides a source's row by its out-degree within the block (DGL's blocks) or,
with the sources' out-degrees in the whole graph put back (``whole_degrees``, the Trainer's
evaluation under distdgl and p3), by the whole graph's. Prints one JSON object and a markdown
table::

    python -m benchmarks.eval_degrees --data DIR --batches 1000,4096
"""
from __future__ import annotations

import argparse
import json
import sys

import dgl
import torch
import torch.nn.functional as F

from dglx_dist.bench.dgl_distdgl_nodes import whole_degree_hooks
from dglx_dist.data import read_dataset, to_dgl
from dglx_dist.models import MODELS


def _scores(model, g, val, batch: int, whole: bool) -> float:
    """Validation accuracy on full-neighbour blocks of ``batch`` nodes (``whole``: sources
    rescaled to the whole graph's out-degrees, as ``dglx bench`` scores DGL's DistDGL)."""
    hooks = whole_degree_hooks(g, model, []) if whole else []
    loader = dgl.dataloading.DataLoader(g, val, dgl.dataloading.MultiLayerFullNeighborSampler(
        len(model.layers)), batch_size=batch)
    right = 0
    with torch.no_grad():
        for _, seeds, blocks in loader:
            pred = model(blocks, blocks[0].srcdata["feat"]).argmax(1)
            right += int((pred == g.ndata["label"][seeds]).sum())
    for hook in hooks:
        hook.remove()
    return right / val.numel()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=4000, help="training: the global batch")
    p.add_argument("--batches", default="1000,4096", help="evaluation batch sizes")
    args = p.parse_args(argv)
    ds = read_dataset(args.data)
    g = to_dgl(ds)
    torch.manual_seed(0)
    dgl.seed(0)
    model = MODELS["gcn"](ds.feat.shape[1], 64, ds.num_classes, 2, dropout=0.5)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    train, val = (torch.nonzero(g.ndata[f"{m}_mask"]).flatten() for m in ("train", "val"))
    loader = dgl.dataloading.DataLoader(g, train, dgl.dataloading.NeighborSampler([10, 25]),
                                        batch_size=args.batch_size, shuffle=True)
    rows = []
    for epoch in range(args.epochs):
        for _, seeds, blocks in loader:
            loss = F.cross_entropy(model(blocks, blocks[0].srcdata["feat"]),
                                   g.ndata["label"][seeds].long())
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            pred = model([g] * len(model.layers), g.ndata["feat"]).argmax(1)
        row = {"epoch": epoch, "whole graph": float((pred[val] == g.ndata["label"][val])
                                                    .float().mean())}
        for b in (int(x) for x in args.batches.split(",")):
            row[f"blocks of {b}"] = _scores(model, g, val, b, whole=False)
            row[f"blocks of {b}, whole_degrees"] = _scores(model, g, val, b, whole=True)
        model.train()
        rows.append(row)
    print(json.dumps({"rows": rows}))
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(f"{row[k]:.4f}" if isinstance(row[k], float) else str(row[k])
                                for k in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
