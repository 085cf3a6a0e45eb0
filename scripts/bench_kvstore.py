"""Benchmark: the KVStore's collective pull against its non-collective (served) pull.

Every configuration runs on local gloo ranks (``dglx_dist.testing.run_workers``): 2 ranks as
2 servers, 4 ranks as 2 virtual servers x 2 ranks. Tables: Cora's size (2708 x 1433 float32)
and a larger synthetic one (``--rows`` x ``--dim`` float32, random), a part per server placed
by a hash book. Per pull size (``--sizes`` random ids, duplicates allowed) three modes:

* ``collective``: every rank pulls its own ids in the same call (all_to_all_v on ``cross``);
* ``p2p_all``: every rank pulls its own ids with ``collective=False`` at the same time (the
  serving threads answer while their ranks pull too);
* ``p2p_one``: rank 0 alone pulls with ``collective=False``; the others wait in a barrier.

Times are rank 0's, per pull, over ``--repeats`` pulls after ``--warmup`` (a world barrier
between pulls, outside the timing); the table gives the median and the spread (min..max).
The machine's load shows in the spread: compare modes within one run.

Usage::

    python scripts/bench_kvstore.py                 # ~2 min on 2 cores
    python scripts/bench_kvstore.py --rows 50000 --repeats 10 --out kv.json

Prints one JSON object and a markdown table.
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from dglx_dist.kvstore import DistKVStore, RowPolicy
from dglx_dist.partition.book import HashBook
from dglx_dist.report import markdown_table
from dglx_dist.testing import run_workers

log = logging.getLogger("bench_kvstore")
MODES = ("collective", "p2p_all", "p2p_one")


def _table(rows: int, dim: int) -> torch.Tensor:
    return torch.randn((rows, dim), generator=torch.Generator().manual_seed(rows * dim))


def _time_pulls(session, store, rows: int, size: int, mode: str, warmup: int,
                repeats: int) -> list[float]:
    gen = torch.Generator().manual_seed(1000 * session.rank + size)
    times = []
    for i in range(warmup + repeats):
        ids = torch.randint(0, rows, (size,), generator=gen)
        session.world.barrier()
        start = time.perf_counter()
        if mode == "collective":
            store.pull("feat", ids)
        elif mode == "p2p_all" or session.rank == 0:
            store.pull("feat", ids, collective=False)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    session.world.barrier()
    return times


def worker(session, tables: list[list[int]], sizes: list[int], warmup: int,
           repeats: int) -> list[dict]:
    """Rank-side: times every (table, size, mode); returns rank 0's rows (others: [])."""
    torch.manual_seed(0)
    out = []
    for rows, dim in tables:
        full = _table(rows, dim)
        store = DistKVStore(session, serve=True)
        policy = RowPolicy(HashBook(rows, session.topology.num_servers, seed=1))
        store.init_data("feat", policy, {session.server_id: full[policy.part_ids(
            session.server_id)]})
        probe = torch.randint(0, rows, (100,))
        assert torch.equal(store.pull("feat", probe, collective=False), full[probe])
        del full
        for size in sizes:
            for mode in MODES:
                before = session.counter.snapshot()
                times = _time_pulls(session, store, rows, size, mode, warmup, repeats)
                after = session.counter.snapshot()
                inter = (after["recv_inter"] - before["recv_inter"]) / (warmup + repeats)
                out.append({"world": session.world_size, "rows": rows, "dim": dim,
                            "ids": size, "mode": mode, "times": times,
                            "recv_inter_per_pull": inter})
        store.close()
    return out if session.rank == 0 else []


def summarise(raw: list[dict]) -> list[dict]:
    rows = []
    for r in raw:
        t = sorted(x * 1e3 for x in r["times"])
        rows.append({"world": f"{r['world']} ({'2x1' if r['world'] == 2 else '2x2'})",
                     "table": f"{r['rows']}x{r['dim']}", "ids": r["ids"], "mode": r["mode"],
                     "median_ms": round(statistics.median(t), 2),
                     "spread_ms": f"{t[0]:.2f}..{t[-1]:.2f}",
                     "recv_inter_kb": round(r["recv_inter_per_pull"] / 1024, 1)})
    return rows


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=60.0, help="DGLX_TIMEOUT of the ranks")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stderr)
    tables = [[2708, 1433], [args.rows, args.dim]]
    raw = []
    for world in args.worlds:
        log.info("world %d ...", world)
        env = {"DGLX_VIRTUAL_SERVERS": "2", "DGLX_TIMEOUT": str(args.timeout)}
        res = run_workers(worker, world, tempfile.mkdtemp(prefix="bench-kv-"), tables,
                          args.sizes, args.warmup, args.repeats, env=env, timeout=1800)
        raw += res[0]
    table = summarise(raw)
    result = {"config": vars(args) | {"out": str(args.out) if args.out else None},
              "rows": table}
    print(json.dumps(result))
    if args.out:  # with every pull's time
        args.out.write_text(json.dumps(result | {"raw": raw}, indent=2))
    print(markdown_table(table))
    return result


if __name__ == "__main__":
    main()
