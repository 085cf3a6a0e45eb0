"""Benchmark: link prediction on an edge type of a typed graph, distdgl at 2 ranks against
single-process DGL doing the same training (see :mod:`benchmarks.sweeps.hetero_link`).

Usage::

    python -m benchmarks.bench_hetero_link                      # seeds 0,1,2, 40 epochs
    python -m benchmarks.bench_hetero_link --seeds 0 --epochs 5

Prints one JSON object and a markdown table of the held-out MRR per seed and the medians.
"""
import sys

from benchmarks.sweeps import hetero_link
from benchmarks.sweeps.common import run_script

if __name__ == "__main__":
    sys.exit(run_script(hetero_link.main, __doc__))
