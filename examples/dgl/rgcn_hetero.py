"""Mini-batch R-GCN on a typed graph shaped like ogbn-mag: a plain DGL script, one process.

Papers are classified from their own features and from their typed neighbours: the authors who
wrote them, their fields of study, the papers they cite and that cite them (and, two hops
away, institutions). Node types without features enter through learnable embeddings. The data
is dglx_dist's mag-small, generated in memory, or a typed dataset directory given with --data
(``dglx datagen --preset mag --out DIR``).
"""
import argparse
import json

import dgl
import dgl.nn as dglnn
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from dgl.dataloading import DataLoader, MultiLayerFullNeighborSampler, NeighborSampler

from dglx_dist.data import read_dataset, to_dgl
from dglx_dist.data.mag import MAG_PRESETS, mag_dataset


def load_graph(data):
    """The DGL heterograph and its number of classes (papers carry feat, label, masks)."""
    ds = read_dataset(data) if data else mag_dataset(MAG_PRESETS["mag-small"])
    return to_dgl(ds), ds.num_classes


class RGCN(nn.Module):
    """One GraphConv per relation, summed per destination type, plus a self-loop term."""

    def __init__(self, in_sizes, rels, hid_size, out_size, dropout):
        super().__init__()
        self.proj = nn.ModuleDict({nt: nn.Linear(size, hid_size) for nt, size in in_sizes.items()})
        sizes = [(hid_size, hid_size), (hid_size, out_size)]
        self.layers = nn.ModuleList([dglnn.HeteroGraphConv(
            {rel: dglnn.GraphConv(i, o, norm="right", allow_zero_in_degree=True)
             for rel in rels}, aggregate="sum") for i, o in sizes])
        self.loops = nn.ModuleList([nn.Linear(i, o) for i, o in sizes])
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks, x):
        """``x``: features of the featured types (projected here), embedding rows of the rest."""
        h = {nt: self.proj[nt](v) if nt in self.proj else v for nt, v in x.items()}
        for i, (layer, loop, block) in enumerate(zip(self.layers, self.loops, blocks)):
            out = layer(block, h)
            h = {nt: out.get(nt, 0) + loop(h[nt][:block.num_dst_nodes(nt)])
                 for nt in block.dsttypes if block.num_dst_nodes(nt)}
            if i != len(self.layers) - 1:
                h = {nt: self.dropout(F.relu(v)) for nt, v in h.items()}
        return h["paper"]


def node_inputs(g, input_nodes, embeds):
    """The first layer's inputs: features where a type has them, learned rows elsewhere."""
    x = {nt: g.nodes[nt].data["feat"][ids] for nt, ids in input_nodes.items() if nt not in embeds}
    x.update({nt: embeds[nt](ids) for nt, ids in input_nodes.items() if nt in embeds})
    return x


def evaluate(model, g, embeds, loader):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for input_nodes, output_nodes, blocks in loader:
            logits = model(blocks, node_inputs(g, input_nodes, embeds))
            y = g.nodes["paper"].data["label"][output_nodes["paper"]]
            correct += (logits.argmax(1) == y).sum().item()
            total += len(y)
    model.train()
    return correct / max(total, 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="typed dataset directory (default: mag-small)")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--fanouts", default="10,10")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    dgl.seed(args.seed)
    np.random.seed(args.seed)  # DGL's DataLoader shuffles with numpy's generator
    g, num_classes = load_graph(args.data)
    train_nids = {"paper": torch.nonzero(g.nodes["paper"].data["train_mask"]).squeeze(1)}
    val_nids = {"paper": torch.nonzero(g.nodes["paper"].data["val_mask"]).squeeze(1)}
    sampler = NeighborSampler([int(f) for f in args.fanouts.split(",")])
    dataloader = DataLoader(g, train_nids, sampler, batch_size=args.batch_size, shuffle=True)
    val_loader = DataLoader(g, val_nids, sampler, batch_size=1000)

    embeds = {nt: nn.Embedding(g.num_nodes(nt), args.hidden, sparse=True)
              for nt in g.ntypes if "feat" not in g.nodes[nt].data}
    in_sizes = {nt: g.nodes[nt].data["feat"].shape[1] for nt in g.ntypes if nt not in embeds}
    model = RGCN(in_sizes, g.etypes, args.hidden, num_classes, 0.5)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    emb_opt = torch.optim.SparseAdam([e.weight for e in embeds.values()], lr=args.lr)
    for epoch in range(args.epochs):
        model.train()
        for input_nodes, output_nodes, blocks in dataloader:
            logits = model(blocks, node_inputs(g, input_nodes, embeds))
            loss = F.cross_entropy(logits, g.nodes["paper"].data["label"][output_nodes["paper"]])
            opt.zero_grad()
            emb_opt.zero_grad()
            loss.backward()
            opt.step()
            emb_opt.step()
        val_acc = evaluate(model, g, embeds, val_loader)
        print(json.dumps({"epoch": epoch, "loss": round(loss.item(), 4),
                          "val_acc": round(val_acc, 4)}))

    test_nids = {"paper": torch.nonzero(g.nodes["paper"].data["test_mask"]).squeeze(1)}
    full = MultiLayerFullNeighborSampler(2)
    test_acc = evaluate(model, g, embeds, DataLoader(g, test_nids, full, batch_size=1000))
    print(json.dumps({"test_acc": round(test_acc, 4)}))


if __name__ == "__main__":
    main()
