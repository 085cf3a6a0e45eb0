"""``dglx verify`` and ``dglx cache``: the files dglx wrote (verify runs the full check of
every part file, its SHA-256 and every chunk sum, where loads after a host's first sample the
chunks: docs/partition_format.md#guarantees; the cache: :mod:`dglx_dist.cache`)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

from dglx_dist.errors import CheckpointError, InvalidValueError, PartitionFormatError
from dglx_dist.report import markdown_table, print_line

__all__ = ["COMMANDS", "verify_path"]

_GIB = 1 << 30


def _partitions(path: Path) -> dict[str, Any]:
    from dglx_dist.partition import PartitionDir

    pdir = PartitionDir(path)
    for part in range(pdir.num_parts):
        pdir.verify_part(part, full=True)
    files = [f for e in pdir.manifest["parts"] for f in e["files"].values()]
    return {"kind": "partition", "files": len(files), "bytes": sum(f["bytes"] for f in files)}


def _checkpoints(path: Path) -> dict[str, Any]:
    from dglx_dist.checkpoint import files

    found = files.list_checkpoints(path) or [(None, path)]
    sizes = []
    for _, ckpt in found:
        manifest = files.read_manifest(ckpt)
        files.verify(ckpt, manifest)
        sizes += [f["bytes"] for f in manifest["files"].values()]
    return {"kind": "checkpoint", "checkpoints": len(found), "files": len(sizes),
            "bytes": sum(sizes)}


def _recorded(path: Path) -> dict[str, Any]:
    from dglx_dist.data.owned import describe_unproven, read_record, unproven

    record = read_record(path)
    if record is None:
        raise InvalidValueError(f"{path}: nothing to verify against (no partition.json, "
                                f"checkpoint manifest or .dglx-written.json record)")
    bad = unproven(path, record)
    missing = sorted(n for n in record.files if not (path / n).is_file())
    if bad or missing:
        raise InvalidValueError(f"{path}: {len(bad)} file(s) changed or not written by dglx "
                                f"({describe_unproven(bad)}), {len(missing)} missing "
                                f"({describe_unproven(missing)})")
    return {"kind": record.kind, "files": len(record.files),
            "bytes": sum(int(f["bytes"]) for f in record.files.values())}


# what a path is, in the order asked: (is it one?, verify it)
_KINDS: tuple[tuple[Callable[[Path], bool], Callable[[Path], dict[str, Any]]], ...] = (
    (lambda p: (p / "partition.json").is_file(), _partitions),
    (lambda p: (p / "manifest.json").is_file() or any(p.glob("epoch-*/manifest.json")),
     _checkpoints),
    (lambda p: True, _recorded),
)


def verify_path(path: Path) -> dict[str, Any]:
    """Verifies ``path`` in full; returns what was checked.

    Raises:
        PartitionFormatError / CheckpointError / InvalidValueError: naming the first damaged
            file (or what is missing)."""
    if not path.is_dir():
        raise InvalidValueError(f"{path}: not a directory; expected a partition directory, "
                                f"a checkpoint (or their root), or another directory dglx wrote")
    verify = next(fn for is_kind, fn in _KINDS if is_kind(path))
    return {"path": str(path), **verify(path), "ok": True}


def _add_verify(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", type=Path, nargs="+", metavar="PATH",
                   help="a partition directory, a checkpoint directory or root, a dataset or "
                        "another directory dglx wrote")


def _cmd_verify(args: argparse.Namespace) -> int:
    for path in args.paths:
        try:
            print_line(json.dumps(verify_path(path)))
        except (PartitionFormatError, CheckpointError) as exc:
            raise type(exc)(f"dglx verify: {exc}") from None
    return 0


def _add_cache(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("ls", "clear"), help="ls: list the entries, least "
                   "recently used first; clear: remove them")
    p.add_argument("--cache-dir", type=Path, default=Path("dglx-partitions"),
                   help="the cache (dglx train's and distribute's; default dglx-partitions)")
    p.add_argument("--older-than-days", type=float, default=0.0, metavar="DAYS",
                   help="clear: only entries unused for longer (default: every entry)")


def _cmd_cache(args: argparse.Namespace) -> int:
    import time

    from dglx_dist.cache import check_cache_dir, clear, entries

    check_cache_dir(args.cache_dir)
    if args.action == "clear":
        removed = clear(args.cache_dir, args.older_than_days * 86400.0)
        print_line(json.dumps({"cache_dir": str(args.cache_dir), "left": len(entries(
            args.cache_dir)), "removed": [p.name for p in removed]}))
        return 0
    now = time.time()
    found = entries(args.cache_dir)
    rows = [{"entry": e.path.name, "kind": e.kind, "GiB": f"{e.bytes / _GIB:.3f}",
             "unused for (days)": f"{(now - e.last_used) / 86400:.1f}"} for e in found]
    print_line(markdown_table(rows) + f"\n{len(found)} entries, "
               f"{sum(e.bytes for e in found) / _GIB:.3f} GiB")
    return 0


# name: (help, add the arguments, run)
COMMANDS: dict[str, tuple[str, Callable, Callable]] = {
    "verify": ("hash every file of partitions, checkpoints or another directory dglx wrote "
               "against its manifest (exit 2 naming the first damaged file)", _add_verify,
               _cmd_verify),
    "cache": ("list (ls) or empty (clear) the partition cache of dglx train and distribute",
              _add_cache, _cmd_cache),
}
