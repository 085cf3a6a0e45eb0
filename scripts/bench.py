"""``dglx bench`` plus the strategy sweeps, which need this source checkout's scripts.

    python scripts/bench.py --preset tiny --sweeps          # dglx bench + P3/GraNNDis/Dorylus
    python scripts/bench.py --preset tiny --sweeps p3       # one sweep

Every option is ``dglx bench``'s (``dglx bench --help``; docs/benchmarks.md); this script adds
what ``--sweeps`` runs: each sweep parses its script's own command line (with the arguments of
:data:`SWEEP_ARGS` for the chosen preset), runs that script's functions, and returns its rows
tagged with the sweep's name, plus its own figure in ``--out``:

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
from pathlib import Path
from typing import Any, Callable

from dglx_dist.cli.bench import add_arguments, run
from dglx_dist.errors import DglxError

log = logging.getLogger("bench")
# each script's command line per preset (its own preset fills the rest)
SWEEP_ARGS: dict[str, dict[str, list[str]]] = {
    "tiny": {"p3": ["--preset", "tiny", "--features", "64,1024", "--hiddens", "32,512",
                    "--sweep-feat", "1024"],
             "granndis": ["--preset", "tiny", "--depths", "2,8", "--mem-depths", "",
                          "--epochs", "3"],
             "dorylus": ["--preset", "tiny", "--systems", "async,async-s1,sync",
                         "--epochs", "10"]},
    "small": {"p3": ["--preset", "small", "--features", "64,256,1024",
                     "--hiddens", "32,64,128,256,512"],
              "granndis": ["--preset", "small", "--depths", "3,8", "--mem-depths", ""],
              "dorylus": ["--preset", "small", "--systems", "async,async-s1,sync"]},
    "large": {"p3": ["--preset", "small"], "granndis": ["--preset", "small"],
              "dorylus": ["--preset", "small", "--systems", "async,async-s1,sync"]},
}


def _tag(rows: list[dict], sweep: str, system_key: str) -> list[dict[str, Any]]:
    return [{"sweep": sweep, "system": r.get(system_key), "network": "virtual", **r}
            for r in rows]


def p3_sweeps(argv: list[str], workdir: Path, out: Path) -> list[dict[str, Any]]:
    """P3's feature- and hidden-width sweeps (``bench_strategies``)."""
    import bench_strategies as bs

    args = bs.parse_args(argv + ["--workdir", str(workdir / "sweep-p3")])
    by_feature, by_hidden = bs.sweeps(args)
    bs.plot(by_feature, by_hidden, out / "sweep_p3.png")
    checks = bs.checks(by_feature, by_hidden, args)
    return (_tag(by_feature, "p3-feature", "strategy") + _tag(by_hidden, "p3-hidden", "strategy")
            + _tag(checks, "p3-checks", "check"))


def granndis_sweep(argv: list[str], workdir: Path, out: Path) -> list[dict[str, Any]]:
    """GraNNDis's depth sweep (``bench_granndis``, the memory sweep left to that script)."""
    import bench_granndis as bg

    args = bg.parse_args(argv + ["--workdir", str(workdir / "sweep-granndis")])
    data = bg.dataset(args)
    rows = [bg.run(args, system, data, depth, args.epochs)
            for depth in args.depths for system in args.systems]
    bg.add_derived(rows, args)
    bg.plot(rows, [], args, out / "sweep_granndis.png")
    return _tag(rows, "granndis-depth", "system") + _tag(bg.checks(rows, [], args),
                                                         "granndis-checks", "check")


def dorylus_sweep(argv: list[str], workdir: Path, out: Path) -> list[dict[str, Any]]:
    """Dorylus's staleness sweep (``bench_dorylus``: async S=0 and S=1 against sync)."""
    import bench_dorylus as bd
    from dglx_dist.bench.datasets import synthetic_dataset
    from dglx_dist.data.synthetic import SyntheticConfig

    args = bd.parse_args(argv + ["--workdir", str(workdir / "sweep-dorylus")])
    data = synthetic_dataset(SyntheticConfig(num_nodes=args.num_nodes, num_edges=args.num_edges,
                                             feat_dim=args.feat_dim, num_classes=16,
                                             seed=args.seed), args.workdir)
    rows = [bd.run(args, system, data) for system in args.systems]
    bd.add_derived(rows, args.target)
    bd.plot(rows, out / "sweep_dorylus.png")
    return _tag(rows, "dorylus-staleness", "system") + _tag(bd.checks(rows), "dorylus-checks",
                                                            "check")


SWEEPS: dict[str, Callable[[list[str], Path, Path], list[dict[str, Any]]]] = {
    "p3": p3_sweeps, "granndis": granndis_sweep, "dorylus": dorylus_sweep}


def run_sweeps(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Runs the sweeps ``--sweeps`` names (all of :data:`SWEEPS` by default) into ``--out``;
    a failed one is a row."""
    from tqdm import tqdm

    preset, workdir, out = args.preset, args.out / "work", args.out
    rows: list[dict[str, Any]] = []
    for name in tqdm(args.sweeps.split(","), desc="sweeps", unit="sweep"):
        log.info("sweep %s: %s", name, " ".join(SWEEP_ARGS[preset][name]))
        try:
            rows += SWEEPS[name](list(SWEEP_ARGS[preset][name]), workdir, out)
        except Exception as exc:  # noqa: BLE001  (reported as a row; the others still run)
            log.error("sweep %s failed: %s", name, exc)
            rows.append({"sweep": name, "error": f"{type(exc).__name__}: {exc}"[:2000]})
    return rows


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
