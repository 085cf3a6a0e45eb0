"""The strategy sweeps: each strategy paper's own comparison, beside ``dglx bench``'s.

* :mod:`~benchmarks.sweeps.p3`: distdgl vs p3 as feature and hidden width grow
  (``benchmarks/bench_strategies.py``);
* :mod:`~benchmarks.sweeps.granndis`: granndis vs fullgraph vs distdgl on deep ResGCN+,
  and a memory sweep (``benchmarks/bench_granndis.py``);
* :mod:`~benchmarks.sweeps.dorylus`: dorylus async vs sync vs CPU-only
  (``benchmarks/bench_dorylus.py``);
* :mod:`~benchmarks.sweeps.common`: what their command lines and runs share.

:func:`run_sweeps` runs them for ``python -m benchmarks.sweeps`` at one of ``dglx bench``'s
presets: each parses its script's own command line (:data:`SWEEP_ARGS` for the chosen preset)
and returns its rows tagged with the sweep's name, plus its own figure in ``--out``. They run
on virtual servers, so every sweep row has ``"network": "virtual"``.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any, Callable

from benchmarks.sweeps.common import sweep_dataset

__all__ = ["SWEEPS", "SWEEP_ARGS", "dorylus_sweep", "granndis_sweep", "p3_sweeps", "run_sweeps"]

log = logging.getLogger("dglx_dist.bench")
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
    """P3's feature- and hidden-width sweeps."""
    from benchmarks.sweeps import p3

    args = p3.parse_args(argv + ["--workdir", str(workdir / "sweep-p3")])
    by_feature, by_hidden = p3.sweeps(args)
    p3.plot(by_feature, by_hidden, out / "sweep_p3.png")
    checks = p3.checks(by_feature, by_hidden, args)
    return (_tag(by_feature, "p3-feature", "strategy") + _tag(by_hidden, "p3-hidden", "strategy")
            + _tag(checks, "p3-checks", "check"))


def granndis_sweep(argv: list[str], workdir: Path, out: Path) -> list[dict[str, Any]]:
    """GraNNDis's depth sweep (the memory sweep left to ``benchmarks/bench_granndis.py``)."""
    from benchmarks.sweeps import granndis

    args = granndis.parse_args(argv + ["--workdir", str(workdir / "sweep-granndis")])
    rows = granndis.depth_sweep(args, sweep_dataset(granndis.PRESETS, args,
                                                              args.feat_dim))
    granndis.plot(rows, [], args, out / "sweep_granndis.png")
    return _tag(rows, "granndis-depth", "system") + _tag(granndis.checks(rows, [], args),
                                                         "granndis-checks", "check")


def dorylus_sweep(argv: list[str], workdir: Path, out: Path) -> list[dict[str, Any]]:
    """Dorylus's staleness sweep (async S=0 and S=1 against sync)."""
    from benchmarks.sweeps import dorylus

    args = dorylus.parse_args(argv + ["--workdir", str(workdir / "sweep-dorylus")])
    data = sweep_dataset(dorylus.PRESETS, args, args.feat_dim)
    rows = [dorylus.run(args, system, data) for system in args.systems]
    dorylus.add_derived(rows, args.target)
    dorylus.plot(rows, out / "sweep_dorylus.png")
    return _tag(rows, "dorylus-staleness", "system") + _tag(dorylus.checks(rows),
                                                            "dorylus-checks", "check")


SWEEPS: dict[str, Callable[[list[str], Path, Path], list[dict[str, Any]]]] = {
    "p3": p3_sweeps, "granndis": granndis_sweep, "dorylus": dorylus_sweep}


def run_sweeps(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Runs the sweeps ``args.sweeps`` names (comma-separated, from :data:`SWEEPS`) at preset
    ``args.preset`` into ``args.out``; a failed one is a row."""
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
