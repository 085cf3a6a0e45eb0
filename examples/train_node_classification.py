"""Node classification with GraphSAGE (or GCN), trained by a dglx_dist strategy.

This is DGL's usual mini-batch script (a dgl.nn model, argparse, a training loop) with the
distributed parts handed to dglx_dist; docs/porting.md shows the diff to the single-machine
version. Launch with torchrun on one machine or many:

    torchrun --nproc-per-node 2 examples/train_node_classification.py --data cora
    torchrun --nnodes 2 --node-rank 0 --nproc-per-node 4 --rdzv-backend c10d \\
        --rdzv-endpoint HOST:29400 examples/train_node_classification.py \\
        --strategy distdgl --partitions /shared/parts
"""
import argparse
import json
import sys

import dgl.nn as dglnn
import torch
import torch.nn as nn
import torch.nn.functional as F

import dglx_dist
from dglx_dist.checkpoint import Checkpointing
from dglx_dist.cli_flags import add_flags, from_args
from dglx_dist.config import RunConfig
from dglx_dist.partition import PartitionDir
from dglx_dist.prepare import ensure_partitions
from dglx_dist.strategies import STRATEGIES

# dglx train's flags for what this script uses (dglx_dist.config.RunConfig): its model has two
# layers and it validates nothing per epoch, so --layers and --eval-every are not offered
SECTIONS, SKIP = ("model", "optimizer", "loop", "strategy"), ("layers", "eval_every")


class SAGE(nn.Module):
    def __init__(self, in_feats, hidden, num_classes, dropout, row_normalize, conv="sage"):
        super().__init__()
        self.row_normalize = row_normalize
        if conv == "sage":
            self.layers = nn.ModuleList([dglnn.SAGEConv(in_feats, hidden, "mean"),
                                         dglnn.SAGEConv(hidden, num_classes, "mean")])
        else:  # GCN (what the dorylus strategy runs)
            self.layers = nn.ModuleList([dglnn.GraphConv(in_feats, hidden),
                                         dglnn.GraphConv(hidden, num_classes)])
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks, x):
        h = x
        if self.row_normalize:  # what DGL's Planetoid loaders do to Cora's 0/1 features
            h = x / x.sum(1, keepdim=True).clamp(min=1)
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i != len(self.layers) - 1:
                h = self.dropout(F.relu(h))
        return h


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_flags(parser, RunConfig, sections=SECTIONS, skip=SKIP,
              base=RunConfig().updated(loop={"epochs": 60}),
              changes={"model": {"choices": ("sage", "gcn")},
                       "strategy": {"choices": STRATEGIES.names()}})
    parser.add_argument("--data", default="cora", help="dataset directory or built-in name")
    parser.add_argument("--partitions", help="partition directory (default: made for --data)")
    parser.add_argument("--checkpoint-dir", help="save a checkpoint here after every epoch")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the newest checkpoint in --checkpoint-dir")
    args = parser.parse_args()
    config = from_args(RunConfig, args, sections=SECTIONS, skip=SKIP)

    session = dglx_dist.init()
    strategy = config.strategy.build()
    parts = PartitionDir(args.partitions or ensure_partitions(args.data, strategy, session))
    m = config.model
    torch.manual_seed(config.loop.seed)
    model = SAGE(parts.feat_dim, m.hidden, parts.num_classes, m.dropout, m.row_normalize, m.name)
    checkpoint = Checkpointing(args.checkpoint_dir) if args.checkpoint_dir else None
    trainer = dglx_dist.Trainer(model, parts, strategy, optim=config.optimizer,
                                checkpoint=checkpoint)
    trainer.resume_or_start(args.resume)  # also after a torchrun --max-restarts restart

    loss = torch.zeros(())
    for epoch in range(trainer.epoch, config.loop.epochs):
        for batch in trainer.batches(epoch):
            loss = F.cross_entropy(trainer.forward(batch), batch.y)
            trainer.step(loss)
        if checkpoint is not None:
            trainer.save(checkpoint.dir)
    test_acc = trainer.evaluate("test")
    if session.is_main:
        sys.stdout.write(json.dumps({"strategy": config.strategy.name,
                                     "epochs": config.loop.epochs,
                                     "loss": round(loss.item(), 4),
                                     "test_acc": round(test_acc, 4)}) + "\n")
    trainer.close()
    session.shutdown()


if __name__ == "__main__":
    main()
