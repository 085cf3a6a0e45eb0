"""Benchmark: granndis against the full-graph baseline and distdgl (GraNNDis's evaluation shape).

Every run is ``dglx train`` under torchrun with 4 processes as 2 servers x 2 ranks (virtual
servers on loopback, or ``--network 1g|10g``: the emulated cluster's links),
training ResGCN+ (GraphConv, hidden ``--hidden``, dropout 0.5, Adam) on a synthetic DC-SBM
graph; each strategy partitions it its own way (cached):

* ``granndis``: shared preloading with EAS (m=1, k=15), R=1 (full-graph);
* ``fullgraph``: the plain full-graph baseline, halo exchange with every rank each layer
  (PipeGCN-style, without PipeGCN's staleness);
* ``distdgl``: sampled mini-batches (``--fanout`` per layer, batch 1000 per rank).

Depths ``--depths`` (default 3 and 28). Per run: epoch time (mean without the first epoch),
bytes sent inter- and intra-server per epoch (all ranks), activation memory per rank (bytes
autograd saves in one forward, the largest rank), peak RSS, validation accuracy after every
epoch and time to accuracy (summed epoch times until val_acc first reaches ``--target`` x the
best any system reached at that depth). The bytes are exact, but loopback is as fast as shared
memory, so the epoch time on slow inter-server links is *modelled*: measured time plus each
server's inter-server bytes over the link (``--links``, no overlap assumed); issue 7's
emulated cluster will measure it.

Memory sweep (``--mem-depths`` at ``--hidden``, one epoch each): the largest depth x width a
system trains with every rank's activation memory under ``--mem-cap-mb`` (granndis may pick
any ``--mem-r`` co-batch count, which is the point of cooperative batching).

Usage::

    python -m benchmarks.bench_granndis --preset tiny                    # a few minutes
    python -m benchmarks.bench_granndis --preset small --plot out.png

Prints one JSON object and markdown tables; ``--plot`` draws bytes, time and memory.
"""
import sys

from benchmarks.sweeps import granndis
from benchmarks.sweeps.common import run_script

if __name__ == "__main__":
    sys.exit(run_script(granndis.main, __doc__))
