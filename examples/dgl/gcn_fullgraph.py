"""Full-graph GCN on Cora: a plain DGL script, one process.

The whole graph goes through the model at every step (``model(g, features)``), and masks pick
the training and evaluation rows. ../gcn_fullgraph.py is the same script trained by
dglx_dist; the difference is a few lines (tests/unit/test_example_diffs.py counts them).
"""
import argparse
import json

import dgl
import dgl.nn as dglnn
import torch
import torch.nn as nn
import torch.nn.functional as F

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
    return correct / max(total, 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    dataset = CoraGraphDataset()
    g = dgl.add_self_loop(dgl.remove_self_loop(dataset[0]))
    features, labels = g.ndata["feat"], g.ndata["label"]
    train_mask, val_mask, test_mask = (g.ndata[k] for k in ("train_mask", "val_mask",
                                                           "test_mask"))

    model = GCN(features.shape[1], 16, dataset.num_classes, 0.5)
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
