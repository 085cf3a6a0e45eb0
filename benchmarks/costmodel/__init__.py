"""The research tooling of the cluster model (issue 20; docs/cluster_model.md): one rank's
unit costs measured here with DGL (:mod:`.measure`), each strategy calibrated on one measured
run (:mod:`.predict`) and checked on others (:mod:`.validate`), memory fits (:mod:`.memory`,
:mod:`.typed_memory`). Each strategy's law ships beside it in the package (its
cost, :class:`dglx_dist.strategies.cost.Cost`), the shapes in :mod:`dglx_dist.strategies.cost`
and the phases of an epoch in :mod:`dglx_dist.planner` (behind ``dglx plan``); they are
re-exported here, the laws by strategy name (:data:`LAWS`)."""
from benchmarks.costmodel.predict import calibrate, costs, predict
from dglx_dist.planner.predict import Calibration
from dglx_dist.strategies.cost.counts import Work, expansion, halo_rows
from dglx_dist.strategies.cost.shapes import Cluster, GraphShape, Units, Workload, degree_quantiles

LAWS = {name: cost.epoch for name, cost in costs().items()}
"""Each registered strategy's epoch law, by name (those that declare a cost)."""

__all__ = ["LAWS", "Calibration", "Cluster", "GraphShape", "Units", "Work", "Workload",
           "calibrate", "degree_quantiles", "expansion", "halo_rows", "predict"]
