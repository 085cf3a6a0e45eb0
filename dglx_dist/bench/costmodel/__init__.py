"""A model of a cluster beyond this machine (issue 20; docs/cluster_model.md): per-strategy
laws of the work and bytes of an epoch (:mod:`.laws`), one rank's unit costs measured here
(:mod:`.units`), and the epoch time they predict once each strategy is calibrated on one
measured run (:mod:`.predict`)."""
from dglx_dist.bench.costmodel.laws import LAWS, Work, expansion, halo_rows
from dglx_dist.bench.costmodel.predict import Calibration, calibrate, predict
from dglx_dist.bench.costmodel.shapes import (Cluster, GraphShape, Units, Workload,
                                              degree_quantiles)

__all__ = ["LAWS", "Calibration", "Cluster", "GraphShape", "Units", "Work", "Workload",
           "calibrate", "degree_quantiles", "expansion", "halo_rows", "predict"]
