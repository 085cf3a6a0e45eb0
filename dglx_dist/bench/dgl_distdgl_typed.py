"""DGL's own DistDGL training an R-GCN on a graph with node and edge types (the worker,
:mod:`dglx_dist.bench.dgl_distdgl_worker`, on a typed dataset directory), written as DGL's
distributed R-GCN example (``examples/distributed/rgcn``) trains ogbn-mag:

* ``partition`` (the worker's, for every dataset): the typed dataset as a DGL heterograph
  (:func:`~dglx_dist.data.to_dgl`), ``dgl.distributed.partition_graph`` with METIS, each node
  type balanced and, within the labeled type, each split (the categories our ``metis``
  balances on a typed graph), and the edges;
* ``trainer``: ``DistGraph``, ``node_split(..., ntype=)`` of the labeled type's masks,
  ``DistNodeDataLoader`` over ``{ntype: ids}`` with ``NeighborSampler`` (one fanout for every
  edge type, as ours), a ``DistEmbedding`` (zeros, as ours) per featureless type stepped by
  ``dgl.distributed.optim.SparseAdam``, and :class:`~dglx_dist.models.RGCN` (the model our
  side trains, same seed: same initial weights) under DDP with ``find_unused_parameters``
  (the last layer's relations into other types carry no message, as under our distdgl).

The loop, the records and the evaluation are the worker's (:func:`node_job` gives them what
they train).
"""
from __future__ import annotations

import argparse

from dglx_dist.errors import DatasetFormatError

__all__ = ["category_of", "node_job"]


def category_of(g) -> str:
    """The node type with labels (the one the run classifies) of ``g``, DGL's DistGraph or
    ours."""
    labeled = [nt for nt in g.ntypes if "label" in g.nodes[nt].data]
    if len(labeled) != 1:
        raise DatasetFormatError(f"expected one node type with labels (the typed dataset's "
                                 f"category), found {labeled or 'none'}")
    return labeled[0]


def node_job(args: argparse.Namespace, g, masks: tuple[str, ...]):
    """The R-GCN, its optimizers, the training loader and the splits' seeds on DGL's
    ``DistGraph`` ``g`` of a typed graph, as a
    :class:`~dglx_dist.bench.dgl_distdgl_nodes.NodeJob`."""
    import dgl
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from dglx_dist.bench.dgl_distdgl_nodes import NodeJob
    from dglx_dist.models import RGCN, node_inputs

    category = category_of(g)
    pb = g.get_partition_book()
    nids = {m: {category: dgl.distributed.node_split(
        g.nodes[category].data[f"{m}_mask"], pb, ntype=category, force_even=True)}
        for m in masks}
    embeds = {nt: dgl.distributed.DistEmbedding(
        g.num_nodes(nt), args.hidden, f"emb_{nt}", part_policy=g.get_node_partition_policy(nt))
        for nt in g.ntypes if "feat" not in g.nodes[nt].data}
    in_sizes = {nt: g.nodes[nt].data["feat"].shape[1] for nt in g.ntypes if nt not in embeds}
    torch.manual_seed(args.seed)
    model = RGCN(in_sizes, g.etypes, args.hidden, args.num_classes, len(args.fanouts),
                 dropout=args.dropout, category=category)
    ddp = DistributedDataParallel(model, find_unused_parameters=True)
    opts = [torch.optim.Adam(ddp.parameters(), lr=args.lr, weight_decay=args.weight_decay),
            dgl.distributed.optim.SparseAdam(list(embeds.values()), lr=args.lr)]
    dgl.seed(args.seed * 7919 + args.machine)
    loader = dgl.dataloading.DistNodeDataLoader(
        g, nids["train"], dgl.dataloading.NeighborSampler(args.fanouts),
        batch_size=args.batch_size, shuffle=True, drop_last=False)
    labels = g.nodes[category].data["label"]
    return NodeJob(model, ddp, opts, loader, nids,
                   inputs=lambda input_nodes: node_inputs(g, input_nodes, embeds),
                   labels=lambda seeds: labels[seeds[category]].long())
