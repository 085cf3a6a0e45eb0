"""Edge-weighted sampling and convolution on Cora, trained by dglx_dist (--strategy).

Each edge is weighted by how many words its two papers share (plus one); the sampler draws
neighbours in proportion to the weights (``prob``) and hands them to the blocks
(``prefetch_edge_feats``), where GraphConv takes the messages' mean weighted by them
(``EdgeWeightNorm`` and ``edge_weight``).
dgl/weighted_sampling.py is the plain DGL script this one was ported from; the lines that
differ are the port (tests/unit/test_example_diffs.py counts them). Launch with torchrun:

    torchrun --nproc-per-node 2 examples/weighted_sampling.py --strategy distdgl

p3 samples by ``prob`` too, but its first conv runs split by input columns and refuses edge
weights (not built yet); granndis, fullgraph and dorylus do not sample, and refuse ``prob``.
"""
import argparse
import json

import dgl
import dgl.nn as dglnn
import torch
import torch.nn as nn
import torch.nn.functional as F
import dglx_dist
from dglx_dist import DataLoader, NeighborSampler

from dglx_dist.data import CoraGraphDataset  # DGL's Cora, shipped: no download


def shared_words(g):
    """Per edge, 1 + the number of words both its papers use (Cora's features are 0/1)."""
    src, dst = g.edges()
    feat = (g.ndata["feat"] > 0).float()
    return 1.0 + (feat[src] * feat[dst]).sum(1)


class WeightedGCN(nn.Module):
    def __init__(self, in_size, hid_size, out_size, dropout):
        super().__init__()
        self.layers = nn.ModuleList([dglnn.GraphConv(in_size, hid_size, norm="none"),
                                     dglnn.GraphConv(hid_size, out_size, norm="none")])
        self.weigh = dglnn.EdgeWeightNorm(norm="right")  # each node's in-weights sum to 1
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks, x):
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h, edge_weight=self.weigh(block, block.edata["w"]))
            if i != len(self.layers) - 1:
                h = self.dropout(F.relu(h))
        return h


def evaluate(model, g, loader):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for input_nodes, output_nodes, blocks in loader:
            logits = model(blocks, g.ndata["feat"][input_nodes])
            correct += (logits.argmax(1) == g.ndata["label"][output_nodes]).sum().item()
            total += len(output_nodes)
    model.train()
    correct, total = dglx_dist.all_reduce([correct, total]).tolist()
    return correct / max(total, 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.03)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--strategy", default="distdgl")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    dgl.seed(args.seed)
    dataset = CoraGraphDataset()
    g = dataset[0]
    g.edata["w"] = shared_words(g)
    g = dglx_dist.distribute(g, strategy=args.strategy)
    train_ids = torch.nonzero(g.ndata["train_mask"]).squeeze(1)
    test_ids = torch.nonzero(g.ndata["test_mask"]).squeeze(1)
    sampler = NeighborSampler([10, 10], prob="w", prefetch_edge_feats=["w"])
    full = NeighborSampler([-1, -1], prefetch_edge_feats=["w"])
    train_loader = DataLoader(g, train_ids, sampler, batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(g, test_ids, full, batch_size=1000)

    model = WeightedGCN(g.ndata["feat"].shape[1], 16, dataset.num_classes, 0.5)
    model = dglx_dist.parallelize(model, g)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
    for epoch in range(args.epochs):
        for input_nodes, output_nodes, blocks in train_loader:
            x = g.ndata["feat"][input_nodes]
            y = g.ndata["label"][output_nodes]
            loss = F.cross_entropy(model(blocks, x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(json.dumps({"epoch": epoch, "loss": round(loss.item(), 4)}))
    print(json.dumps({"test_acc": round(evaluate(model, g, test_loader), 4)}))


if __name__ == "__main__":
    main()
