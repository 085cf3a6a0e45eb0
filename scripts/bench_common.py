"""Command-line scaffolding the strategy benchmarks share (bench_strategies, bench_granndis,
bench_dorylus): the common options, presets filling what was not given, the JSON result."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_common(p: argparse.ArgumentParser, workdir: str, plot_help: str = "write a PNG here"
               ) -> None:
    """``--workdir --out --plot --timeout --seed``."""
    p.add_argument("--workdir", type=Path, default=Path(workdir))
    p.add_argument("--out", type=Path, help="also write the JSON here")
    p.add_argument("--plot", type=Path, help=plot_help)
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    p.add_argument("--seed", type=int, default=0)


def parse_with_preset(p: argparse.ArgumentParser, argv: list[str] | None,
                      presets: dict[str, dict[str, Any]]) -> argparse.Namespace:
    """Parses ``argv``; the chosen ``--preset`` fills every option left unset; makes the
    work directory."""
    args = p.parse_args(argv)
    for key, value in presets[args.preset].items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    args.workdir.mkdir(parents=True, exist_ok=True)
    return args


def emit_json(result: dict[str, Any], out: Path | None) -> None:
    """Prints the result as JSON and, with ``out``, writes it there too."""
    text = json.dumps(result, indent=2)
    print(text)
    if out:
        out.write_text(text)
