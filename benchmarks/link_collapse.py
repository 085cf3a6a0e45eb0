"""Does `dglx train --task link` collapse on raw bag-of-words features where DGL does not?
(issue 38, item 1). Per graph and seed: `dglx train --task link --strategy distdgl` under
torchrun with 1 rank (the same steps as one process) and with 2, and single-process DGL doing
the same math with dgl.nn and DGL's own samplers (GraphSAGE mean, `--hidden 16`, 2 layers,
dropout 0.5, Adam lr 0.01 / weight decay 5e-4, 1024 training edges a step, 1 uniform
negative, fanouts 10,25, reverse edges excluded: the task's defaults), on the same split and
evaluation negatives. Reports the last epoch's loss, test AUC and MRR, and for DGL the hidden
units still alive (some node's ReLU output > 0) after the last epoch, as JSON lines and a
markdown table.

    python -m benchmarks.link_collapse --epochs 20 --seeds 0 1 2
    python -m benchmarks.link_collapse --epochs 20 --seeds 0 1 2 --row-normalize

Graphs (built in --workdir): `cora-bin` (Cora's features as the raw 0/1 bag of words, not
row-normalized), `cora-3703` (that plus 2,270 noise words, about 32 words a row as CiteSeer's,
15 all-zero rows and 48 isolated nodes), `citeseer-syn` (a synthetic graph of CiteSeer's size,
3,327 nodes, 9,104 directed edges, 6 classes, 0/1 features of 3,703 words, 15 all-zero rows).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from dglx_dist.report import json_record, markdown_table

GRAPHS = ("cora-bin", "cora-3703", "citeseer-syn")


def build(name: str, out: Path) -> Path:
    """Writes graph ``name`` into ``out`` (once) and returns its directory."""
    from dglx_dist.data import builtin_path, read_dataset
    from dglx_dist.data.format import write_dataset
    from dglx_dist.data.synthetic import SyntheticConfig, write_synthetic

    path = out / name
    if path.exists():
        return path
    rng = np.random.default_rng(0)
    if name == "citeseer-syn":
        write_synthetic(SyntheticConfig(num_nodes=3327, num_edges=9104, num_classes=6,
                                        feat_dim=3703, homophily=0.74, seed=1), out / "raw")
        d = read_dataset(out / "raw")
        f = np.asarray(d.feat)  # each row's ~32 largest Gaussian features become its words
        top = np.argsort(-f, axis=1)
        feat = np.zeros_like(f)
        for i, k in enumerate(np.clip(rng.poisson(31.7, d.num_nodes), 1, None)):
            feat[i, top[i, :k]] = 1
    else:
        d = read_dataset(builtin_path("cora"))
        feat = (np.asarray(d.feat) > 0).astype(np.float32)
    if name != "cora-bin":
        feat[rng.choice(d.num_nodes, 15, replace=False)] = 0
    if name == "cora-3703":
        feat = np.concatenate([feat, rng.random((d.num_nodes, 2270)) < 14 / 2270], 1)
        iso = 48  # nodes without edges, with words but no labels in any split
        feat = np.concatenate([feat, rng.random((iso, 3703)) < 32 / 3703]).astype(np.float32)
        pad = {k: np.concatenate([getattr(d, k), np.zeros(iso, getattr(d, k).dtype)])
               for k in ("label", "train", "val", "test")}
        d = d.replace(**pad)
    write_dataset(d.replace(feat=feat.astype(np.float32)), path)
    return path


def ours(data: Path, ranks: int, epochs: int, seed: int, workdir: Path,
         row_normalize: bool) -> dict:
    metrics = workdir / f"metrics-{data.name}-{ranks}-{seed}.jsonl"
    metrics.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={ranks}", "-m", "dglx_dist", "train", "--task", "link",
           "--strategy", "distdgl", "--data", str(data), "--epochs", str(epochs), "--seed",
           str(seed), "--cache-dir", str(workdir / "cache"), "--metrics-file", str(metrics),
           *(["--row-normalize"] if row_normalize else [])]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"link_collapse: {' '.join(cmd)} exited {proc.returncode}:\n"
                         f"{proc.stderr[-2000:]}")
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    loss = [r["loss"] for r in records if "loss" in r][-1]
    test = records[-1]
    return {"loss": round(loss, 5), "auc": test["test_auc"], "mrr": test["test_mrr"]}


def dgl_reference(data: Path, epochs: int, seed: int, row_normalize: bool) -> dict:
    """Single-process DGL: the same split, model, optimizer, sampling and evaluation."""
    import dgl
    import dgl.nn as dglnn
    import torch

    from dglx_dist.api.metrics import ranking_from_scores
    from dglx_dist.data import read_dataset, to_dgl
    from dglx_dist.tasks.link import eval_negatives, heldout_scores, link_loss, split_pairs

    torch.manual_seed(seed)
    train, reverse, _, test = split_pairs(read_dataset(data), seed)
    train_g = to_dgl(train)
    x = train_g.ndata["feat"]
    if row_normalize:  # as --row-normalize: rows with a positive sum divided by it
        total = x.sum(1, keepdim=True)
        x = torch.where(total > 0, x / total.clamp(min=1e-12), x)
    layers = torch.nn.ModuleList([dglnn.SAGEConv(x.shape[1], 16, "mean"),
                                  dglnn.SAGEConv(16, 16, "mean")])
    drop = torch.nn.Dropout(0.5)
    opt = torch.optim.Adam(layers.parameters(), lr=0.01, weight_decay=5e-4)
    sampler = dgl.dataloading.as_edge_prediction_sampler(
        dgl.dataloading.NeighborSampler([10, 25]), exclude="reverse_id", reverse_eids=reverse,
        negative_sampler=dgl.dataloading.negative_sampler.Uniform(1))
    loader = dgl.dataloading.DataLoader(train_g, torch.arange(train_g.num_edges()), sampler,
                                        batch_size=1024, shuffle=True)
    for _ in range(epochs):
        layers.train()
        losses = []
        for inputs, pair, neg, blocks in loader:
            h = layers[1](blocks[1], drop(torch.relu(layers[0](blocks[0], x[inputs]))))
            loss = link_loss(pair, neg, h)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss))
    layers.eval()
    with torch.no_grad():
        hidden = torch.relu(layers[0](train_g, x))
        emb = layers[1](train_g, hidden)
    neg = eval_negatives(test[0].numel(), train.num_nodes, 100, seed + 2)
    pos, negative = heldout_scores(emb, test[0], test[1], neg)
    m = ranking_from_scores(pos.double(), negative.double())
    return {"loss": round(float(np.mean(losses)), 5), "auc": round(m["auc"], 4),
            "mrr": round(m["mrr"], 4), "alive_hidden": int((hidden > 0).any(0).sum())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", nargs="+", default=list(GRAPHS), choices=GRAPHS)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--workdir", type=Path, help="where graphs go (default: a temp dir)")
    ap.add_argument("--row-normalize", action="store_true",
                    help="every system divides each feature row by its sum first")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        rows = []
        for name in args.graphs:
            data = build(name, workdir)
            for seed in args.seeds:
                rn = args.row_normalize
                for system, run in (
                        ("dgl", lambda: dgl_reference(data, args.epochs, seed, rn)),
                        ("ours-1", lambda: ours(data, 1, args.epochs, seed, workdir, rn)),
                        ("ours-2", lambda: ours(data, 2, args.epochs, seed, workdir, rn))):
                    row = {"graph": name, "seed": seed, "system": system,
                           "row_normalize": rn, **run()}
                    print(json_record(row), flush=True)
                    rows.append(row)
    print()
    print(markdown_table(rows, ["graph", "seed", "system", "row_normalize", "loss", "auc",
                                "mrr", "alive_hidden"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
