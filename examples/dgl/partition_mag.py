"""Partitions mag-small (dglx_dist's ogbn-mag-shaped graph with node types) with DGL's own
``dgl.distributed.partition_graph`` (METIS), the way a DistDGL user prepares a typed run:
``OUT/mag.json`` plus one directory per part. distdgl_rgcn.py (DGL) and ../distdgl_rgcn.py
(dglx_dist) both read it."""
import argparse

import dgl

from dglx_dist.data import to_dgl
from dglx_dist.data.mag import MAG_PRESETS, mag_dataset


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--parts", type=int, default=2)
    args = parser.parse_args()
    g = to_dgl(mag_dataset(MAG_PRESETS["mag-small"]))
    # the name DGL's distributed R-GCN example gives the papers' labels
    g.nodes["paper"].data["labels"] = g.nodes["paper"].data.pop("label")
    dgl.distributed.partition_graph(g, "mag", args.parts, args.out, part_method="metis",
                                    balance_edges=True)


if __name__ == "__main__":
    main()
