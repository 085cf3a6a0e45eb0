"""GraphSAGE written for DGL's distributed API (DistDGL): DistGraph, node_split,
DistNodeDataLoader, DDP with join(), and a layer-wise inference into DistTensors.

Partition first (partition_cora.py), then run under DGL's launcher, or on one machine in
DGL's standalone mode (one partition, one process):

    python examples/dgl/partition_cora.py parts --parts 1
    python examples/dgl/distdgl_sage.py --part-config parts/cora.json --standalone

../distdgl_sage.py is the same script on dglx_dist, under torchrun: only its import differs.
"""
import argparse
import contextlib
import json

import dgl
import dgl.nn as dglnn
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel


class SAGE(nn.Module):
    def __init__(self, in_size, hid_size, out_size, dropout):
        super().__init__()
        self.layers = nn.ModuleList([dglnn.SAGEConv(in_size, hid_size, "mean"),
                                     dglnn.SAGEConv(hid_size, out_size, "mean")])
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks, x):
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i != len(self.layers) - 1:
                h = self.dropout(F.relu(h))
        return h

    @torch.no_grad()
    def inference(self, g, x, batch_size):
        """Every node's logits, one layer at a time; each trainer computes its share."""
        nodes = dgl.distributed.node_split(torch.arange(g.num_nodes()), g.get_partition_book())
        sampler = dgl.dataloading.MultiLayerFullNeighborSampler(1)
        for i, layer in enumerate(self.layers):
            y = dgl.distributed.DistTensor((g.num_nodes(), layer._out_feats), torch.float32,
                                           f"h{i}", persistent=True)
            loader = dgl.dataloading.DistNodeDataLoader(g, nodes, sampler, batch_size=batch_size)
            for input_nodes, output_nodes, blocks in loader:
                h = layer(blocks[0], x[input_nodes])
                y[output_nodes] = F.relu(h) if i != len(self.layers) - 1 else h
            g.barrier()
            x = y
        return x


def accuracy(logits, labels):
    return (logits.argmax(1) == labels).float().mean().item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part-config", required=True, help="partition_graph's JSON file")
    parser.add_argument("--ip-config", default="ip_config.txt")
    parser.add_argument("--standalone", action="store_true")
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()

    dgl.distributed.initialize(args.ip_config)
    if not args.standalone:
        torch.distributed.init_process_group(backend="gloo")
    g = dgl.distributed.DistGraph("cora", part_config=args.part_config)
    pb = g.get_partition_book()
    train_ids = dgl.distributed.node_split(g.ndata["train_mask"], pb, force_even=True)
    test_ids = dgl.distributed.node_split(g.ndata["test_mask"], pb, force_even=True)
    local = pb.partid2nids(pb.partid)
    print(json.dumps({"part": pb.partid, "train": len(train_ids),
                      "train_local": int(torch.isin(train_ids, local).sum())}))
    sampler = dgl.dataloading.NeighborSampler([10, 10])
    loader = dgl.dataloading.DistNodeDataLoader(g, train_ids, sampler,
                                                batch_size=args.batch_size, shuffle=True)

    device = torch.device("cpu")
    torch.manual_seed(0)
    model = SAGE(g.ndata["features"].shape[1], 16, 7, 0.5)
    if not args.standalone:
        model = DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
    for epoch in range(args.epochs):
        model.train()
        join = model.join() if not args.standalone else contextlib.nullcontext()
        with join:
            for input_nodes, output_nodes, blocks in loader:
                x = g.ndata["features"][input_nodes]
                y = g.ndata["labels"][output_nodes]
                blocks = [block.to(device) for block in blocks]
                loss = F.cross_entropy(model(blocks, x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
        print(json.dumps({"epoch": epoch, "loss": round(loss.item(), 4)}))
        if epoch == args.epochs // 2:  # evaluated twice: the inference's DistTensors again
            print(json.dumps({"epoch": epoch, "mid_test_acc": evaluate(model, g, test_ids)}))
    test_acc = evaluate(model, g, test_ids)
    print(json.dumps({"test_acc": test_acc, "test_nodes": len(test_ids)}))


def evaluate(model, g, test_ids):
    net = model.module if hasattr(model, "module") else model
    net.eval()
    logits = net.inference(g, g.ndata["features"], 1000)
    net.train()
    return round(accuracy(logits[test_ids], g.ndata["labels"][test_ids]), 4)


if __name__ == "__main__":
    main()
