"""Benchmark: strategies side by side on the same synthetic graphs (P3's evaluation shape).

Every run is ``dglx train`` under torchrun with 4 processes as 2 servers x 2 ranks (virtual
servers on loopback, or ``--network 1g|10g``: the emulated cluster's links), the
same 2-layer GraphSAGE (mean), fanouts 10,25 (25 neighbours of a seed, then 10 of each: P3's
"(25,10)"), batch 1000 per rank, Adam; each strategy partitions the dataset its own way
(cached). Two sweeps:

* feature width: F in ``--features`` (default 64, 256, 1024) at hidden 32;
* hidden width: ``--hiddens`` (default 32..512) at F = 256, to find where P3 stops paying off
  (its layer-1 exchange grows with the hidden width, distdgl's feature pull does not).

Per run: epoch time (mean without the first epoch), bytes sent intra- and inter-server per
epoch (all ranks), test accuracy. Checks: P3's inter-server bytes at F=1024, hidden 32 are at
most 1/8 of distdgl's; P3's bytes grow by at most 25% from the smallest to the largest F.

Usage::

    python -m benchmarks.bench_strategies --preset tiny                  # ~3 min
    python -m benchmarks.bench_strategies --preset small --plot out.png  # ~10 min

Prints one JSON object and markdown tables; ``--plot`` draws bytes and epoch time per sweep.
"""
import sys

from benchmarks.sweeps import p3
from benchmarks.sweeps.common import run_script

if __name__ == "__main__":
    sys.exit(run_script(p3.main, __doc__))
