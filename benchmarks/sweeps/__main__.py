"""``python -m benchmarks.sweeps``: the P3, GraNNDis and Dorylus sweeps at one of ``dglx
bench``'s presets (:data:`~benchmarks.sweeps.SWEEP_ARGS`), into ``--out``: results.jsonl (one
row per run or check, tagged with its sweep), results.md (a table per sweep, also on stdout) and
one ``sweep_*.png`` per sweep (matplotlib, the ``plot`` extra). Run from the repository root::

    python -m benchmarks.sweeps --preset tiny --out sweeps-out            # ~5 min on 2 cores
    python -m benchmarks.sweeps --preset small --sweeps p3,dorylus --out sweeps-out

Each sweep's own options (other graphs, widths, depths, networks) are its script's:
``python -m benchmarks.bench_strategies`` (p3), ``bench_granndis``, ``bench_dorylus``.
The exit code is 1 when a sweep failed (its row says why), else 0.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from benchmarks.sweeps import SWEEP_ARGS, SWEEPS, run_sweeps
from dglx_dist.bench.report import write_jsonl
from dglx_dist.report import markdown_table

SWEEP_COLUMNS = {  # per sweep: the columns worth a table
    "p3-feature": ("system", "feat_dim", "hidden", "epoch_time", "bytes_inter", "bytes_intra",
                   "test_acc"),
    "p3-hidden": ("system", "feat_dim", "hidden", "epoch_time", "bytes_inter", "bytes_intra",
                  "test_acc"),
    "granndis-depth": ("system", "depth", "epoch_time", "epoch_time_1gbit", "bytes_inter",
                       "bytes_intra", "saved_mb", "time_to_acc", "test_acc"),
    "dorylus-staleness": ("system", "epoch_time", "epochs_to_acc", "test_acc", "invocations",
                          "mb_between_servers", "cost_usd", "value"),
}


def _cells(r: dict[str, Any], columns) -> dict[str, Any]:
    if "error" in r:
        return {"system": r.get("system") or r.get("sweep"),
                "note": r["error"].splitlines()[0][:160]}
    out = {c: r.get(c) for c in columns}
    for c in ("bytes_inter", "bytes_intra"):
        if isinstance(out.get(c), int):
            out[c] = f"{out[c]:,}"
    return {c: "" if v is None else v for c, v in out.items()}


def markdown(rows: list[dict[str, Any]], command: str) -> str:
    """A table per sweep (a checks table: its own keys; a failed sweep: its error)."""
    text = [f"# sweeps: {command}"]
    for name in dict.fromkeys(r["sweep"] for r in rows):
        mine = [r for r in rows if r["sweep"] == name]
        cols = SWEEP_COLUMNS.get(name) or tuple(
            k for k in mine[0] if k not in ("sweep", "system", "network")) or ("note",)
        if any("error" in r for r in mine) and "note" not in cols:
            cols = ("system", *[c for c in cols if c != "system"], "note")
        text += ["", f"## sweep {name}", "",
                 markdown_table([_cells(r, cols) for r in mine], cols)]
    return "\n".join(text) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=sorted(SWEEP_ARGS), default="tiny")
    p.add_argument("--sweeps", default=",".join(SWEEPS),
                   help=f"comma-separated, from {', '.join(SWEEPS)} (default: all)")
    p.add_argument("--out", type=Path, default=Path("sweeps-out"),
                   help="the results directory (cached datasets in work/)")
    args = p.parse_args(argv)
    unknown = [s for s in args.sweeps.split(",") if s not in SWEEPS]
    if unknown or not args.sweeps:
        p.error(f"--sweeps: unknown {', '.join(unknown) or '(none)'}; choose from "
                f"{', '.join(SWEEPS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    (args.out / "work").mkdir(parents=True, exist_ok=True)
    rows = run_sweeps(args)
    write_jsonl(rows, args.out / "results.jsonl")
    text = markdown(rows, "python -m benchmarks.sweeps " + " ".join(argv))
    (args.out / "results.md").write_text(text)
    sys.stdout.write(text)
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    sys.exit(main())
