"""Benchmark: dorylus async (S=0) vs dorylus sync ("pipe") vs the CPU-only variant.

Every run is ``dglx train --strategy dorylus --model gcn`` (or ``--model gat``) under torchrun
with 2 graph servers (2 ranks) on the same synthetic graph and METIS partitions (cached), same
model, same seed:

* ``async``: bounded asynchrony, staleness 0, ``local`` executor (separate worker processes);
* ``sync``: a barrier at every layer (exact full-graph GCN), ``local`` executor;
* ``cpu``: the same pipeline with every tensor task run on the graph server itself
  (``inline`` executor: the paper's CPU-only variant; no invocations, no executor bytes);
* ``async-s1`` (only when asked for, e.g. by ``python -m benchmarks.sweeps``): staleness 1.

Per run: epoch time (mean without the first epoch), epochs until validation accuracy reaches
``--target`` x the best any run reached, invocations, relaunches and bytes to/from the executor
per epoch (all graph servers), estimated cost per epoch and Dorylus's value = 1/(time x cost).
The paper's target: async per-epoch time at least 15% below sync, with epochs-to-accuracy
within +10%. On a 2-core machine the worker processes and the graph servers share the cores,
so times are this machine's, not a cluster's.

Usage::

    python -m benchmarks.bench_dorylus --preset tiny            # a few minutes
    python -m benchmarks.bench_dorylus --preset small --out r.json --plot r.png

Prints one JSON object and markdown tables; ``--plot`` draws epoch time and accuracy per epoch.
"""
import sys

from benchmarks.sweeps import dorylus
from benchmarks.sweeps.common import run_script

if __name__ == "__main__":
    sys.exit(run_script(dorylus.main, __doc__))
