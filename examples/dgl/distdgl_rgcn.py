"""R-GCN written for DGL's distributed API (DistDGL) on a graph with node types: DistGraph,
node_split by type, DistNodeDataLoader over {"paper": ids}, DistEmbedding + SparseAdam for the
featureless types, DDP with join().

Partition first (partition_mag.py), then run under DGL's launcher, or on one machine in
DGL's standalone mode (one partition, one process):

    python examples/dgl/partition_mag.py parts --parts 1
    python examples/dgl/distdgl_rgcn.py --part-config parts/mag.json --standalone

../distdgl_rgcn.py is the same script on dglx_dist, under torchrun: only its import differs.
"""
import argparse
import contextlib
import json
import tempfile

import dgl
import dgl.nn as dglnn
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel


class RelConv(nn.Module):
    """A relational graph conv: one weight per relation (held in one tensor, so every step
    uses the parameter whichever relations its blocks hold), summed per destination type,
    plus a self-loop weight."""

    def __init__(self, rels, in_size, out_size):
        super().__init__()
        self.rels = list(rels)
        self.weight = nn.Parameter(torch.empty(len(self.rels), in_size, out_size))
        nn.init.xavier_uniform_(self.weight)
        self.loop = nn.Linear(in_size, out_size)
        self.conv = dglnn.HeteroGraphConv({rel: dglnn.GraphConv(
            in_size, out_size, norm="right", weight=False, bias=False, allow_zero_in_degree=True)
            for rel in self.rels})

    def forward(self, block, h):
        weights = {rel: {"weight": self.weight[i]} for i, rel in enumerate(self.rels)}
        out = self.conv(block, h, mod_kwargs=weights)
        return {nt: out.get(nt, 0) + self.loop(h[nt][:block.num_dst_nodes(nt)])
                for nt in block.dsttypes if block.num_dst_nodes(nt)}


class RGCN(nn.Module):
    def __init__(self, feat_sizes, rels, hid_size, out_size):
        super().__init__()
        self.proj = nn.ModuleDict({nt: nn.Linear(size, hid_size) for nt, size in feat_sizes.items()})
        self.layers = nn.ModuleList([RelConv(rels, hid_size, hid_size),
                                     RelConv(rels, hid_size, out_size)])

    def forward(self, blocks, x):
        h = {nt: self.proj[nt](v) if nt in self.proj else v for nt, v in x.items()}
        h = {nt: F.relu(v) for nt, v in self.layers[0](blocks[0], h).items()}
        return self.layers[1](blocks[1], h)["paper"]


def init_emb(shape, dtype):
    return torch.empty(shape, dtype=dtype).uniform_(-1, 1)


def inputs(g, input_nodes, embeds):
    x = {nt: g.nodes[nt].data["feat"][ids] for nt, ids in input_nodes.items() if nt not in embeds}
    x.update({nt: embeds[nt](ids) for nt, ids in input_nodes.items() if nt in embeds})
    return x


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part-config", required=True, help="partition_graph's JSON file")
    parser.add_argument("--ip-config", default="ip_config.txt")
    parser.add_argument("--standalone", action="store_true")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()

    dgl.distributed.initialize(args.ip_config)
    if not args.standalone:
        torch.distributed.init_process_group(backend="gloo")
    else:  # DGL's sparse optimizers ask the default group for its backend, even alone
        torch.distributed.init_process_group("gloo", init_method="file://" + tempfile.mktemp(),
                                             rank=0, world_size=1)
    g = dgl.distributed.DistGraph("mag", part_config=args.part_config)
    pb = g.get_partition_book()
    train_ids = dgl.distributed.node_split(g.nodes["paper"].data["train_mask"], pb,
                                           ntype="paper", force_even=True)
    test_ids = dgl.distributed.node_split(g.nodes["paper"].data["test_mask"], pb,
                                          ntype="paper", force_even=True)
    sampler = dgl.dataloading.NeighborSampler([10, 10])
    loader = dgl.dataloading.DistNodeDataLoader(g, {"paper": train_ids}, sampler,
                                                batch_size=args.batch_size, shuffle=True)

    torch.manual_seed(0)
    embeds = {nt: dgl.distributed.DistEmbedding(g.num_nodes(nt), args.hidden, f"emb_{nt}",
                                                init_emb, g.get_node_partition_policy(nt))
              for nt in g.ntypes if "feat" not in g.nodes[nt].data}
    feat_sizes = {nt: g.nodes[nt].data["feat"].shape[1] for nt in g.ntypes if nt not in embeds}
    labels = g.nodes["paper"].data["labels"]
    num_classes = int(labels[torch.arange(g.num_nodes("paper"))].max()) + 1
    model = RGCN(feat_sizes, g.etypes, args.hidden, num_classes)
    if not args.standalone:
        model = DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    emb_opt = dgl.distributed.optim.SparseAdam(list(embeds.values()), lr=args.lr)
    for epoch in range(args.epochs):
        model.train()
        join = model.join() if not args.standalone else contextlib.nullcontext()
        with join:
            for input_nodes, seeds, blocks in loader:
                logits = model(blocks, inputs(g, input_nodes, embeds))
                loss = F.cross_entropy(logits, labels[seeds["paper"]])
                opt.zero_grad()
                emb_opt.zero_grad()
                loss.backward()
                opt.step()
                emb_opt.step()
        print(json.dumps({"rank": g.rank(), "epoch": epoch, "loss": round(loss.item(), 4)}))

    model.eval()
    full = dgl.dataloading.MultiLayerFullNeighborSampler(2)
    test_loader = dgl.dataloading.DistNodeDataLoader(g, {"paper": test_ids}, full,
                                                     batch_size=1000)
    correct = 0
    with torch.no_grad():
        for input_nodes, seeds, blocks in test_loader:
            logits = model(blocks, inputs(g, input_nodes, embeds))
            correct += (logits.argmax(1) == labels[seeds["paper"]]).sum().item()
    print(json.dumps({"test_acc": round(correct / max(len(test_ids), 1), 4),
                      "test_nodes": len(test_ids)}))


if __name__ == "__main__":
    main()
