"""Partitions made on demand for a run: ``dglx train --data DIR`` without ``--partitions``.

Rank 0 partitions the dataset the way the strategy asks for the job's topology into a cache
directory keyed by the dataset's identity, the method, its options and the number of parts;
the other ranks wait for its manifest (:func:`made_by_rank0`). On a multi-node job the cache
directory must be on a filesystem every node sees; otherwise run ``dglx partition`` first and
pass ``--partitions``.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import time
from pathlib import Path
from typing import Any, Callable

import torch

from dglx_dist.data.builtin import builtin_names, builtin_path
from dglx_dist.data.format import is_hetero, read_hetero_meta, read_meta
from dglx_dist.data.nolinks import replace_file
from dglx_dist.cache import CacheLimits, check_cache_dir, making, prune, touch
from dglx_dist.errors import (DatasetFormatError, DeadlineError, OutputExistsError,
                              PartitionError, StateError)
from dglx_dist.partition.driver import partition_dataset
from dglx_dist.partition.io import MANIFEST, read_manifest
from dglx_dist.runtime.failure import same_on_every_rank
from dglx_dist.runtime.session import Session
from dglx_dist.runtime.topology import Topology
from dglx_dist.strategies.base import Strategy

__all__ = ["resolve_dataset", "derived_key", "cached_partitions", "ensure_partitions",
           "partition_ahead", "made_by_rank0", "check_partitions_of", "checked_cache"]

log = logging.getLogger(__name__)


def resolve_dataset(data: str | os.PathLike) -> Path:
    """A dataset directory: ``data`` itself, or the built-in dataset of that name."""
    path = Path(data)
    if path.is_dir():
        return path
    if str(data) in builtin_names():
        return builtin_path(str(data))
    raise DatasetFormatError(f"dataset {data!r} is neither a directory nor a built-in dataset "
                             f"({', '.join(builtin_names())})")


def check_partitions_of(partitions: str | os.PathLike, data: str | os.PathLike) -> None:
    """Refuses partitions that were not made from the dataset ``data``: the manifest's sizes
    (per node and edge type on a typed dataset) and provenance (what the dataset's meta.json
    said) must be the dataset's.

    Raises:
        PartitionError: naming both directories and the first field that differs.
    """
    manifest = read_manifest(partitions)
    path = resolve_dataset(data)
    ours = _typed_fields(path) if is_hetero(path) else _fields(path)
    theirs = {k: manifest.get(k) for k in ("num_nodes", "num_edges", "num_classes")}
    theirs["provenance"] = manifest.get("dataset", {})
    types = manifest.get("types") or {}
    if "node types" in ours:  # (partitions of a homogeneous dataset have none)
        offsets = types.get("ntype_offsets", [0])
        theirs["node types"] = dict(zip(types.get("ntypes", []),
                                        [b - a for a, b in zip(offsets, offsets[1:])]))
        theirs["edge types"] = sorted(tuple(e) for e in types.get("canonical_etypes", []))
    else:
        theirs["feat_dim"] = None if types else manifest.get("feat_dim")
    for field in ours:
        if theirs[field] != ours[field]:
            raise PartitionError(
                f"--partitions {partitions} was not made from --data {data}: its {field} is "
                f"{theirs[field]!r:.120}, the dataset's {ours[field]!r:.120}; pass the dataset "
                f"it was made from, or only --partitions")


def _fields(path: Path) -> dict[str, Any]:
    """What partitions of the homogeneous dataset ``path`` record of it."""
    meta = read_meta(path)
    keep = ("num_nodes", "num_edges", "feat_dim", "num_classes")
    return {**{k: v for k, v in meta.to_json().items() if k in keep}, "provenance": meta.extra}


def _typed_fields(path: Path) -> dict[str, Any]:
    """What partitions of the typed dataset ``path`` record of it: the sums, each type's
    size, and the provenance."""
    meta = read_hetero_meta(path)
    return {"num_nodes": sum(t["num_nodes"] for t in meta.ntypes.values()),
            "num_edges": sum(meta.num_edges), "num_classes": meta.num_classes,
            "provenance": meta.extra,
            "node types": {name: t["num_nodes"] for name, t in meta.ntypes.items()},
            "edge types": sorted(tuple(e) for e in meta.etypes)}


def _dataset_files(data: Path) -> tuple[list[str], str]:
    """The files whose identity keys a dataset's cached partitions, and a tag for the entry's
    name: a typed dataset's are its meta.json and every table under nodes/ and edges/ (so
    its key differs from any homogeneous dataset's, whose file names it never has)."""
    if not is_hetero(data):
        return ["meta.json", "edges.parquet", "nodes.parquet"], ""
    tables = sorted(p.relative_to(data).as_posix() for sub in ("nodes", "edges")
                    for p in (data / sub).glob("*.parquet"))
    return ["meta.json", *tables], "typed-"


def derived_key(data: Path, what: str, made_with: Any) -> str:
    """The cache entry's name of what is made from dataset ``data`` (``what``, with the
    JSON-able ``made_with``): it changes when a file of the dataset does."""
    h = hashlib.sha256()
    names, tag = _dataset_files(data)
    for name in names:
        try:
            st = (data / name).stat()
        except OSError as exc:
            raise DatasetFormatError(f"{data / name}: {exc.strerror or exc}; a dataset "
                                     f"directory's files must be readable") from None
        h.update(f"{name}:{st.st_size}:{st.st_mtime_ns}".encode())
    h.update(json.dumps(made_with, sort_keys=True).encode())
    return f"{data.name}-{tag}{what}-{h.hexdigest()[:12]}"


def _attempt(session: Session) -> str:
    """An id of this call, the same on every rank (rank 0's random number)."""
    token = torch.tensor([secrets.randbits(62) if session.is_main else 0])
    return f"{int(session.world.broadcast(token)[0]):016x}"


def _failure(failed: Path, attempt: str) -> str | None:
    """Rank 0's error if ``failed`` records one of this attempt (a marker left by an earlier
    run, or one being replaced, is not)."""
    try:
        text = failed.read_text()
    except OSError:
        return None
    head, _, message = text.partition("\n")
    return message if head == attempt else None


def checked_cache(cache_dir: str | os.PathLike) -> Path:
    """``cache_dir``, refused (:func:`~dglx_dist.cache.check_cache_dir`) with one line from
    rank 0 when it is not a cache: every rank sees the same directory."""
    try:
        check_cache_dir(cache_dir)
    except OutputExistsError as exc:
        raise same_on_every_rank(exc) from None
    return Path(cache_dir)


def made_by_rank0(session: Session, out: Path, marker: str, make: Callable[[], Any],
                  what: str, wait_timeout: float = 3600.0) -> Path:
    """``out``, made by rank 0 with ``make()`` unless ``out/marker`` exists already (under the
    entry's cache lock: a job sharing the cache that makes it first is waited for); the other
    ranks wait for that file (a filesystem poll with its own, long timeout: making it may take
    longer than a collective may wait), and raise rank 0's error if it failed.

    Rank 0 reports a failure in the sibling file ``NAME.failed``, headed by an id of this
    attempt that every rank learned first, so a marker an earlier run left is never taken
    for this run's (whichever rank reads it first)."""
    failed = out.with_name(out.name + ".failed")
    attempt = _attempt(session)
    if session.is_main:
        try:
            _make_once(out, marker, make, what, wait_timeout)
        except BaseException as exc:
            failed.parent.mkdir(parents=True, exist_ok=True)
            replace_file(failed, f"{attempt}\n{type(exc).__name__}: {exc}")
            raise
        failed.unlink(missing_ok=True)  # an earlier run's (no waiter takes it for this one's)
    deadline = time.monotonic() + wait_timeout
    while not (out / marker).is_file():
        error = _failure(failed, attempt)
        if error is not None:
            waiter = StateError(f"rank 0 failed ({what}): {error}")
            waiter.refused_on = (0,)  # rank 0 reports its own error (runtime.failure)
            raise waiter
        if time.monotonic() > deadline:
            raise DeadlineError(f"waited {wait_timeout:.0f}s for rank 0 to write {out}; is the "
                                f"cache directory on a filesystem every node sees?")
        time.sleep(0.2)
    return out


def _make_once(out: Path, marker: str, make: Callable[[], Any], what: str,
               timeout: float) -> None:
    """``out`` made with ``make()`` under its cache lock unless ``out/marker`` is there (made
    earlier, or by another job while this one waited for the lock), then touched."""
    if not (out / marker).is_file():
        with making(out, timeout):
            if not (out / marker).is_file():
                log.info("%s -> %s", what, out)
                make()
                prune(out.parent, CacheLimits.from_env(), keep=(out,))
                return
    touch(out)


def cached_partitions(data: str | os.PathLike, strategy: Strategy, topology: Topology,
                      cache_dir: str | os.PathLike) -> tuple[Path, Callable[[], Any], str]:
    """Where the cache keeps ``strategy``'s partitions of ``data`` for ``topology``, what
    makes them, and what making them is called in logs."""
    data = resolve_dataset(data)
    spec = strategy.partition_spec(topology)
    out = Path(cache_dir) / derived_key(data, f"{spec.method}-{spec.num_parts}",
                                        [spec.method, spec.num_parts, spec.options])
    make = lambda: partition_dataset(data, out, spec.method, spec.num_parts,  # noqa: E731
                                     spec.options, progress=True)
    return out, make, f"partitioning {data} with {spec.method} into {spec.num_parts} parts"


def ensure_partitions(data: str | os.PathLike, strategy: Strategy, session: Session,
                      cache_dir: str | os.PathLike = "dglx-partitions",
                      wait_timeout: float = 3600.0) -> Path:
    """The partition directory for ``strategy`` on this job, made by rank 0 if not cached."""
    out, make, what = cached_partitions(data, strategy, session.topology,
                                        checked_cache(cache_dir))
    return made_by_rank0(session, out, MANIFEST, make, what, wait_timeout)


def partition_ahead(data: str, strategy, topology: Topology, cache_dir: str) -> str:
    """What ``dglx train --strategy STRATEGY --strategy-opt ... --cache-dir CACHE_DIR`` would
    partition for the built ``strategy``, made by this process (no session) unless cached: a
    launcher's step before it starts the job (the benchmarks', so that a run's start-up is the
    job's own)."""
    out, make, what = cached_partitions(data, strategy, topology, cache_dir)
    check_cache_dir(cache_dir)
    _make_once(out, MANIFEST, make, what, 3600.0)
    return str(out)
