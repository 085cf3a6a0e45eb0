"""Which remote rows should a server cache? Hit rates of three choices on the same steps
(issue 36, item 2).

Two ranks on 2 virtual servers iterate a ``dglx_dist.DataLoader`` (DGL's NeighborSampler,
features prefetched, the distdgl strategy, shuffled training seeds) for two epochs without a
model, while the KVStore counts the rows of the other server each pull asked for
(:class:`dglx_dist.kvstore.cache.RowCache`'s counting, one count per epoch). Then, for a
budget of ``--share`` of the rows a server does not hold (several: one row each), the second
epoch's hit rate (its
remote rows that the cache would have served) of rows chosen

* ``visits``: by how often the first epoch pulled them (what ``cache_mb`` does);
* ``degree``: by in-degree in the whole graph (how often some node's neighbour list holds
  them; static, known before training, as PaGraph chooses);
* ``halo``: by edges into the server's own nodes (the HALO nodes that connect most);
* ``oracle``: the second epoch's own most pulled rows (an upper bound for any static choice).

    python -m benchmarks.cache_policy --preset small --share 0.05 0.1 0.2 0.4
    python -m benchmarks.cache_policy --data g2449029 --partitions DIR --share 0.1

Prints JSON lines (one per server and budget, the hit rate of each choice) and a markdown
table.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch

from dglx_dist.kvstore.cache import choose_rows
from dglx_dist.report import json_record, markdown_table

CHOICES = ("visits", "degree", "halo", "oracle")


def _job(session, pdir: str, fanouts: list[int], batch_size: int, out: str) -> str:
    import dgl

    import dglx_dist

    g = dglx_dist.DistGraph(pdir, "distdgl", session=session)
    train = dglx_dist.node_split(g.ndata["train_mask"], g)
    sampler = dgl.dataloading.NeighborSampler(fanouts, prefetch_node_feats=["feat"])
    loader = dglx_dist.DataLoader(g, train, sampler, batch_size=batch_size, shuffle=True)
    g.store.start_cache(1)  # counting only: nothing is filled
    index = g.store.names().index("feat")
    for epoch in range(2):
        for _ in loader:
            pass
        counts = g.store.cache.counts.pop(index, torch.zeros(g.num_nodes(), dtype=torch.int32))
        np.save(Path(out) / f"counts-{session.rank}-{epoch}.npy", counts.numpy())
    return out


def choose(kind: str, budget_rows: int, remote: np.ndarray, first: np.ndarray,
           second: np.ndarray, degree: np.ndarray, halo: np.ndarray) -> np.ndarray:
    """The remote rows choice ``kind`` caches (``budget_rows`` of them)."""
    if kind in ("visits", "oracle"):
        counts = torch.from_numpy(first if kind == "visits" else second)
        ids = choose_rows({0: counts}, {0: 0}, budget_rows * 8).get(0)
        return np.zeros(0, np.int64) if ids is None else ids.numpy()
    score = (degree if kind == "degree" else halo)[remote]
    return remote[np.argsort(-score, kind="stable")[:budget_rows]]


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    from dglx_dist.data import read_dataset
    from dglx_dist.partition import PartitionDir, partition_dataset
    from dglx_dist.testing import run_workers

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    data = _dataset(args, work)
    pdir = Path(args.partitions) if args.partitions else work / f"parts-{data.name}"
    if not pdir.exists():
        partition_dataset(data, pdir, "metis", 2)
    out = Path(tempfile.mkdtemp(prefix="cache-policy-", dir=work))
    run_workers(_job, 2, out / "run", str(pdir), list(args.fanouts), args.batch_size,
                str(out), env={"DGLX_VIRTUAL_SERVERS": "2"}, timeout=args.timeout)
    ds, book = read_dataset(data), PartitionDir(pdir).book
    src, dst = np.asarray(ds.src), np.asarray(ds.dst)
    relabel = PartitionDir(pdir).relabeling  # the counts are by partitioned id
    if relabel:
        src, dst = relabel[1][src], relabel[1][dst]
    owner = np.asarray(book.owner(np.arange(ds.num_nodes)))
    degree = np.bincount(src, minlength=ds.num_nodes)  # in-neighbour lists holding each node
    rows = []
    for server in range(2):
        first, second = (np.load(out / f"counts-{server}-{e}.npy") for e in range(2))
        remote = np.nonzero(owner != server)[0]
        into = owner[dst] == server
        halo = np.bincount(src[into], minlength=ds.num_nodes)
        pulled = int(second.sum())
        for share in args.share:
            budget = int(share * remote.size)
            row = {"server": server, "share": share, "budget_rows": budget,
                   "remote_rows_pulled": pulled}
            for kind in CHOICES:
                chosen = choose(kind, budget, remote, first, second, degree, halo)
                row[kind] = round(float(second[chosen].sum()) / max(pulled, 1), 4)
            rows.append(row)
            print(json_record(row))
    print(markdown_table(rows, ("server", "share", "budget_rows", "remote_rows_pulled",
                                *CHOICES)))


def _dataset(args: argparse.Namespace, work: Path) -> Path:
    from dglx_dist.prepare import resolve_dataset

    if args.data:
        return resolve_dataset(args.data)
    from benchmarks.bench_train import PRESETS

    return PRESETS[args.preset].dataset(0, work)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=("tiny", "small"), default="small")
    p.add_argument("--data", help="a dataset directory or built-in name (overrides --preset)")
    p.add_argument("--partitions", help="its 2 METIS parts (default: made in --workdir)")
    p.add_argument("--share", type=float, nargs="+", default=[0.1],
                   help="budgets: these shares of the rows a server does not hold")
    p.add_argument("--fanouts", type=lambda s: tuple(int(x) for x in s.split(",")),
                   default=(10, 25))
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--workdir", default="bench_out/cache_policy")
    p.add_argument("--timeout", type=float, default=1800.0)
    return p


if __name__ == "__main__":
    main()
