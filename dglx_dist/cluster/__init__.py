"""Emulating a cluster of servers on one Linux machine (network namespaces, shaped links), and
ending a process group with everything it started (:func:`~dglx_dist.cluster.procs.kill_group`)."""
from dglx_dist.cluster.emulate import (PRESETS, EmulatedCluster, EmulationUnavailable, LinkSpec,
                                       check_available, run_job)

__all__ = ["PRESETS", "EmulatedCluster", "EmulationUnavailable", "LinkSpec", "check_available",
           "run_job"]
