"""Inference through the strategy for any node ids, and its export in original ids."""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import torch

from dglx_dist.api.graph import DistGraph
from dglx_dist.api.loader import DataLoader
from dglx_dist.api.parallel import DistModel
from dglx_dist.api.samplers import MultiLayerFullNeighborSampler, NeighborSampler
from dglx_dist.api.split import node_split
from dglx_dist.api.tensor import DistTensor
from dglx_dist.data.atomic import DirKind, check_target
from dglx_dist.data.checked import to_arrow
from dglx_dist.data.nolinks import replacing
from dglx_dist.data.owned import read_record, remove_recorded, write_record
from dglx_dist.errors import InvalidValueError, NotSupportedError
from dglx_dist.runtime.agree import on_every_rank

__all__ = ["inference", "export_parquet"]


@torch.no_grad()
def inference(model: DistModel, g: DistGraph, nodes=None, batch_size: int = 4096,
              key: str = "feat", fanouts: Sequence[int] | None = None) -> DistTensor:
    """The model's outputs (logits, or embeddings for a model that returns them) for
    ``nodes`` with full neighbourhoods (or ``fanouts``), in eval mode, through the strategy
    (collective).

    Each rank computes its share (:func:`~dglx_dist.api.node_split`) and writes it into a
    :class:`~dglx_dist.api.DistTensor` of one row per node (rows of other nodes stay zero), so
    ``out[ids]`` then reads any node's output on any rank.

    Args:
        model: what :func:`~dglx_dist.api.parallelize` returned.
        nodes: a boolean mask or ids, the same on every rank (default: every node).
        batch_size: output nodes per step; under a strategy whose steps are full-graph
            forwards (granndis, fullgraph, dorylus: each computes every node), one step of
            each rank's nodes, as their Trainer evaluates.
        key: the input node data.
        fanouts: sampled neighbours per layer, input layer first (DGL's ``NeighborSampler``),
            for graphs whose full neighbourhoods are too large to gather; None: full
            neighbourhoods.
    """
    nodes = torch.arange(g.num_nodes()) if nodes is None else nodes
    if not g.strategy.capabilities.draws_blocks:  # full-graph steps: more would repeat the work
        if fanouts is not None:
            raise NotSupportedError(f"inference: fanouts under {g.strategy.registered_name}: "
                                    f"its steps are full-graph forwards over every neighbour; "
                                    f"leave fanouts out")
        batch_size = max(batch_size, g.num_nodes())  # (and granndis's co-batches are one)
    elif fanouts is not None and len(fanouts) != model._num_layers:
        raise InvalidValueError(f"inference: fanouts {list(fanouts)} has {len(fanouts)} "
                                f"entries; the model has {model._num_layers} layers, one each")
    sampler = (MultiLayerFullNeighborSampler(model._num_layers) if fanouts is None else
               NeighborSampler(list(fanouts)))
    loader = DataLoader(g, node_split(nodes, g), sampler, batch_size=batch_size)
    was_training = model.training
    model.eval()
    out: DistTensor | None = None
    for input_nodes, output_nodes, blocks in loader:
        x = g.ndata[key][input_nodes]  # read on the host, as in DistDGL
        rows = model(blocks, x.to(loader.device) if isinstance(x, torch.Tensor) else x)
        if out is None:  # every rank takes the same steps: the first one creates it
            width = torch.tensor([rows.shape[1]])
            g.session.world.all_reduce(width, op="max")
            out = DistTensor((g.num_nodes(), int(width)), rows.dtype, graph=g)
        out[output_nodes] = rows
    model.train(was_training)
    return out  # the loop ended in a barrier: every rank's rows are written


EXPORT_DIR = DirKind("export", "a directory of dglx_dist.export_parquet")


def export_parquet(directory: str | os.PathLike, tensor: DistTensor, nodes=None,
                   overwrite: bool = False) -> Path:
    """Writes this rank's share of ``nodes`` (default every node) of ``tensor`` to
    ``directory/part-RRRRR.parquet`` (collective): ``node_id`` in the ids of the graph
    :func:`~dglx_dist.api.distribute` was given, ``value`` each row as a float32 list.

    ``directory`` must be new or empty, or, with ``overwrite``, an earlier export whose files
    are as it wrote them (they are replaced; nothing else is touched). Returns this rank's file.
    """
    g = tensor._g
    out = Path(directory)

    def check() -> None:  # rank 0 judges the directory; every rank learns the outcome
        if g.session.is_main:
            check_target(out, overwrite, EXPORT_DIR)
            record = read_record(out) if out.is_dir() else None
            if record is not None:  # an earlier export's files (checked: all of them)
                remove_recorded(out, record)

    on_every_rank(g.session, "export_parquet", check)
    ids = node_split(torch.arange(g.num_nodes()) if nodes is None else nodes, g)
    rows = tensor[ids].detach().cpu().to(torch.float32).reshape(ids.numel(), -1).numpy()
    out.mkdir(parents=True, exist_ok=True)
    table = pa.table({"node_id": to_arrow(ids.numpy()), "value": to_arrow(rows)})
    path = out / f"part-{g.session.rank:05d}.parquet"
    with replacing(path) as f:  # never through a link planted under its name
        pq.write_table(table, f)
    g.session.world.barrier()
    if g.session.is_main:  # every rank's file is in place: rank 0 records them
        write_record(out, EXPORT_DIR.name)
    g.session.world.barrier()
    return path
