"""What the :class:`~dglx_dist.trainer.Trainer` feeds its model in a node-classification step,
as DGL's R-GCN examples do: per node type, the ``feat`` rows of the first block's sources for
the types that have features and learnable rows (one
:class:`~dglx_dist.api.embedding.DistEmbedding` per featureless type, trained by
``SparseAdam`` beside the model's optimizer) for the others; the labels are those of the one
node type with labels, the *category*, whose masks give the splits. A graph without types is
the one-type case, and as in DGL its steps speak tensors, not dicts of one type: the model
gets the one type's rows, the loader its seeds.
"""
from __future__ import annotations

from typing import Any

import torch

from dglx_dist.api import DistGraph
from dglx_dist.errors import DatasetFormatError, InvalidValueError

__all__ = ["StepInputs"]


class StepInputs:
    """Each step's inputs, labels and seeds (see the module docstring).

    Args:
        graph: the graph.
        embed_dim: width of the featureless types' rows (the model's input width for them).
        lr: ``SparseAdam``'s learning rate.
    """

    def __init__(self, graph: DistGraph, embed_dim: int | None, lr: float):
        from dglx_dist.api.embedding import DistEmbedding, SparseAdam

        self.graph, self.category = graph, category_of(graph)
        self.one = None if graph.is_typed else self.category  # DGL's tensors for one type
        featureless = [nt for nt in graph.ntypes if "feat" not in graph.nodes[nt].data]
        if featureless and embed_dim is None:
            raise InvalidValueError(f"node types {featureless} have no features: pass "
                                    "embed_dim= (the width the model takes for them), and the "
                                    "Trainer trains a DistEmbedding of that width for each")
        self.embeds = {nt: DistEmbedding(graph.num_nodes(nt), embed_dim, f"{nt}_embed",
                                         part_policy=graph.get_node_partition_policy(nt),
                                         graph=graph) for nt in featureless}
        self.optimizer = SparseAdam(list(self.embeds.values()), lr=lr) if self.embeds else None

    @property
    def embeddings(self) -> list:
        """The embeddings' stores, for checkpoints."""
        return [e.inner for e in self.embeds.values()]

    def mask(self, split: str):
        """``split``'s mask ("train", "val" or "test") over the category's nodes."""
        return self.graph.nodes[self.category].data[f"{split}_mask"]

    def seeds(self, split: str):
        """The loader's ``indices`` of ``split``'s nodes."""
        return self.mask(split) if self.one else {self.category: self.mask(split)}

    def x_y(self, input_nodes, output_nodes, blocks) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """Per node type: prefetched or read ``feat`` rows, or the embedding's rows (a pull
        every rank takes part in, types in the graph's order); the category's labels."""
        if self.one:
            input_nodes, output_nodes = {self.one: input_nodes}, {self.one: output_nodes}
        x = {}
        for nt in self.graph.ntypes:
            ids = input_nodes.get(nt, torch.zeros(0, dtype=torch.int64))
            if nt in self.embeds:
                x[nt] = self.embeds[nt](ids)
                continue
            src = blocks[0].srcnodes[nt].data if blocks else {}
            x[nt] = src["feat"] if "feat" in src else self.graph.nodes[nt].data["feat"][ids]
        seeds = output_nodes[self.category]
        dst = blocks[-1].dstnodes[self.category].data if blocks else {}
        y = dst["label"] if "label" in dst else \
            self.graph.nodes[self.category].data["label"][seeds]
        return (x[self.one] if self.one else x), y, seeds

    def zero_grad(self) -> None:
        if self.optimizer is not None:
            self.optimizer.zero_grad()

    def step(self) -> None:
        if self.optimizer is not None:
            self.optimizer.step()


def category_of(graph: DistGraph) -> str:
    """The node type node classification predicts (``GraphTypes.predicted``; the one type of a
    graph without types), checked to have labels."""
    labeled = [nt for nt in graph.ntypes if "label" in graph.nodes[nt].data]
    types = graph.pdir.types  # None: the one type, which is the category if it has labels
    category = types.predicted() if types is not None else next(iter(labeled), None)
    if category is None or category not in labeled:
        raise DatasetFormatError(f"{graph.pdir.path}: node classification needs one node type "
                                 f"with labels (the dataset's category); found "
                                 f"{labeled or 'none'}")
    return category

