"""Link prediction on one edge type of a typed graph: ``distdgl`` at 2 ranks against
single-process DGL doing the same training.

The graph (:func:`make_graph`) is generated from latent vectors, so its links are learnable:
authors, papers and fields each have a latent vector; an author writes the papers whose
vectors score high against its own (a Gumbel top-k over the dot products), papers cite
papers the same way, and each paper has the field closest to it; features are the latent
vectors through a random map plus noise (authors' noisier, so messages matter). Relations:
writes / rev-writes, cites, has_topic / rev-has_topic.

10% of the "writes" edges (and their "rev-writes" twins, the same per-type ids) are held out
of the training graph. Both runs train the same 2-layer HeteroGraphConv(SAGEConv) model from
the same initial weights, with a dot-product scorer on (author, writes, paper), binary
cross-entropy against DGL's ``negative_sampler.Uniform(K)``, ``exclude="reverse_types"``
(writes <-> rev-writes), ``NeighborSampler(FANOUTS)``, Adam, the same global batch (2 ranks x
``BATCH`` edges; single-process DGL: one batch of 2 x ``BATCH``) and epochs. Then each
held-out edge is ranked against ``NEGATIVES`` papers drawn once (the same for both runs) by
the embeddings of full-neighbourhood inference on the training graph: MRR (ties count half).
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import dgl
import numpy as np
import torch
import torch.nn.functional as F

NODES = {"author": 600, "field": 16, "paper": 1200}
LATENT, FEAT, HIDDEN = 8, 16, 32
NOISE = {"author": 2.0, "field": 0.5, "paper": 1.0}
WRITES = ("author", "writes", "paper")
REVERSE = {"writes": "rev-writes", "rev-writes": "writes"}
FANOUTS, BATCH, K, LR, NEGATIVES = [10, 10], 64, 3, 0.01, 100


def _top_k(rng, src_z, dst_z, per: int, beta: float = 2.0, no_loops: bool = False):
    """Each source's ``per`` destinations, drawn without replacement with probability
    following softmax(beta * <z_src, z_dst>) (the Gumbel top-k trick)."""
    logits = beta * src_z @ dst_z.T + rng.gumbel(size=(src_z.shape[0], dst_z.shape[0]))
    if no_loops:
        np.fill_diagonal(logits, -np.inf)
    dst = np.argsort(-logits, axis=1)[:, :per]
    return np.repeat(np.arange(src_z.shape[0]), per), dst.reshape(-1)


def make_graph(seed: int = 0) -> dgl.DGLGraph:
    """The typed graph described in the module docstring."""
    rng = np.random.default_rng(seed)
    z = {t: rng.normal(size=(n, LATENT)) for t, n in NODES.items()}
    writes = _top_k(rng, z["author"], z["paper"], 6)
    cites = _top_k(rng, z["paper"], z["paper"], 4, no_loops=True)
    topic = (np.arange(NODES["paper"]), np.argmax(z["paper"] @ z["field"].T, axis=1))
    g = dgl.heterograph({
        WRITES: writes, ("paper", "rev-writes", "author"): writes[::-1],
        ("paper", "cites", "paper"): cites, ("paper", "has_topic", "field"): topic,
        ("field", "rev-has_topic", "paper"): topic[::-1]}, num_nodes_dict=NODES)
    for t, n in NODES.items():
        feat = z[t] @ rng.normal(size=(LATENT, FEAT)) + NOISE[t] * rng.normal(size=(n, FEAT))
        g.nodes[t].data["feat"] = torch.from_numpy(feat.astype("float32"))
    return g


def split(g: dgl.DGLGraph, seed: int = 0) -> tuple[dgl.DGLGraph, torch.Tensor, torch.Tensor]:
    """The training graph (10% of writes edges and their rev-writes twins removed), the
    held-out (author, paper) pairs, and NEGATIVES papers per held-out pair."""
    rng = np.random.default_rng(seed + 1)
    n = g.num_edges("writes")
    test = torch.from_numpy(np.sort(rng.choice(n, n // 10, replace=False)))
    src, dst = g.find_edges(test, etype="writes")
    train = dgl.remove_edges(g, test, etype="writes")
    train = dgl.remove_edges(train, test, etype="rev-writes")
    for et in train.canonical_etypes:  # remove_edges leaves the removed ids' records
        train.edges[et].data.pop(dgl.EID, None)
    negatives = torch.from_numpy(rng.integers(0, NODES["paper"], (test.numel(), NEGATIVES)))
    return train, torch.stack([src, dst], 1), negatives


class HeteroSAGE(torch.nn.Module):
    """Two HeteroGraphConv layers of SAGEConv per relation over projected features."""

    def __init__(self, rels, seed: int):
        import dgl.nn as dglnn

        super().__init__()
        torch.manual_seed(seed)
        self.proj = torch.nn.ModuleDict({t: torch.nn.Linear(FEAT, HIDDEN) for t in NODES})
        self.convs = torch.nn.ModuleList([
            dglnn.HeteroGraphConv({r: dglnn.SAGEConv(HIDDEN, HIDDEN, "mean") for r in rels},
                                  aggregate="sum") for _ in range(2)])

    def forward(self, blocks, x):
        h = {t: self.proj[t](v) for t, v in x.items()}
        h = {t: F.relu(v) for t, v in self.convs[0](blocks[0], h).items()}
        return self.convs[1](blocks[1], h)


def pair_loss(h, pair, neg) -> torch.Tensor:
    """Binary cross-entropy of the dot-product scores of the writes pairs."""
    scores = []
    for graph in (pair, neg):
        u, v = graph.edges(etype=WRITES)
        scores.append((h["author"][u] * h["paper"][v]).sum(1))
    labels = torch.cat([torch.ones_like(scores[0]), torch.zeros_like(scores[1])])
    return F.binary_cross_entropy_with_logits(torch.cat(scores), labels)


def mrr(author: torch.Tensor, paper: torch.Tensor, test: torch.Tensor,
        negatives: torch.Tensor) -> float:
    """Mean reciprocal rank of each held-out pair among its negatives (ties count half)."""
    a = author[test[:, 0]]
    pos = (a * paper[test[:, 1]]).sum(1, keepdim=True)
    neg = torch.einsum("nd,nkd->nk", a, paper[negatives])
    rank = 1 + (neg > pos).sum(1) + 0.5 * (neg == pos).sum(1)
    return float((1.0 / rank).mean())


def _seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)
    dgl.seed(seed)


def train_dgl(seed: int, epochs: int) -> dict:
    """Single-process DGL: the training, then full-graph inference; MRR before and after."""
    train, test, negatives = split(make_graph())
    model = HeteroSAGE(train.etypes, seed)
    x = {t: train.nodes[t].data["feat"] for t in train.ntypes}

    def score() -> float:
        with torch.no_grad():
            h = model([train, train], x)
        return mrr(h["author"], h["paper"], test, negatives)

    before = score()
    _seed_all(seed)
    sampler = dgl.dataloading.as_edge_prediction_sampler(
        dgl.dataloading.NeighborSampler(FANOUTS), exclude="reverse_types",
        reverse_etypes=REVERSE, negative_sampler=dgl.dataloading.negative_sampler.Uniform(K))
    loader = dgl.dataloading.DataLoader(train, {"writes": torch.arange(train.num_edges(
        "writes"))}, sampler, batch_size=2 * BATCH, shuffle=True)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    for _ in range(epochs):
        for input_nodes, pair, neg, blocks in loader:
            loss = pair_loss(model(blocks, {t: x[t][ids] for t, ids in input_nodes.items()}),
                             pair, neg)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return {"before": before, "mrr": score()}


def _dist_embeddings(g, model) -> dict:
    """This rank's share of the author and paper embeddings (full neighbourhoods)."""
    import dglx_dist

    loader = dglx_dist.DataLoader(
        g, {t: torch.arange(g.num_nodes(t)) for t in ("author", "paper")},
        dglx_dist.MultiLayerFullNeighborSampler(2), batch_size=1024)
    out = {"author": ([], []), "paper": ([], [])}
    with torch.no_grad():
        for input_nodes, output_nodes, blocks in loader:
            x = {t: g.nodes[t].data["feat"][ids] for t, ids in input_nodes.items()}
            h = model.module(blocks, x)
            for t, (ids, rows) in out.items():
                ids += output_nodes[t].tolist()
                rows += h[t].tolist()
    return out


def dist_worker(session, cache: str, seeds: list[int], epochs: int,
                strategy: str = "distdgl") -> list[dict]:
    """One rank of the distributed runs (one per seed, over one DistGraph)."""
    import dglx_dist

    train, _, _ = split(make_graph())
    g = dglx_dist.distribute(train, strategy, cache_dir=cache, session=session)
    out = []
    for seed in seeds:
        _seed_all(seed)
        sampler = dglx_dist.as_edge_prediction_sampler(
            dglx_dist.NeighborSampler(FANOUTS), exclude="reverse_types",
            reverse_etypes=REVERSE, negative_sampler=dglx_dist.negative_sampler.Uniform(K))
        loader = dglx_dist.DataLoader(g, {"writes": torch.arange(g.num_edges("writes"))},
                                      sampler, batch_size=BATCH, shuffle=True, ddp_seed=seed)
        model = dglx_dist.parallelize(HeteroSAGE(g.etypes, seed), g)
        opt = torch.optim.Adam(model.parameters(), lr=LR)
        start = time.perf_counter()
        for _ in range(epochs):
            for input_nodes, pair, neg, blocks in loader:
                x = {t: g.nodes[t].data["feat"][ids] for t, ids in input_nodes.items()}
                loss = pair_loss(model(blocks, x), pair, neg)
                opt.zero_grad()
                loss.backward()
                opt.step()
        out.append({"seed": seed, "train_s": time.perf_counter() - start,
                    "steps": len(loader) * epochs, "emb": _dist_embeddings(g, model)})
    return out


def dist_mrr(results: dict[int, list[dict]]) -> list[float]:
    """Each seed's MRR from every rank's share of the embeddings."""
    _, test, negatives = split(make_graph())
    scores = []
    for i in range(len(results[0])):
        table = {}
        for t in ("author", "paper"):
            rows = torch.zeros(NODES[t], HIDDEN)
            for rank in results.values():
                ids, values = rank[i]["emb"][t]
                rows[torch.tensor(ids, dtype=torch.long)] = torch.tensor(values)
            table[t] = rows
        scores.append(mrr(table["author"], table["paper"], test, negatives))
    return scores


def compare(seeds: list[int], epochs: int, workdir: Path, strategy: str = "distdgl") -> dict:
    """Both runs at every seed: MRRs, medians and the gap (points)."""
    from dglx_dist.testing import run_workers

    start = time.perf_counter()
    res = run_workers(dist_worker, 2, workdir / "run", str(workdir / "cache"), seeds, epochs,
                      strategy, env={"DGLX_VIRTUAL_SERVERS": "2"}, timeout=900)
    dist_s = time.perf_counter() - start
    start = time.perf_counter()
    ref = [train_dgl(seed, epochs) for seed in seeds]
    ref_s = time.perf_counter() - start
    ours = dist_mrr(res)
    med_ref, med_ours = statistics.median(r["mrr"] for r in ref), statistics.median(ours)
    return {"seeds": seeds, "epochs": epochs, "dgl_mrr": [r["mrr"] for r in ref],
            "untrained_mrr": [r["before"] for r in ref], "strategy": strategy,
            "dist_mrr": ours, "dgl_median": med_ref, "dist_median": med_ours,
            "gap_points": 100 * (med_ours - med_ref), "dist_wall_s": dist_s,
            "dgl_wall_s": ref_s, "steps_per_rank": res[0][0]["steps"]}


def table(result: dict) -> str:
    """The markdown table of a :func:`compare` result."""
    seeds = " / ".join(str(s) for s in result["seeds"])
    fmt = lambda xs: " / ".join(f"{x:.3f}" for x in xs)  # noqa: E731
    return "\n".join([
        f"| run | held-out MRR, seeds {seeds} | median |",
        "|---|---|---|",
        f"| untrained model | {fmt(result['untrained_mrr'])} | "
        f"{statistics.median(result['untrained_mrr']):.3f} |",
        f"| single-process DGL | {fmt(result['dgl_mrr'])} | {result['dgl_median']:.3f} |",
        f"| `{result['strategy']}`, 2 ranks | {fmt(result['dist_mrr'])} | "
        f"{result['dist_median']:.3f} |",
        "", f"gap of the medians: {result['gap_points']:+.1f} points "
        f"({result['epochs']} epochs, {result['steps_per_rank']} steps per rank)"])


def main(argv: list[str] | None, description: str) -> int:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--seeds", default="0,1,2", help="training seeds, comma-separated")
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--workdir", default="bench-hetero-link", help="partitions and job files")
    p.add_argument("--out", type=Path, help="also write the JSON here")
    p.add_argument("--strategy", default="distdgl", help="the strategy of the distributed runs")
    args = p.parse_args(argv)
    from benchmarks.sweeps.common import emit_json, emit_text

    result = compare([int(s) for s in args.seeds.split(",")], args.epochs,
                     Path(args.workdir).resolve(), args.strategy)
    emit_json(result, args.out)
    emit_text(table(result))
    return 0
