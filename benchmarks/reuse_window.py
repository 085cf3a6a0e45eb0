"""How much of a step's remote input the steps just before it pulled: the numbers behind
``distdgl``'s ``reuse_mb`` (:mod:`dglx_dist.kvstore.recent`) and the plan's
:func:`~dglx_dist.strategies.distdgl.cost.reuse_hits`. Under torchrun (or ``dglx emulate``),
from the repository root, with :mod:`benchmarks.ours_profile`'s options::

    dglx emulate --servers 2 --nproc-per-server 1 --rate 100gbit -- \\
        -m benchmarks.reuse_window --partitions DIR --fanouts 10,25 --batch-size 1000 \\
        --hidden 32 --model sage --epochs 2 --num-classes 16

It trains with ``reuse_mb=0`` (every step pulls all its remote rows), records the other
servers' ids each of rank 0's feature pulls asked for, and prints (rank 0) one JSON object
and a markdown table: for each window of ``k`` steps, the share of the remote rows a step
asked for that one of the ``k`` steps before it asked for too.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

from benchmarks import ours_profile

__all__ = ["main", "shares"]

WINDOWS = (1, 2, 4, 8, 16, 50)


def shares(pulls: list[torch.Tensor], windows=WINDOWS) -> dict[int, float]:
    """For each window ``k``: the share of all ids in ``pulls`` (each distinct) that one of
    the ``k`` pulls before theirs holds too."""
    total = sum(p.numel() for p in pulls) or 1
    out = {}
    for k in windows:
        seen = 0
        for i in range(1, len(pulls)):
            before = torch.unique(torch.cat(pulls[max(0, i - k):i]))
            seen += int(torch.isin(pulls[i], before).sum())
        out[k] = round(seen / total, 4)
    return out


def _recorded(store, name: str) -> list[torch.Tensor]:
    """The remote ids of each pull of ``name`` this rank plans from now on (a list that
    grows)."""
    pulls, planned = [], store._planned

    def plan(entry, ids, dedup):
        p = planned(entry, ids, dedup)
        if entry.name == name:
            asked = [gids for gids, _ in p.requests().values()]
            pulls.append(torch.cat(asked) if asked else ids[:0])
        return p

    store._planned = plan
    return pulls


def main(argv: list[str] | None = None) -> int:
    from dglx_dist.runtime import init

    args = ours_profile.parse_args([*(argv if argv is not None else sys.argv[1:]),
                                    "--reuse-mb", "0"])
    acc: dict[str, float] = {}
    with init() as session:
        trainer = ours_profile._our_trainer(args, session, acc)
        pulls = _recorded(trainer.strategy.store, "feat")
        for epoch in range(args.epochs):
            ours_profile._epoch(trainer, session, epoch, acc, None)
        if session.is_main:
            got = shares([p for p in pulls if p.numel()])
            sys.stdout.write(json.dumps({"pulls": len(pulls), "shares": got}) + "\n")
            sys.stdout.write("| window (steps) | share of a step's remote rows |\n|---|---|\n")
            sys.stdout.writelines(f"| {k} | {v:.2f} |\n" for k, v in got.items())
    return 0


if __name__ == "__main__":
    sys.exit(main())
