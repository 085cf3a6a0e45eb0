"""Benchmark: host-to-device throughput of the feature path against torch's own pinned copy.

One process, a 1-rank dglx_dist session (gloo for host traffic, which is all the feature path
uses) on ``--device``, and a ``DistKVStore`` holding one ``--rows`` x ``--feat`` float32 table
under a one-part row policy (in ``/dev/shm``, or ``--shm-dir``, or the temp directory when
``/dev/shm`` has no room for it). Per batch size B, ``--repeat`` times, alternating which goes
first:

* ``torch``: a pinned host tensor of B rows (made once), ``.to(device, non_blocking=True)``,
  then ``torch.cuda.synchronize()``: what the hardware gives torch;
* ``ours``: what a training step does with a block's input features: ``start_pull("feat",
  ids, dedup=False)`` (the DataLoader's ``NodeDataView.start_together``, ids without duplicates) for B random
  unique ids, ``wait()``, then ``DeviceCopies(device).start(rows)()`` and a synchronize; its
  time is split into ``gather`` (the pull) and ``copy`` (the device copy). ``--dedup`` pulls
  with ``dedup=True`` instead (the path of ``g.ndata[name][ids]``); ``rows_pinned`` says
  whether the pulled rows were already page-locked (else the copy pins them first);
* ``index_select``: a plain ``torch.index_select`` of the same ids into a reused pinned buffer,
  a reference for the gather alone.

GB/s are B x F x 4 bytes over the median time; ``ratio`` is ours/torch (end to end, gather
included), ``copy_ratio`` ours' copy alone against torch's. Every pulled batch is checked
against the table on its device (``rows_ok``). On the CPU nothing is copied: ``torch`` times a
``.to()`` that returns its input, so the ratios compare a gather against nothing (the output
says so); the script still runs there, so that it is exercised without a GPU.

Usage::

    python scripts/bench_h2d.py                          # auto device, ~300 MB table
    python scripts/bench_h2d.py --device cuda --batch 10000 100000 400000 --repeat 30
    python scripts/bench_h2d.py --device cpu --preset tiny --repeat 2     # the CI check

Run it from the repository root with the package installed (or ``PYTHONPATH=.``). Prints
one JSON object (one line) and a markdown table. Imports no DGL.
"""

import argparse
import dataclasses
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from dglx_dist.cli_flags import add_flags, check_fields, from_args, option
from dglx_dist.errors import DglxError
from dglx_dist.kvstore import DistKVStore, RowPolicy
from dglx_dist.kvstore.shm import default_shm_dir
from dglx_dist.partition.book import RangeBook
from dglx_dist.registry import Bounds
from dglx_dist.report import json_record, markdown_table
from dglx_dist.runtime.device import choose_placement
from dglx_dist.runtime.env import read_env
from dglx_dist.runtime.session import Session
from dglx_dist.runtime.transfer import DeviceCopies

log = logging.getLogger("bench_h2d")


@dataclasses.dataclass(frozen=True)
class H2DConfig:
    """One measurement; its fields are the flags (a preset's values under those given)."""

    device: str = option("auto", "where the rows go", choices=("auto", "cpu", "cuda"))
    rows: int = option(600_000, "table rows N", bounds=Bounds(1))
    feat: int = option(128, "float32 features per row F", bounds=Bounds(1))
    batch: tuple[int, ...] = option((10_000, 100_000), "batch rows B, one or more")
    repeat: int = option(20, "timed pairs per batch size", bounds=Bounds(1))
    warmup: int = option(3, "untimed pairs first", bounds=Bounds(0))
    shm_dir: Path | None = option(None, "where the store's table is mapped from")
    dedup: bool = option(False, "pull with dedup=True")
    threads: int | None = option(None, "torch's CPU threads (default: torch's)",
                                 bounds=Bounds(1))
    seed: int = option(0, "seed of the table and the batches' ids", bounds=Bounds(0))

    def __post_init__(self) -> None:
        object.__setattr__(self, "batch", tuple(self.batch))  # argparse's nargs gives a list
        check_fields(self)


PRESETS = {"default": H2DConfig(),
           "tiny": H2DConfig(rows=2_000, feat=16, batch=(256,), warmup=1)}
SHM_MARGIN = 1.1  # room wanted in the shared-memory directory, over the table's bytes
CPU_NOTE = ("device is the CPU: no device copy happens; 'torch' times a .to() that returns its "
            "input and the ratios compare a gather against nothing")
COLUMNS = ("B", "MB", "torch_GBps", "ours_GBps", "ratio", "gather_ms", "copy_ms",
           "ours_copy_GBps", "copy_ratio", "index_select_ms", "torch_ms")


def parse_args(argv: list[str] | None) -> H2DConfig:
    """The measurement: ``--preset``'s values under the flags given."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="default", choices=sorted(PRESETS))
    add_flags(ap, H2DConfig, base=PRESETS["default"], overlay=True,
              changes={"batch": {"type": int, "nargs": "+"}})
    args = ap.parse_args(argv)
    config = from_args(H2DConfig, args, base=PRESETS[args.preset])
    bad = [f"--batch {b}" for b in config.batch if not 0 < b <= config.rows]
    if bad:
        ap.error(f"expected every batch in [1, rows={config.rows}]; got {' '.join(bad)}")
    return config


def shm_dir(requested: Path | None, nbytes: int) -> Path:
    """Where the table's file goes: ``requested``, else ``/dev/shm`` when it has room (a
    container's is often 64 MB; mapping past its end would kill the process with SIGBUS),
    else the temp directory."""
    want = int(nbytes * SHM_MARGIN) + (1 << 20)
    candidates = [requested] if requested else [default_shm_dir(), Path(tempfile.gettempdir())]
    for where in candidates:
        if where.is_dir() and shutil.disk_usage(where).free >= want:
            return where
    raise SystemExit(f"bench_h2d: no directory with room for the {nbytes / 2**20:.0f} MB "
                     f"table among "
                     f"{', '.join(map(str, candidates))}; expected a --shm-dir with "
                     f"{want / 2**20:.0f} MB free, or a smaller --rows / --feat")


def start_session(device: str) -> Session:
    """A 1-rank session on ``device`` over a HashStore (as dglx_dist.testing.launch's ranks
    build theirs); host traffic goes over gloo, the only traffic of the feature path."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    placement = choose_placement(0, 0, 1, "gloo", device, cuda)
    session = Session(read_env({}), placement, dist.HashStore(), heartbeat=0.5)
    session.check_devices()
    return session


def build_store(session: Session, full: torch.Tensor, where: Path) -> DistKVStore:
    store = DistKVStore(session, shm_dir=where)
    policy = RowPolicy(RangeBook([0, full.shape[0]]))  # one part, on the one server
    store.init_data("feat", policy, {0: full})
    return store


def synchronizer(device: torch.device):
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def time_torch(src: torch.Tensor, device: torch.device, sync) -> float:
    sync()
    start = time.perf_counter()
    src.to(device, non_blocking=True)
    sync()
    return time.perf_counter() - start


def time_ours(store: DistKVStore, copies: DeviceCopies, ids: torch.Tensor, sync, dedup: bool):
    """(gather s, copy s, the rows on the device, whether the pulled rows were pinned)."""
    sync()
    start = time.perf_counter()
    rows = store.start_pull("feat", ids, dedup=dedup).wait()
    gathered = time.perf_counter()
    out = copies.start(rows)()
    sync()
    end = time.perf_counter()
    return gathered - start, end - gathered, out, rows.is_pinned()


def time_index_select(full: torch.Tensor, ids: torch.Tensor, buf: torch.Tensor) -> float:
    start = time.perf_counter()
    torch.index_select(full, 0, ids, out=buf)
    return time.perf_counter() - start


def measure(store, full: torch.Tensor, batch: int, args: H2DConfig,
            device: torch.device) -> dict:
    """Raw times of one batch size: ``--warmup`` untimed then ``--repeat`` timed rounds."""
    sync, copies = synchronizer(device), DeviceCopies(device)
    gen = torch.Generator().manual_seed(args.seed * 1_000_003 + batch)
    pin = device.type == "cuda"
    src = torch.empty((batch, full.shape[1]), dtype=full.dtype, pin_memory=pin)
    src.copy_(full[:batch])
    buf = torch.empty(src.shape, dtype=src.dtype, pin_memory=pin)
    times = {"torch": [], "gather": [], "copy": [], "index_select": []}
    ok, pinned = True, True
    for i in range(args.warmup + args.repeat):
        ids = torch.randperm(full.shape[0], generator=gen)[:batch]
        t_torch = None
        if i % 2 == 0:
            t_torch = time_torch(src, device, sync)
        gather, copy, out, was_pinned = time_ours(store, copies, ids, sync, args.dedup)
        if t_torch is None:
            t_torch = time_torch(src, device, sync)
        t_ref = time_index_select(full, ids, buf)
        ok = ok and out.device == device and torch.equal(out.cpu(), full[ids])
        pinned = pinned and was_pinned
        if i >= args.warmup:
            for key, value in zip(times, (t_torch, gather, copy, t_ref)):
                times[key].append(value)
    return {"times": times, "rows_ok": ok, "rows_pinned": pinned if pin else None}


def summarise(batch: int, feat: int, raw: dict) -> dict:
    """Medians, spreads (min..max, ms) and GB/s of one batch size."""
    t = raw["times"]
    med = {k: statistics.median(v) for k, v in t.items()}
    nbytes = batch * feat * 4
    ours = med["gather"] + med["copy"]

    def gbps(seconds: float) -> float | None:  # None: too fast to time
        return nbytes / seconds / 1e9 if seconds > 0 else None

    def ratio(a: float, b: float) -> float | None:
        return a / b if b > 0 else None

    return {"B": batch, "MB": nbytes / 1e6, "torch_GBps": gbps(med["torch"]),
            "ours_GBps": gbps(ours), "ratio": ratio(med["torch"], ours),
            "gather_ms": med["gather"] * 1e3, "copy_ms": med["copy"] * 1e3,
            "ours_copy_GBps": gbps(med["copy"]), "copy_ratio": ratio(med["torch"], med["copy"]),
            "index_select_ms": med["index_select"] * 1e3, "torch_ms": med["torch"] * 1e3,
            "spread_ms": {k: [min(v) * 1e3, max(v) * 1e3] for k, v in t.items()},
            "rows_ok": raw["rows_ok"], "rows_pinned": raw["rows_pinned"]}


def run(args: H2DConfig) -> dict:
    """Builds the session and the store, measures every batch size, returns the record."""
    where = shm_dir(args.shm_dir, args.rows * args.feat * 4)  # float32
    session = start_session(args.device)
    try:
        full = torch.rand((args.rows, args.feat),
                          generator=torch.Generator().manual_seed(args.seed))
        store = build_store(session, full, where)
        device = session.device
        results = []
        for batch in args.batch:
            log.info("B=%d on %s ...", batch, device)
            results.append(summarise(batch, args.feat, measure(store, full, batch, args,
                                                               device)))
        store.close()
    except BaseException as exc:
        session.shutdown(exc)
        raise
    session.shutdown()
    return {"bench": "h2d", "device": str(device),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "torch": torch.__version__, "threads": torch.get_num_threads(), "rows": args.rows,
            "F": args.feat, "batches": args.batch, "repeat": args.repeat,
            "warmup": args.warmup, "shm_dir": str(where), "pull": f"start_pull(dedup={args.dedup})",
            "note": CPU_NOTE if device.type == "cpu" else None,
            "rows_ok": all(r["rows_ok"] for r in results), "results": results}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stderr)
    try:
        record = run(args)
    except DglxError as exc:  # a device this machine lacks: one line, no traceback
        raise SystemExit(f"bench_h2d: {exc}") from None
    print(json_record(record))
    print()
    title = (f"device {record['device']} ({record['device_name']}), torch {record['torch']}, "
             f"table {args.rows} x {args.feat} float32, {args.repeat} repeats (medians)")
    print(title + (f"\n\nnote: {record['note']}" if record["note"] else ""))
    print()
    print(markdown_table(record["results"], COLUMNS))
    return record


if __name__ == "__main__":
    main()
