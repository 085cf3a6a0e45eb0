"""The Partitioner interface and the registry every partitioner is listed in.

A partitioner looks at a dataset and returns a :class:`PartitionPlan`: a node book (who owns
which node, possibly after relabeling), the relabeling itself, and optionally feature column
slices. Everything after the plan is shared: edges go with their destination node's owner,
sources owned elsewhere become HALO nodes of that part (see :mod:`dglx_dist.partition.layout`),
and the files are written by :mod:`dglx_dist.partition.io`.

Every dataset has node and edge types (:func:`graph_types`: one without is the one-type case);
partitioners plan on its homogeneous view (:mod:`dglx_dist.data.dataset`), so every partitioner
plans a typed one unchanged.

Register your own with ``@PARTITIONERS.register(name)`` on a :class:`Partitioner` subclass with
a frozen nested ``Config``, or through the ``dglx_dist.partitioners`` entry-point group
(docs/partitioners.md, "Your own partitioner", has an example).
"""
from __future__ import annotations

import abc
import dataclasses
from typing import Any

import numpy as np

from dglx_dist.data.dataset import GraphDataset
from dglx_dist.errors import PartitionError
from dglx_dist.partition.book import FeatureSlices, NodeBook
from dglx_dist.partition.types import GraphTypes
from dglx_dist.registry import Registry

__all__ = ["Partitioner", "PartitionPlan", "PARTITIONERS", "dataset_bytes", "graph_types",
           "type_feature_slices"]

PARTITIONERS: Registry["Partitioner"] = Registry("partitioner",
                                                 entry_point_group="dglx_dist.partitioners")
"""The partitioner registry: ``PARTITIONERS.names()``, ``PARTITIONERS.build(name, **options)``."""


@dataclasses.dataclass(frozen=True, eq=False)
class PartitionPlan:
    """What a partitioner decided.

    Attributes:
        book: owner and local ids, in the id space of the partitioned graph.
        orig_ids: ``orig_ids[new_id]`` is the dataset's id of node ``new_id``; None when ids
            are not relabeled.
        feature_slices: column slices, one per part, when features are split by columns; None
            when each part stores whole feature rows of the nodes it owns.
    """

    book: NodeBook
    orig_ids: np.ndarray | None = None
    feature_slices: FeatureSlices | None = None

    def new_ids(self) -> np.ndarray | None:
        """``new_ids[orig_id]`` is the partitioned graph's id of a dataset node (or None)."""
        if self.orig_ids is None:
            return None
        inv = np.empty_like(self.orig_ids)
        inv[self.orig_ids] = np.arange(self.orig_ids.size, dtype=self.orig_ids.dtype)
        return inv


def graph_types(ds: GraphDataset) -> GraphTypes:
    """The node and edge types of a dataset (one without types: DGL's ``_N`` / ``_E``)."""
    return GraphTypes.of({t: (n.num_nodes, n.feat_dim, n.labeled) for t, n in ds.nodes.items()},
                         {et: (e.num_edges, list(e.edata)) for et, e in ds.edges.items()},
                         ds.category)


def type_feature_slices(types: GraphTypes, num_parts: int) -> dict[str, FeatureSlices]:
    """The column slices of each featured node type under a column layout: its width split
    into ``num_parts`` even slices (one line naming a type narrower than ``num_parts``)."""
    narrow = {t: w for t, w in types.feat_dims.items() if 0 < w < num_parts}
    if narrow:
        t, w = min(narrow.items(), key=lambda kv: kv[1])
        raise PartitionError(f"feature_dim: node type {t!r} has {w} feature columns; expected "
                             f"num_parts = {num_parts} <= the width of every node type with "
                             f"features (at most {w} parts)")
    return {t: FeatureSlices.even(w, num_parts) for t, w in types.feat_dims.items() if w}


def dataset_bytes(types: GraphTypes) -> int:
    """Bytes a dataset takes in memory once loaded (edges, features, labels, masks)."""
    return types.num_edges * 16 + types.num_nodes * (types.feat_dim * 4 + 8 + 3)


class Partitioner(abc.ABC):
    """Base class: a registered partitioner with a frozen nested ``Config``."""

    Config: type
    def __init__(self, config: Any, name: str = ""):
        self.config, self.registered_name = config, name

    @abc.abstractmethod
    def plan(self, ds: GraphDataset, num_parts: int) -> PartitionPlan:
        """Decides ownership (and relabeling, feature slices) for ``num_parts`` parts."""

    def validate(self, types: GraphTypes, num_parts: int) -> None:
        """Rejects impossible arguments, from the dataset's types and sizes, before anything
        is read or written.

        Raises:
            PartitionError: the message names the argument, its value and the valid range.
        """
        if isinstance(num_parts, bool) or not isinstance(num_parts, (int, np.integer)):
            raise PartitionError(f"num_parts must be an integer, got {num_parts!r}")
        if not 1 <= num_parts <= max(types.num_nodes, 1):
            raise PartitionError(f"num_parts = {num_parts}; expected 1 <= num_parts <= "
                                 f"num_nodes ({types.num_nodes})")

    def estimate_peak_bytes(self, types: GraphTypes, num_parts: int) -> int:
        """Estimated peak resident memory of partitioning the dataset of ``types``.

        The base estimate covers the loaded dataset, the relabeled edge arrays, the edge order
        by owner and the largest part being written; subclasses add their algorithm's own.
        """
        per_part_rows = -(-types.num_nodes // num_parts)
        layout = types.num_edges * 8 * 5 + types.num_nodes * 8 * 3
        writing = per_part_rows * types.feat_dim * 4 * 2 + -(-types.num_edges // num_parts) * 48
        return dataset_bytes(types) + layout + writing

    def options(self) -> dict[str, Any]:
        """The config as a JSON-ready dict (recorded in the partition manifest)."""
        return {k: list(v) if isinstance(v, tuple) else v
                for k, v in dataclasses.asdict(self.config).items()}
