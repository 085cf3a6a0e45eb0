"""Link prediction on Cora with GraphSAGE and a dot-product scorer, trained by dglx_dist
(--strategy distdgl or p3).

dgl/link_prediction.py is the plain DGL script this one was ported from; the lines that
differ are the port (tests/unit/test_example_diffs.py counts them). Every rank evaluates all
held-out edges from the shared embeddings, as the plain script does (dglx_dist.ranking_metrics
computes the same metrics over edges spread across ranks). Launch with torchrun:

    torchrun --nproc-per-node 2 examples/link_prediction.py --strategy p3
"""
import argparse
import json

import dgl
import dgl.nn as dglnn
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import dglx_dist
from dglx_dist import DataLoader, MultiLayerFullNeighborSampler, NeighborSampler
from dgl.dataloading import as_edge_prediction_sampler, negative_sampler

from dglx_dist.data import CoraGraphDataset  # DGL's Cora, shipped: no download


class SAGE(nn.Module):
    def __init__(self, in_size, hid_size):
        super().__init__()
        self.layers = nn.ModuleList([dglnn.SAGEConv(in_size, hid_size, "mean"),
                                     dglnn.SAGEConv(hid_size, hid_size, "mean")])

    def forward(self, blocks, x):
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i != len(self.layers) - 1:
                h = F.relu(h)
        return h


def dot_scores(pair_graph, h):
    with pair_graph.local_scope():
        pair_graph.ndata["h"] = h
        pair_graph.apply_edges(dgl.function.u_dot_v("h", "h", "score"))
        return pair_graph.edata["score"].squeeze(1)


def split_edges(g, seed):
    """Cora's undirected edges (u < v) shuffled and cut 85/5/10; the training graph holds
    both directions of each training edge, edge e's reverse being e + E (mod 2E)."""
    src, dst = g.edges()
    keep = src < dst
    u, v = src[keep], dst[keep]
    perm = torch.randperm(u.numel(), generator=torch.Generator().manual_seed(seed))
    n_val, n_test = int(0.05 * u.numel()), int(0.10 * u.numel())
    val, test, train = perm[:n_val], perm[n_val:n_val + n_test], perm[n_val + n_test:]
    tu, tv = u[train], v[train]
    train_g = dgl.graph((torch.cat([tu, tv]), torch.cat([tv, tu])), num_nodes=g.num_nodes())
    train_g.ndata["feat"] = g.ndata["feat"]
    e = tu.numel()
    reverse_eids = torch.cat([torch.arange(e) + e, torch.arange(e)])
    return train_g, reverse_eids, (u[val], v[val]), (u[test], v[test])


@torch.no_grad()
def layerwise_inference(model, g, batch_size):
    """Every node's embedding, one layer at a time over full neighbourhoods."""
    model.eval()
    net = getattr(model, "module", model)
    loader = DataLoader(g, torch.arange(g.num_nodes()), MultiLayerFullNeighborSampler(1),
                        batch_size=batch_size)
    feat = g.ndata["feat"]
    for i, layer in enumerate(net.layers):
        out = dglx_dist.DistTensor((g.num_nodes(), layer._out_feats), torch.float32)
        for input_nodes, output_nodes, blocks in loader:
            h = layer(blocks[0], feat[input_nodes])
            out[output_nodes] = F.relu(h) if i != len(net.layers) - 1 else h
        feat = out
    model.train()
    return feat


def ranking_metrics(pos, neg):
    """MRR and Hits@10 of each positive among its own negatives (ties count half), and AUC."""
    rank = 1 + (neg > pos[:, None]).sum(1) + (neg == pos[:, None]).sum(1) / 2
    wins = (pos[:, None, None] > neg[None]).float() + (pos[:, None, None] == neg[None]) / 2
    return {"mrr": (1 / rank).mean().item(), "hits@10": (rank <= 10).float().mean().item(),
            "auc": wins.mean().item()}


def evaluate(h, pairs, num_nodes, seed, k=100):
    u, v = pairs
    neg_v = torch.randint(0, num_nodes, (u.numel(), k),
                          generator=torch.Generator().manual_seed(seed))
    pos = (h[u] * h[v]).sum(1)
    neg = (h[u].unsqueeze(1) * h[neg_v.reshape(-1)].reshape(u.numel(), k, -1)).sum(2)
    return ranking_metrics(pos, neg)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--strategy", default="distdgl")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    dgl.seed(args.seed)
    np.random.seed(args.seed)  # DGL's DataLoader shuffles with numpy's generator
    dataset = CoraGraphDataset()
    train_g, reverse_eids, val_pairs, test_pairs = split_edges(dataset[0], args.seed)
    g = dglx_dist.distribute(train_g, strategy=args.strategy)
    sampler = as_edge_prediction_sampler(
        NeighborSampler([10, 10]), exclude="reverse_id", reverse_eids=reverse_eids,
        negative_sampler=negative_sampler.Uniform(1))
    loader = DataLoader(g, torch.arange(g.num_edges()), sampler, batch_size=args.batch_size,
                        shuffle=True)

    model = SAGE(g.ndata["feat"].shape[1], 64)
    model = dglx_dist.parallelize(model, g)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        for input_nodes, pair_graph, neg_pair_graph, blocks in loader:
            h = model(blocks, g.ndata["feat"][input_nodes])
            pos, neg = dot_scores(pair_graph, h), dot_scores(neg_pair_graph, h)
            scores = torch.cat([pos, neg])
            labels = torch.cat([torch.ones_like(pos), torch.zeros_like(neg)])
            loss = F.binary_cross_entropy_with_logits(scores, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
        h = layerwise_inference(model, g, 1000)
        val = evaluate(h, val_pairs, g.num_nodes(), args.seed + 1)
        print(json.dumps({"epoch": epoch, "loss": round(loss.item(), 4),
                          "val_mrr": round(val["mrr"], 4)}))

    h = layerwise_inference(model, g, 1000)
    test = evaluate(h, test_pairs, g.num_nodes(), args.seed + 2)
    print(json.dumps({f"test_{k}": round(v, 4) for k, v in test.items()}))


if __name__ == "__main__":
    main()
