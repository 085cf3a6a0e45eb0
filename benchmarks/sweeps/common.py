"""What the strategy sweeps share: their command lines' common options, the preset (a
:class:`~dglx_dist.bench.presets.ScriptPreset`) filling what was not given, the synthetic graph
of a run, the :class:`~dglx_dist.bench.harness.Setup` of a run, the JSON result and the
scripts' entry point."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any, Callable

from dglx_dist.bench.harness import Setup
from dglx_dist.bench.presets import ScriptPreset, choose_network
from dglx_dist.bench.presets import BENCH_RUN

__all__ = ["add_common", "emit_json", "emit_text", "parse_with_preset", "run_script",
           "sweep_dataset", "sweep_presets", "sweep_setup"]

NUM_CLASSES = 16
"""Classes of every sweep's synthetic graph."""


def add_common(p: argparse.ArgumentParser, workdir: str,
               plot_help: str = "write a PNG here") -> None:
    """``--workdir --out --plot --timeout --network --seed``."""
    p.add_argument("--workdir", type=Path, default=Path(workdir))
    p.add_argument("--out", type=Path, help="also write the JSON here")
    p.add_argument("--plot", type=Path, help=plot_help)
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    p.add_argument("--network", choices=("virtual", "1g", "10g"), default="virtual",
                   help="virtual servers on loopback, or the emulated cluster's links")
    p.add_argument("--seed", type=int, default=0)


def parse_with_preset(p: argparse.ArgumentParser, argv: list[str] | None,
                      presets: dict[str, ScriptPreset]) -> argparse.Namespace:
    """Parses ``argv`` with the chosen ``--preset``'s values as the defaults of the options
    not given; makes the work directory."""
    chosen, _ = p.parse_known_args(argv)
    p.set_defaults(**presets[chosen.preset].defaults())
    args = p.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    return args


def sweep_presets(feat_dim: int, **sizes: tuple[int, int, int]) -> dict[str, ScriptPreset]:
    """A sweep's presets by name: ``(num_nodes, num_edges, epochs)`` each, the synthetic
    graphs ``feat_dim`` wide with :data:`NUM_CLASSES` classes."""
    from dglx_dist.data.synthetic import SyntheticConfig

    return {name: ScriptPreset(SyntheticConfig(num_nodes=n, num_edges=e, feat_dim=feat_dim,
                                               num_classes=NUM_CLASSES), epochs=epochs)
            for name, (n, e, epochs) in sizes.items()}


def sweep_dataset(presets: dict[str, ScriptPreset], args: argparse.Namespace,
                  feat_dim: int) -> Path:
    """The synthetic graph of ``args``' preset (``NUM_CLASSES`` classes, ``--seed``) with
    ``feat_dim`` features, generated once and cached in ``args.workdir``."""
    return presets[args.preset].dataset(args.seed, args.workdir, feat_dim=feat_dim)


def sweep_setup(args: argparse.Namespace, data: Path, run: dict[str, dict[str, Any]],
                **fields: Any) -> Setup:
    """A run of a sweep: ``data`` on ``args``' network (virtual servers unless it says an
    emulated link), its work directory and timeout, the benchmark's run config with the
    sections' fields of ``run`` (seed 0, validated every epoch unless it says otherwise),
    ``fields`` for the rest of the setup."""
    config = BENCH_RUN.updated(loop={"seed": 0, "eval_every": 1}).updated(**run)
    return Setup(data=data, num_classes=NUM_CLASSES, run=config,
                 network=choose_network(args.network),
                 timeout=args.timeout, workdir=args.workdir, **fields)


def emit_json(result: dict[str, Any], out: Path | None) -> None:
    """Writes the result as JSON to stdout and, with ``out``, to that file too."""
    text = json.dumps(result, indent=2)
    sys.stdout.write(text + "\n")
    if out:
        out.write_text(text)


def emit_text(text: str) -> None:
    """Writes ``text`` (the markdown tables) and a newline to stdout."""
    sys.stdout.write(text + "\n")


def run_script(main: Callable[[list[str] | None, str], int], doc: str) -> int:
    """A sweep script's entry point: logging to stderr, then ``main`` with the script's
    command line and the first line of its docstring as the description."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    return main(None, doc.splitlines()[0])
