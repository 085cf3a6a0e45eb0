"""``dglx bench`` plus the strategy sweeps, which need this source checkout's scripts.

    python scripts/bench.py --preset tiny --sweeps          # dglx bench + P3/GraNNDis/Dorylus
    python scripts/bench.py --preset tiny --sweeps p3       # one sweep

Every option is ``dglx bench``'s (``dglx bench --help``; docs/benchmarks.md); this script adds
what ``--sweeps`` runs (:func:`dglx_dist.bench.sweeps.run_sweeps`): each sweep parses its
script's own command line (``dglx_dist.bench.sweeps.SWEEP_ARGS`` for the chosen preset), runs
the functions of its module in :mod:`dglx_dist.bench.sweeps`, and returns its rows tagged with
the sweep's name, plus its own figure in ``--out``:

* ``p3-feature`` / ``p3-hidden``: ``bench_strategies`` (distdgl vs p3, feature width at hidden
  32, hidden width at a fixed F);
* ``granndis-depth``: ``bench_granndis`` (granndis vs fullgraph vs distdgl, ResGCN+ depths);
* ``dorylus-staleness``: ``bench_dorylus`` (async S=0, async S=1, sync).

These scripts run on virtual servers (``DGLX_VIRTUAL_SERVERS``, loopback), so every sweep row
has ``"network": "virtual"``. Exit code 0 when every selected system ran, 1 otherwise, 2 for
bad options.
"""
from __future__ import annotations

import argparse
import logging
import shlex
import sys

from dglx_dist.bench.sweeps import run_sweeps
from dglx_dist.cli.bench import add_arguments, run
from dglx_dist.errors import DglxError

log = logging.getLogger("bench")


def main(argv: list[str] | None = None) -> int:
    """Runs ``dglx bench`` with the sweeps; returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return run(args, "python scripts/bench.py " + shlex.join(argv), run_sweeps)
    except DglxError as exc:
        log.error("%s", exc)
        return 2


if __name__ == "__main__":
    sys.exit(main())
