"""Our distdgl trainer timed phase by phase (sampling, KVStore pull, forward, backward,
all-reduce, optimizer) like the DGL trainer of :mod:`dglx_dist.bench.dgl_distdgl_worker`, for
``python -m benchmarks.bench_train --profile``; under torchrun, from the repository root::

    torchrun --nproc-per-node 2 -m benchmarks.ours_profile --partitions DIR \
        [--cprofile FILE] [the DGL trainer's options: --fanouts, --batch-size, --hidden, ...]

Rank 0 prints one JSON object: the mean epoch time and phase seconds without the first epoch
(max over ranks) and, with ``--cprofile``, the top functions of rank 0.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from dglx_dist.bench import dgl_distdgl_worker
from dglx_dist.bench.dgl_distdgl_worker import PHASES

__all__ = ["main", "ours_profile_main", "parse_args"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """``--partitions`` and ``--cprofile``; the rest are the DGL trainer's options (the same
    model, batch and fanouts as its run)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--partitions", required=True, help="our partition directory")
    p.add_argument("--cprofile", help="also cProfile rank 0, stats to this file")
    p.add_argument("--prefetch-thread", choices=("auto", "on", "off"), default="auto",
                   help="the training loader's use_prefetch_thread (auto: DGL's default)")
    p.add_argument("--prefetch-factor", type=int, help="the training loader's prefetch_factor")
    p.add_argument("--num-workers", type=int, default=0,
                   help="the training loader's num_workers (sampler processes per rank)")
    p.add_argument("--reuse-mb", type=float,
                   help="distdgl's reuse_mb (per-rank MiB of the last steps' remote rows; "
                        "default: the strategy's)")
    own, rest = p.parse_known_args(argv)
    args = dgl_distdgl_worker.parse_args(["trainer", *rest])
    args.partitions, args.cprofile, args.reuse_mb = own.partitions, own.cprofile, own.reuse_mb
    args.train_loader = {"use_prefetch_thread": {"auto": None, "on": True, "off": False}[
        own.prefetch_thread], "prefetch_factor": own.prefetch_factor,
        "num_workers": own.num_workers}
    return args


def _timed(obj: Any, name: str, phase: str, acc: dict[str, float]) -> None:
    """Replaces ``obj.name`` by a wrapper adding its wall time to ``acc[phase]``."""
    fn = getattr(obj, name)

    def wrapper(*a, **kw):
        t0 = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            acc[phase] = acc.get(phase, 0.0) + time.perf_counter() - t0

    setattr(obj, name, wrapper)


class _TimedWaits:
    """A started pull whose ``wait`` adds its wall time to ``acc["pull"]``. It wraps the
    handle rather than patching it: a wrapper kept on the handle would hold the handle's own
    bound method, a cycle that keeps each step's rows alive until the garbage collector's
    next full pass (the heap then grew by a step's 50 MB of rows for about 20 steps in a row,
    each paying its page faults, which the timings would have counted)."""

    def __init__(self, handle: Any, acc: dict[str, float]):
        self._handle, self._acc = handle, acc

    def wait(self):
        t0 = time.perf_counter()
        try:
            return self._handle.wait()
        finally:
            self._acc["pull"] = self._acc.get("pull", 0.0) + time.perf_counter() - t0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


def _timed_pull(store: Any, acc: dict[str, float]) -> None:
    """Times ``store.start_pull_many`` (a step's labels and features together; every
    ``start_pull`` goes through it) and the wait of each pull it starts into ``acc["pull"]``
    (the wait: what the loader's lookahead left of the transfer after the previous step's
    compute)."""
    _timed(store, "start_pull_many", "pull", acc)
    start = store.start_pull_many

    def started(*a, **kw):
        return _TimedWaits(start(*a, **kw), acc)

    store.start_pull_many = started


def _our_trainer(args: argparse.Namespace, session, acc: dict[str, float]):
    """Our distdgl ``Trainer`` as ``dglx train`` builds it, with its phases timed into ``acc``."""
    import torch

    from dglx_dist.models import SAGE
    from dglx_dist.partition import PartitionDir
    from dglx_dist.strategies import STRATEGIES
    from dglx_dist.trainer import Trainer

    given = {} if args.reuse_mb is None else {"reuse_mb": args.reuse_mb}
    strategy = STRATEGIES.build("distdgl", fanouts=tuple(args.fanouts),
                                batch_size=args.batch_size, **given)
    pdir = PartitionDir(args.partitions)
    torch.manual_seed(args.seed)
    model = SAGE(pdir.feat_dim, args.hidden, pdir.num_classes, len(args.fanouts),
                 dropout=args.dropout, row_normalize=args.row_normalize)
    trainer = Trainer(model, pdir, strategy, session=session, lr=args.lr,
                      weight_decay=args.weight_decay, progress=False,
                      train_loader=args.train_loader)
    _timed_pull(strategy.store, acc)
    for obj, name, phase in ((strategy.sampler, "draw_blocks", "sample"),
                             (trainer, "forward", "forward"),
                             (session.world, "all_reduce", "allreduce"),
                             (trainer.optimizer, "step", "optimizer"), (trainer, "step", "step")):
        _timed(obj, name, phase, acc)
    return trainer


def _epoch(trainer, session, epoch: int, acc: dict[str, float], prof) -> list[float]:
    """One epoch of ``Trainer.fit``'s loop; returns [wall, phase seconds..., input rows], the
    max over ranks."""
    import torch
    import torch.nn.functional as F

    acc.clear()
    if prof:
        prof.enable()
    t0 = time.perf_counter()
    for batch in trainer.batches(epoch):
        loss = F.cross_entropy(trainer.forward(batch), batch.y)
        trainer.step(loss)
        float(loss.detach())
        acc["input_rows"] = acc.get("input_rows", 0) + batch.x.shape[0]
    wall = time.perf_counter() - t0
    if prof:
        prof.disable()
    ph = {**acc, "backward+allreduce": acc.get("step", 0.0) - acc.get("optimizer", 0.0)}
    ph["other"] = wall - sum(ph.get(k, 0.0) for k in PHASES if k != "allreduce")
    vec = torch.tensor([wall] + [ph.get(k, 0.0) for k in PHASES + ("input_rows",)],
                       dtype=torch.float64)
    session.world.all_reduce(vec, op="max")
    return vec.tolist()


def _cprofile_top(prof, path: str | None = None, by: str = "tottime"
                  ) -> list[dict[str, Any]]:
    """The 25 functions of most ``by`` time (``tottime``, their own; ``cumtime``, with what
    they call); the stats dumped to ``path`` where given."""
    import pstats

    stats = pstats.Stats(prof)
    if path:
        stats.dump_stats(path)
    column = {"tottime": 2, "cumtime": 3}[by]
    top = sorted(stats.stats.items(), key=lambda kv: -kv[1][column])[:25]
    return [{"function": f"{Path(f).name}:{ln}:{fn}", "calls": nc, "tottime": round(tt, 4),
             "cumtime": round(ct, 4)} for (f, ln, fn), (_, nc, tt, ct, _) in top]


def ours_profile_main(args: argparse.Namespace) -> None:
    """Under torchrun: ``Trainer.fit``'s loop of our distdgl, phase by phase (rank 0 prints)."""
    import cProfile

    from dglx_dist.runtime import init

    acc: dict[str, float] = {}
    with init() as session:
        trainer = _our_trainer(args, session, acc)
        prof = cProfile.Profile() if args.cprofile else None
        per_epoch = [_epoch(trainer, session, epoch, acc, prof) for epoch in range(args.epochs)]
        if not session.is_main:
            return
        timed = per_epoch[1:] or per_epoch
        mean = [sum(v[i] for v in timed) / len(timed) for i in range(len(PHASES) + 2)]
        out = {"epoch_time": round(mean[0], 4),
               "phases": {k: round(v, 4) for k, v in zip(PHASES + ("input_rows",), mean[1:])}}
        if prof:
            out["cprofile_top"] = _cprofile_top(prof, args.cprofile)
        sys.stdout.write(json.dumps(out) + "\n")  # what bench_train reads
        sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    """Parses the options and runs :func:`ours_profile_main`."""
    ours_profile_main(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
