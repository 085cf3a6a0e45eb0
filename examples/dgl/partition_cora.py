"""Partitions Cora with DGL's own ``dgl.distributed.partition_graph`` (METIS, balanced on the
training nodes), the way a DistDGL user prepares a run: ``OUT/cora.json`` plus one directory
per part. distdgl_sage.py (DGL) and ../distdgl_sage.py (dglx_dist) both read it."""
import argparse

import dgl

from dglx_dist.data import CoraGraphDataset  # DGL's Cora, shipped: no download


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--parts", type=int, default=2)
    args = parser.parse_args()
    g = CoraGraphDataset()[0]
    # the node data names of DGL's distributed examples (their partition_graph.py renames them)
    g.ndata["features"], g.ndata["labels"] = g.ndata.pop("feat"), g.ndata.pop("label")
    dgl.distributed.partition_graph(g, "cora", args.parts, args.out, part_method="metis",
                                    balance_ntypes=g.ndata["train_mask"], balance_edges=True)


if __name__ == "__main__":
    main()
