"""What the :class:`~dglx_dist.trainer.Trainer` feeds its model in a node-classification step.

On a graph without types (:class:`PlainInputs`): the ``feat`` rows of the first block's
sources and the ``label`` rows of the last block's destinations. On a graph with node types
(:class:`TypedInputs`), as DGL's R-GCN examples do: a dict by node type of the ``feat`` rows
of the types that have features and of learnable rows (one
:class:`~dglx_dist.api.embedding.DistEmbedding` per featureless type, trained by
``SparseAdam`` beside the model's optimizer) for the others; the labels are those of the one
node type with labels, the *category*, whose masks give the splits.
"""
from __future__ import annotations

from typing import Any

import torch

from dglx_dist.api import DistGraph
from dglx_dist.errors import DatasetFormatError, InvalidValueError

__all__ = ["PlainInputs", "TypedInputs", "inputs_for"]


class PlainInputs:
    """One feature tensor per step (a graph without types)."""

    embeddings: tuple = ()

    def __init__(self, graph: DistGraph):
        self.graph = graph

    def mask(self, split: str):
        """``split``'s mask ("train", "val" or "test") over the labelled nodes."""
        return self.graph.ndata[f"{split}_mask"]

    def seeds(self, split: str):
        """The loader's ``indices`` of ``split``'s nodes."""
        return self.mask(split)

    def x_y(self, input_nodes, output_nodes, blocks) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """The step's inputs, labels and output node ids (rows read through ``g.ndata``
        where the loader did not prefetch them)."""
        ndata = self.graph.ndata
        src = blocks[0].srcdata if blocks else {}
        dst = blocks[-1].dstdata if blocks else {}
        x = src["feat"] if "feat" in src else ndata["feat"][input_nodes]
        y = dst["label"] if "label" in dst else ndata["label"][output_nodes]
        return x, y, output_nodes

    def zero_grad(self) -> None:
        """Nothing sparse to train."""

    def step(self) -> None:
        """Nothing sparse to train."""


class TypedInputs:
    """A dict by node type per step, learnable rows for featureless types (see the module
    docstring).

    Args:
        graph: a graph with node types.
        embed_dim: width of the featureless types' rows (the model's input width for them).
        lr: ``SparseAdam``'s learning rate.
    """

    def __init__(self, graph: DistGraph, embed_dim: int | None, lr: float):
        from dglx_dist.api.embedding import DistEmbedding, SparseAdam

        self.graph, self.category = graph, category_of(graph)
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
        return self.graph.nodes[self.category].data[f"{split}_mask"]

    def seeds(self, split: str) -> dict:
        return {self.category: self.mask(split)}

    def x_y(self, input_nodes, output_nodes, blocks) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """Per node type: prefetched or read ``feat`` rows, or the embedding's rows (a pull
        every rank takes part in, types in the graph's order); the category's labels."""
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
        return x, y, seeds

    def zero_grad(self) -> None:
        if self.optimizer is not None:
            self.optimizer.zero_grad()

    def step(self) -> None:
        if self.optimizer is not None:
            self.optimizer.step()


def category_of(graph: DistGraph) -> str:
    """The node type a typed graph's node classification predicts (``GraphTypes.predicted``),
    checked to have labels."""
    category = graph.pdir.types.predicted()
    labeled = [nt for nt in graph.ntypes if "label" in graph.nodes[nt].data]
    if category is None or category not in labeled:
        raise DatasetFormatError(f"{graph.pdir.path}: node classification needs one node type "
                                 f"with labels (the dataset's category); found "
                                 f"{labeled or 'none'}")
    return category


def inputs_for(graph: DistGraph, embed_dim: int | None, lr: float) -> PlainInputs | TypedInputs:
    """The inputs of ``graph``'s steps (typed when it has node types)."""
    return TypedInputs(graph, embed_dim, lr) if graph.is_typed else PlainInputs(graph)
