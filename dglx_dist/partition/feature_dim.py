"""``feature_dim``: P3's feature partitioning, composed with a structure partitioner: part ``p``
stores column slice ``p`` of *every* node's features (of each featured node type, each type's
width split evenly: :func:`~dglx_dist.partition.base.type_feature_slices`); nodes, edges,
labels and masks are placed by the ``structure`` partitioner (docs/partitioners.md).
"""
from __future__ import annotations

import dataclasses

from dglx_dist.data.dataset import GraphDataset
from dglx_dist.errors import PartitionError
from dglx_dist.partition.base import (PARTITIONERS, Partitioner, PartitionPlan,
                                      type_feature_slices)
from dglx_dist.partition.book import FeatureSlices
from dglx_dist.partition.types import GraphTypes

__all__ = ["FeatureDimPartitioner"]


@PARTITIONERS.register("feature_dim")
class FeatureDimPartitioner(Partitioner):
    """Column slices of the features + the structure partitioner's node ownership."""

    @dataclasses.dataclass(frozen=True)
    class Config:
        structure: str = dataclasses.field(
            default="hash", metadata={"help": "Registered partitioner that places nodes and "
                                              "edges (its default options are used)."})
        seed: int = dataclasses.field(
            default=0, metadata={"help": "Passed to the structure partitioner when it has a "
                                         "'seed' option."})

    def _structure(self) -> Partitioner:
        if self.config.structure == self.registered_name:
            raise PartitionError("feature_dim cannot use itself as its structure partitioner")
        fields = {f.name for f in dataclasses.fields(PARTITIONERS.get(self.config.structure).Config)}
        opts = {"seed": self.config.seed} if "seed" in fields else {}
        return PARTITIONERS.build(self.config.structure, **opts)

    def validate(self, types: GraphTypes, num_parts: int) -> None:
        super().validate(types, num_parts)
        type_feature_slices(types, num_parts)  # every featured type wide enough
        self._structure().validate(types, num_parts)

    def estimate_peak_bytes(self, types: GraphTypes, num_parts: int) -> int:
        column_slice = types.num_nodes * (-(-types.feat_dim // num_parts)) * 4 * 2
        return self._structure().estimate_peak_bytes(types, num_parts) + column_slice

    def plan(self, ds: GraphDataset, num_parts: int) -> PartitionPlan:
        base = self._structure().plan(ds, num_parts)
        if base.feature_slices is not None:
            raise PartitionError(f"structure partitioner {self.config.structure!r} already "
                                 f"splits features; choose one that places whole rows")
        # a typed dataset's view has no columns: its types' slices are type_feature_slices
        slices = FeatureSlices.even(ds.feat_dim, num_parts) if ds.feat_dim else \
            FeatureSlices([0] * (num_parts + 1))
        return dataclasses.replace(base, feature_slices=slices)
