"""A model of the cluster beyond this machine: each strategy's epoch time and bytes for N servers
x G ranks at a link speed, on a graph of any shape (docs/cluster_model.md).

``validate`` measures one rank's unit costs (sampling, gather, message passing, dense FLOPs,
loopback bytes), the graph's degrees and METIS cut, and ``dglx bench`` on the emulated cluster
at several shapes (default 2x1, 2x2, 4x1, 4x2 on 1 Gbit/s links and 2x1 on 10 Gbit/s); it
calibrates each strategy on one run (per-step overhead, byte factors), predicts all of them and
prints predicted vs measured. ``predict`` uses that calibration for a papers100M- or
products-shaped graph on 1..64 servers. ``memory`` runs every strategy at 3 graph sizes and
fits each one's peak memory per rank per node and per edge (the largest graph that fits here).

Usage::

    python -m benchmarks.cluster_model validate --plot model_check.png     # ~11 min here
    python -m benchmarks.cluster_model predict --graph papers --link-gbit 10 --plot papers.png
    python -m benchmarks.cluster_model memory --plot memory.png

Prints one JSON object and a markdown table.
"""
import sys

from benchmarks.costmodel.main import main
from benchmarks.sweeps.common import run_script

if __name__ == "__main__":
    sys.exit(run_script(main, __doc__))
