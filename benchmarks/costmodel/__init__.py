"""The research tooling of the cluster model (issue 20; docs/cluster_model.md): one rank's
unit costs measured here with DGL (:mod:`.measure`), each strategy calibrated on one measured
run (:mod:`.predict`) and checked on others (:mod:`.validate`), memory fits (:mod:`.memory`,
:mod:`.typed_memory`). The laws, the shapes and the prediction ship in the package
(:mod:`dglx_dist.planner`, behind ``dglx plan``); they are re-exported here."""
from benchmarks.costmodel.predict import calibrate
from dglx_dist.planner.laws import LAWS, Work, expansion, halo_rows
from dglx_dist.planner.predict import Calibration, predict
from dglx_dist.planner.shapes import Cluster, GraphShape, Units, Workload, degree_quantiles

__all__ = ["LAWS", "Calibration", "Cluster", "GraphShape", "Units", "Work", "Workload",
           "calibrate", "degree_quantiles", "expansion", "halo_rows", "predict"]
