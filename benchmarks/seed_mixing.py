"""Study: does mixing other servers' seeds into each rank's batches (distdgl's
``seed_mixing``) buy accuracy, and what does it cost? (issue 36, item 3)

For every seed in ``--seeds``, one ``dglx bench`` run of single-process DGL, DGL's DistDGL and
``distdgl`` with ``seed_mixing`` 0, then one of ``distdgl`` alone for each other share in
``--shares`` (the same dataset and partitions: ``--out``'s ``work/`` is reused). The seed
goes to the model (``--seed``) and to the strategy's shuffling and sampling (``seed=``).
Accuracy does not depend on the links, so ``--network virtual`` (the default here) is enough
for it; ``--network 1g`` also gives epoch time and bytes on the emulated cluster.

Prints one JSON object (every run's row) and a markdown table: per system, the median over
seeds (and the range) of the final validation accuracy, of the validation accuracy after
each of the first epochs, of the time to accuracy and of the inter-server bytes per epoch::

    python -m benchmarks.seed_mixing --preset small --seeds 0,1,2 --shares 0.5,1 --out DIR
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
from pathlib import Path

log = logging.getLogger("benchmarks.seed_mixing")


def _bench(args: argparse.Namespace, seed: int, systems: str, share: float) -> list[dict]:
    out = Path(args.out)
    cmd = [sys.executable, "-m", "dglx_dist", "bench", "--preset", args.preset, "--systems",
           systems, "--network", args.network, "--seed", str(seed), "--no-plot",
           "--out", str(out), "--overwrite",
           "--strategy-opt", f"distdgl:seed_mixing={share}",
           "--strategy-opt", f"distdgl:seed={seed}"]
    log.info("%s", " ".join(cmd))
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    for row in rows:
        row["seed"], row["label"] = seed, row["system"] if row["system"] != "distdgl" else \
            f"distdgl seed_mixing={share:g}"
    return rows


def _median(values: list, none: str = "not reached") -> str:
    values = [v for v in values if isinstance(v, (int, float))]
    if not values:
        return none
    med = statistics.median(values)
    return f"{med:.4g} ({min(values):.4g}..{max(values):.4g})" if len(values) > 1 else \
        f"{med:.4g}"


def table(rows: list[dict], epochs: int) -> str:
    """The markdown table of ``rows`` (medians over seeds per system)."""
    labels = list(dict.fromkeys(r["label"] for r in rows))
    head = ["system", "val_acc (final)", *[f"val after epoch {e}" for e in range(epochs)],
            "time_to_accuracy", "epoch_time", "bytes_inter (MB)", "reached"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label in labels:
        mine = [r for r in rows if r["label"] == label]
        reached = sum(isinstance(r.get("time_to_accuracy"), (int, float)) for r in mine)
        cells = [label, _median([r["val_acc"] for r in mine]),
                 *[_median([r["val_acc_per_epoch"][e] for r in mine]) for e in range(epochs)],
                 _median([r.get("time_to_accuracy") for r in mine]),
                 _median([r["epoch_time"] for r in mine]),
                 _median([r["bytes_inter"] / 1e6 for r in mine if r.get("bytes_inter")
                          is not None], "not counted"),
                 f"{reached}/{len(mine)}"]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="small")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--shares", default="0.5,1", help="seed_mixing shares besides 0")
    p.add_argument("--network", default="virtual")
    p.add_argument("--out", required=True, help="a dglx bench output directory (reused)")
    p.add_argument("--epochs-shown", type=int, default=3)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        rows += _bench(args, seed, "dgl,dgl-distdgl,distdgl", 0.0)
        for share in [float(s) for s in args.shares.split(",") if s]:
            rows += _bench(args, seed, "distdgl", share)
    print(json.dumps({"rows": rows}))
    print(table(rows, args.epochs_shown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
