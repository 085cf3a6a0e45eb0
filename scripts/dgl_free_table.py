"""Without DGL beside with DGL (issue 59; docs/install.md, "Without DGL beside with DGL"):
each strategy trains Cora (node classification, 30 epochs) at 2 and at 4 ranks, and each
strategy with typed graphs trains ``dglx datagen --preset mag-small`` at 2 ranks, once with
``import dgl`` failing in every process of the job (the package's convs on its own blocks) and
once on DGL's path (DGL importable, ``--convs dgl``: dgl.nn's convs on DGL's blocks).

Each run is one ``torchrun ... -m dglx_dist train`` of scripts/gpu_checklist.py (its ``Check``
and ``run``), one rank per virtual server (DGLX_VIRTUAL_SERVERS), OMP_NUM_THREADS=1, the
blocked and the unblocked run of a row one after the other. Prints one JSON line and a
markdown table (test accuracy without, with, difference); writes ``table.json`` and the logs
under ``--out``. Exit status 1 when any run failed or a blocked run saw DGL.

Usage (from the repository root, the package and DGL importable)::

    python scripts/dgl_free_table.py --out /tmp/dgl-free
    python scripts/dgl_free_table.py --epochs 2 --ranks 2 --only cora   # a quick look
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_checklist import STRATEGIES, Check, _capabilities, run  # noqa: E402

SAID = "sitecustomize: import dgl is blocked"


def checks(epochs: int, ranks: list[int], mag: str, only: list[str]) -> list[Check]:
    """The runs, each row's blocked run just before its unblocked one."""
    rows = [("cora", s, n, "cora", epochs) for n in ranks for s in STRATEGIES]
    rows += [("typed", s, 2, mag, 3) for s in STRATEGIES if _capabilities(s).typed_graphs]
    return [Check(f"{kind}-{n}r", s, "cpu", n, data=data, epochs=ep, hidden=16 if kind == "cora"
                  else 32, blocked=blocked, servers=n, convs="dglx" if blocked else "dgl")
            for kind, s, n, data, ep in rows if kind in only for blocked in (True, False)]


def _saw_block(row: dict, out: Path) -> bool:
    """The launcher and every rank of a blocked run said the block was in place."""
    return (out / f"{row['name']}.log").read_text().count(SAID) >= row["ranks"] + 1


def table(rows: list[dict], out: Path) -> tuple[list[dict], str]:
    """Rows of (data, strategy, ranks, without, with, difference) and their markdown."""
    pairs, lines = [], ["| data | strategy | ranks | without DGL | with DGL | difference |",
                        "|---|---|---|---|---|---|"]
    for off, on in zip(rows[::2], rows[1::2]):
        ok = off["status"] == on["status"] == "ok" and _saw_block(off, out)
        diff = off["result"] - on["result"] if ok else None
        pairs.append({"data": off["kind"].split("-")[0], "strategy": off["strategy"],
                      "ranks": off["ranks"], "without": off["result"], "with": on["result"],
                      "difference": diff, "ok": ok})
        cells = [f"{v:.3f}" if isinstance(v, float) else "FAIL"
                 for v in (off["result"], on["result"])]
        lines.append(f"| {pairs[-1]['data']} | {off['strategy']} | {off['ranks']} | "
                     f"{cells[0]} | {cells[1]} | "
                     f"{'FAIL' if diff is None else f'{100 * diff:+.1f} pt'} |")
    return pairs, "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="/tmp/dgl-free", help="logs and table.json")
    p.add_argument("--epochs", type=int, default=30, help="epochs of each Cora run (typed: 3)")
    p.add_argument("--ranks", type=int, nargs="*", default=[2, 4], help="Cora's rank counts")
    p.add_argument("--only", nargs="*", default=["cora", "typed"], help="cora, typed")
    p.add_argument("--timeout", type=float, default=600, help="seconds per run")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mag = out / "data-mag-small"
    if "typed" in args.only and not (mag / "meta.json").exists():
        subprocess.run([sys.executable, "-m", "dglx_dist", "datagen", "--preset", "mag-small",
                        "--out", str(mag)], check=True, capture_output=True)
    from dglx_dist.testing.nodgl import blocking_path

    blocking_path(out / "nodgl", f"\nsys.stderr.write({SAID!r} + '\\n')\n")
    rows = [run(c, out, out / "parts", args.timeout, threads=1)
            for c in checks(args.epochs, args.ranks, str(mag), args.only)]
    pairs, text = table(rows, out)
    (out / "table.json").write_text(json.dumps({"runs": rows, "pairs": pairs}, indent=1))
    print(json.dumps({"pairs": len(pairs), "failed": [r for r in pairs if not r["ok"]],
                      "largest_difference": max((abs(r["difference"]) for r in pairs
                                                 if r["ok"]), default=None)}))
    print(text)
    return int(not all(r["ok"] for r in pairs))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
