"""Full-graph GCN on Cora, trained by dglx_dist (any strategy: --strategy).

dgl/gcn_fullgraph.py is the plain DGL script this one was ported from; the lines that differ
are the port (tests/unit/test_example_diffs.py counts them). ``model(g, features)`` gives this
rank's nodes' rows, and the masks pick among them. Launch with torchrun:

    torchrun --nproc-per-node 2 examples/gcn_fullgraph.py --strategy granndis
"""
import argparse
import json

import dgl
import dgl.nn as dglnn
import torch
import torch.nn as nn
import torch.nn.functional as F
import dglx_dist

from dglx_dist.data import CoraGraphDataset  # DGL's Cora, shipped: no download


class GCN(nn.Module):
    def __init__(self, in_size, hid_size, out_size, dropout):
        super().__init__()
        self.layers = nn.ModuleList([dglnn.GraphConv(in_size, hid_size, activation=F.relu),
                                     dglnn.GraphConv(hid_size, out_size)])
        self.dropout = nn.Dropout(dropout)

    def forward(self, g, features):
        h = features
        for i, layer in enumerate(self.layers):
            if i != 0:
                h = self.dropout(h)
            h = layer(g, h)
        return h


def evaluate(g, features, labels, mask, model):
    model.eval()
    with torch.no_grad():
        logits = model(g, features)
        logits, labels = logits[mask], labels[mask]
        correct = (logits.argmax(1) == labels).sum().item()
        total = len(labels)
        correct, total = dglx_dist.all_reduce([correct, total]).tolist()
    return correct / max(total, 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--strategy", default="granndis")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    dataset = CoraGraphDataset()
    g = dgl.add_self_loop(dgl.remove_self_loop(dataset[0]))
    g = dglx_dist.distribute(g, strategy=args.strategy)
    features, labels = g.ndata["feat"], g.ndata["label"]
    train_mask, val_mask, test_mask = (g.ndata[k] for k in ("train_mask", "val_mask",
                                                           "test_mask"))

    model = GCN(features.shape[1], 16, dataset.num_classes, 0.5)
    model = dglx_dist.parallelize(model, g)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=5e-4)
    for epoch in range(args.epochs):
        model.train()
        logits = model(g, features)
        loss = F.cross_entropy(logits[train_mask], labels[train_mask])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if (epoch + 1) % 20 == 0:
            val_acc = evaluate(g, features, labels, val_mask, model)
            print(json.dumps({"epoch": epoch, "loss": round(loss.item(), 4),
                              "val_acc": round(val_acc, 4)}))

    test_acc = evaluate(g, features, labels, test_mask, model)
    print(json.dumps({"test_acc": round(test_acc, 4)}))


if __name__ == "__main__":
    main()
