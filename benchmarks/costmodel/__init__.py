"""A model of a cluster beyond this machine (issue 20; docs/cluster_model.md): per-strategy
laws of the work and bytes of an epoch (:mod:`.laws`), one rank's unit costs measured here
(:mod:`.units`), and the epoch time they predict once each strategy is calibrated on one
measured run (:mod:`.predict`)."""
from benchmarks.costmodel.laws import LAWS, Work, expansion, halo_rows
from benchmarks.costmodel.predict import Calibration, calibrate, predict
from benchmarks.costmodel.shapes import (Cluster, GraphShape, Units, Workload,
                                         degree_quantiles)

__all__ = ["LAWS", "Calibration", "Cluster", "GraphShape", "Units", "Work", "Workload",
           "calibrate", "degree_quantiles", "expansion", "halo_rows", "predict"]
