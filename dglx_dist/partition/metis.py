"""``metis``: DistDGL's partitioner, METIS with multi-constraint balancing and relabeling.

METIS runs through :mod:`~dglx_dist.partition.metis_lib` (``backend="dgl"``: DGL's bundled call,
in DGL's door, :mod:`dglx_dist.dgl.metis`)
with DistDGL's constraints laid out as DGL's ``metis_partition_assignment`` lays them out (a
node's category is its split, crossed with its node type on a typed graph, then with ``edges``
each category's in-degree). With ``groups = G > 1`` the graph is cut into ``G`` groups, then
each group's induced subgraph into ``num_parts / G`` parts (parts ``g*P/G .. (g+1)*P/G - 1``
belong to group ``g``). Node ids are then relabeled so that part ``p``'s core nodes are the
range ``[offsets[p], offsets[p+1])``, original order kept inside a part. docs/partitioners.md
says more (what each constraint buys, measurements).
"""
from __future__ import annotations

import dataclasses
import logging

import numpy as np

from dglx_dist.data.convert import require_dgl
from dglx_dist.data.dataset import GraphDataset
from dglx_dist.errors import InvalidValueError, PartitionError
from dglx_dist.partition.base import PARTITIONERS, Partitioner, PartitionPlan
from dglx_dist.partition.book import RangeBook
from dglx_dist.partition.metis_lib import part_graph, symmetric_csr
from dglx_dist.partition.types import GraphTypes

__all__ = ["MetisPartitioner", "BALANCE_CHOICES"]

log = logging.getLogger(__name__)
BALANCE_CHOICES = ("train", "val", "test", "edges")
_OBJECTIVES = ("cut", "vol")
_BACKENDS = ("auto", "libmetis", "dgl")


@PARTITIONERS.register("metis")
class MetisPartitioner(Partitioner):
    """Min edge-cut METIS partitions balanced on user-selected constraints."""

    @dataclasses.dataclass(frozen=True)
    class Config:
        balance: tuple[str, ...] = dataclasses.field(
            default=BALANCE_CHOICES, metadata={
                "help": "Constraints balanced across parts besides the node count: any of "
                        "train, val, test (nodes of each split) and edges (in-degree). "
                        "Comma-separated on the command line; empty for nodes only."})
        objective: str = dataclasses.field(
            default="cut", metadata={"help": "METIS objective: 'cut' (edge cut) or 'vol' "
                                             "(communication volume)."})
        backend: str = dataclasses.field(
            default="auto", metadata={
                "help": "'libmetis' (the METIS library, reproducible; 'auto' is it) or 'dgl' "
                        "(DGL's bundled call: the same constraints, parts that vary from run "
                        "to run)."})
        seed: int = dataclasses.field(
            default=0, metadata={"help": "METIS's random seed (libmetis): the same dataset, "
                                         "options and seed give the same parts."})
        ncuts: int = dataclasses.field(
            default=2, metadata={"help": "Partitionings METIS computes from different random "
                                         "starts, the smallest cut kept (libmetis; each adds "
                                         "about one METIS run's time)."})
        groups: int = dataclasses.field(
            default=1, metadata={
                "help": "Hierarchical split: first into this many groups (servers), then each "
                        "group into num_parts/groups parts (its ranks); 1: one flat split."})

        def __post_init__(self):
            bad = [b for b in self.balance if b not in BALANCE_CHOICES]
            if bad:
                raise InvalidValueError(f"balance {bad} not understood; choose from "
                                        f"{BALANCE_CHOICES}")
            if self.objective not in _OBJECTIVES:
                raise InvalidValueError(f"objective {self.objective!r}; expected one of "
                                        f"{_OBJECTIVES}")
            if self.backend not in _BACKENDS:
                raise InvalidValueError(f"backend {self.backend!r}; expected one of {_BACKENDS}")
            if self.seed < 0 or self.ncuts < 1:
                raise InvalidValueError(f"seed {self.seed} / ncuts {self.ncuts}: need seed >= 0 "
                                        "and ncuts >= 1")
            if self.groups < 1:
                raise InvalidValueError(f"groups {self.groups}: must be >= 1")

    def validate(self, types: GraphTypes, num_parts: int) -> None:
        super().validate(types, num_parts)
        if num_parts % self.config.groups:
            raise PartitionError(f"metis with groups={self.config.groups}: {num_parts} parts do "
                                 f"not split evenly into the groups; use a multiple of "
                                 f"{self.config.groups} parts")

    def plan(self, ds: GraphDataset, num_parts: int) -> PartitionPlan:
        groups, masks = self.config.groups, _masks(ds)
        if groups == 1:
            assignment = self._assign(ds.src, ds.dst, masks, num_parts)
        else:
            top = self._assign(ds.src, ds.dst, masks, groups)
            per = num_parts // groups
            assignment = np.empty(ds.num_nodes, dtype=np.int64)
            for g in range(groups):
                nodes = np.flatnonzero(top == g)
                local = np.full(ds.num_nodes, -1, dtype=np.int64)
                local[nodes] = np.arange(nodes.size)
                inside = (local[ds.src] >= 0) & (local[ds.dst] >= 0)
                sub = self._assign(local[ds.src[inside]], local[ds.dst[inside]],
                                   {k: m[nodes] for k, m in masks.items()}, per)
                assignment[nodes] = g * per + sub
        orig_ids = np.argsort(assignment, kind="stable").astype(np.int64)
        counts = np.bincount(assignment, minlength=num_parts)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return PartitionPlan(RangeBook(offsets), orig_ids=orig_ids)

    def estimate_peak_bytes(self, types: GraphTypes, num_parts: int) -> int:
        # the symmetric CSR (and DGL's graph with backend dgl) plus METIS's coarsening levels
        ncon = 1 + len([b for b in self.config.balance if b != "edges"])
        ncon *= len(types.ntypes)
        ncon *= 2 if "edges" in self.config.balance else 1
        metis = types.num_edges * 8 * 12 + types.num_nodes * 8 * (ncon * 3 + 10)
        return super().estimate_peak_bytes(types, num_parts) + metis

    def _assign(self, src: np.ndarray, dst: np.ndarray, masks: dict[str, np.ndarray],
                num_parts: int) -> np.ndarray:
        """METIS parts of the graph ``src -> dst`` over ``len(masks["train"])`` nodes."""
        num_nodes, backend = masks["train"].size, self.config.backend
        if num_parts == 1:
            return np.zeros(num_nodes, dtype=np.int64)
        categories = _categories(masks, self.config.balance)
        log.debug("METIS (%s) into %d parts, balancing nodes%s%s",
                 "DGL" if backend == "dgl" else f"libmetis, seed {self.config.seed}", num_parts,
                 " per node type" if masks["ntype"].any() else "",
                 "".join(f", {b}" for b in self.config.balance))
        if backend == "dgl":
            return self._dgl_assignment(src, dst, num_nodes, categories, num_parts)
        indptr, indices = symmetric_csr(src, dst, num_nodes)
        vwgt = _weights(categories, np.bincount(dst, minlength=num_nodes),
                        "edges" in self.config.balance)
        return part_graph(indptr, indices, num_parts, vwgt=vwgt,
                          objective=self.config.objective, seed=self.config.seed,
                          ncuts=self.config.ncuts)

    def _dgl_assignment(self, src: np.ndarray, dst: np.ndarray, num_nodes: int,
                        categories: np.ndarray | None, num_parts: int) -> np.ndarray:
        # a DGL-free install (docs/install.md: the core layers) is refused in one line
        require_dgl("metis backend 'dgl' (DGL's METIS)", "or use backend 'libmetis'")
        from dglx_dist.dgl.metis import metis_assignment  # noqa: PLC0415 - DGL's door

        return metis_assignment(src, dst, num_nodes, categories, num_parts,
                                balance_edges="edges" in self.config.balance,
                                objective=self.config.objective)


def _masks(ds: GraphDataset) -> dict[str, np.ndarray]:
    """The per-node arrays METIS balances: the splits, and the node type."""
    return {"train": ds.train, "val": ds.val, "test": ds.test, "ntype": ds.node_types()}


def _categories(split_masks: dict[str, np.ndarray],
                balance: tuple[str, ...]) -> np.ndarray | None:
    """DGL's ``balance_ntypes``: each node's category, its first split among those balanced
    (0: none), crossed with its node type; None when there is nothing to balance (no split,
    one node type)."""
    masks = [split_masks[m] for m in ("train", "val", "test") if m in balance]
    cat = np.zeros(split_masks["train"].size, dtype=np.int64)
    for i, mask in enumerate(masks, start=1):
        cat[mask & (cat == 0)] = i
    cat += split_masks["ntype"] * (len(masks) + 1)
    return cat if masks or cat.any() else None


def _weights(categories: np.ndarray | None, in_degree: np.ndarray,
             edges: bool) -> np.ndarray | None:
    """DGL's multi-constraint vertex weights: a 0/1 column per category present (in
    increasing order), then, with ``edges``, each category's in-degrees (the in-degree alone
    without categories); None when there is nothing to weigh (the vertex count)."""
    columns = []
    if categories is not None:
        columns = [(categories == c).astype(np.int64) for c in np.unique(categories)]
    if edges:
        columns += [c * in_degree for c in columns] if columns else [in_degree.astype(np.int64)]
    return np.stack(columns, 1) if columns else None
