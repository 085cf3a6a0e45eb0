"""Mini-batch GraphSAGE of PyG's convs (torch_geometric.nn.SAGEConv) on Cora, trained by
dglx_dist (--strategy distdgl: the strategy that runs a model as it is).

examples/sage_minibatch.py is the same script with dgl.nn's convs. The loaders here yield the
package's blocks (dglx_dist.DataLoader's always are): each gives its edges
as PyG's bipartite convs take them, ``block.edge_index`` and ``block.size``, the destination
nodes first among the sources (docs/porting.md, "PyG's convs"). No DGL is imported. Launch
with torchrun:

    torchrun --nproc-per-node 2 examples/pyg_sage.py --strategy distdgl
"""
import argparse
import json

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch_geometric.nn import SAGEConv

import dglx_dist
from dglx_dist import DataLoader, MultiLayerFullNeighborSampler, NeighborSampler
from dglx_dist.data import CoraGraphDataset  # DGL's Cora, shipped: no download


def conv(layer, block, h):
    """PyG's conv on one block: the sources' rows, the destinations' (the first rows)."""
    return layer((h, h[:block.num_dst_nodes()]), block.edge_index, size=block.size)


class SAGE(nn.Module):
    def __init__(self, in_size, hid_size, out_size, dropout):
        super().__init__()
        self.layers = nn.ModuleList([SAGEConv(in_size, hid_size, aggr="mean"),
                                     SAGEConv(hid_size, out_size, aggr="mean")])
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks, x):
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = conv(layer, block, h)
            if i != len(self.layers) - 1:
                h = self.dropout(F.relu(h))
        return h


@torch.no_grad()
def layerwise_inference(model, g, batch_size):
    """Every node's logits, one layer at a time over full neighbourhoods."""
    model.eval()
    net = getattr(model, "module", model)
    loader = DataLoader(g, torch.arange(g.num_nodes()), MultiLayerFullNeighborSampler(1),
                        batch_size=batch_size)
    feat = g.ndata["feat"]
    for i, layer in enumerate(net.layers):
        out = dglx_dist.DistTensor((g.num_nodes(), layer.out_channels), torch.float32)
        for input_nodes, output_nodes, blocks in loader:
            h = conv(layer, blocks[0], feat[input_nodes])
            out[output_nodes] = F.relu(h) if i != len(net.layers) - 1 else h
        feat = out
    return feat


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
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.03)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--strategy", default="distdgl")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    dataset = CoraGraphDataset()
    g = dglx_dist.distribute(dataset[0], strategy=args.strategy)
    train_ids = torch.nonzero(g.ndata["train_mask"]).squeeze(1)
    val_ids = torch.nonzero(g.ndata["val_mask"]).squeeze(1)
    sampler = NeighborSampler([10, 10])
    train_loader = DataLoader(g, train_ids, sampler, batch_size=args.batch_size, shuffle=True)
    val_loader = DataLoader(g, val_ids, sampler, batch_size=1000)

    # the rank's device (a GPU where there is one; the loader's blocks and rows are there)
    model = SAGE(g.ndata["feat"].shape[1], 16, dataset.num_classes, 0.5).to(g.session.device)
    model = dglx_dist.parallelize(model, g)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=20, gamma=0.5)
    for epoch in range(args.epochs):
        model.train()
        for input_nodes, output_nodes, blocks in train_loader:
            x = g.ndata["feat"][input_nodes]
            y = g.ndata["label"][output_nodes]
            loss = F.cross_entropy(model(blocks, x), y)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
        sched.step()
        val_acc = evaluate(model, g, val_loader)
        print(json.dumps({"epoch": epoch, "loss": round(loss.item(), 4),
                          "val_acc": round(val_acc, 4)}))

    logits = layerwise_inference(model, g, 1000)
    test_ids = torch.nonzero(g.ndata["test_mask"]).squeeze(1)
    test_acc = (logits[test_ids].argmax(1) == g.ndata["label"][test_ids]).float().mean().item()
    print(json.dumps({"test_acc": round(test_acc, 4)}))


if __name__ == "__main__":
    main()
