"""Saving and finding checkpoints over all ranks (collective on the world group; the steps of
a save and what a failed rank makes every rank raise: docs/reliability.md, "On disk").

Saving: every rank writes its files into rank 0's staging directory and reports them (JSON over
the comm layer); rank 0 checks they arrived, writes the manifest and renames the directory into
place only when every rank succeeded. Finding: rank 0 picks the newest intact checkpoint, so
all ranks load the same one. :func:`on_rank_zero`: what only rank 0 does to the root ends on
every rank with rank 0's error when it fails.
"""
from __future__ import annotations

import datetime
import json
import logging
import shutil
from pathlib import Path
from typing import Any, Callable, TypeVar

import torch

from dglx_dist.checkpoint import files
from dglx_dist.errors import CheckpointError
from dglx_dist.runtime.comm import Comm
from dglx_dist.runtime.failure import same_on_every_rank

__all__ = ["save", "find", "on_rank_zero"]

T = TypeVar("T")

log = logging.getLogger(__name__)


def _exchange_json(world: Comm, obj: Any) -> list[Any]:
    """Every rank's JSON-able ``obj`` (decoded with ``json``, never unpickled)."""
    raw = torch.frombuffer(bytearray(json.dumps(obj).encode()), dtype=torch.uint8)
    return [json.loads(bytes(t.tolist())) for t in world.all_gather_v(raw)]


def save(world: Comm, root: Path, epoch: int, meta: dict[str, Any], blobs: dict[str, bytes],
         keep: int) -> Path:
    """Writes this rank's ``blobs`` (file name -> bytes) into the checkpoint of ``epoch`` under
    ``root``; ``meta`` (epoch, step, world_size, strategy, ...) goes into the manifest (rank
    0's). Returns the checkpoint's directory (collective)."""
    root, rank = Path(root), world.global_rank
    staging = files.staging_dir(root, epoch)
    error = ""
    if rank == 0:
        try:
            root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(staging, ignore_errors=True)  # a crashed save's leftovers
            staging.mkdir()
        except OSError as exc:
            error = f"cannot create {staging}: {exc.strerror or exc}"
    if world.failed_ranks(not error):
        raise CheckpointError(f"checkpoint of epoch {epoch}: rank 0 could not prepare {root}"
                              + (f" ({error})" if error else " (see rank 0's log)"))
    entries: dict[str, Any] = {}
    try:
        for name, data in blobs.items():
            entries[name] = files.write_file(staging, name, data)
    except OSError as exc:
        error = f"{exc.strerror or exc} writing {staging}"
    reports = _exchange_json(world, {"error": error, "files": entries})
    failed = {r: rep["error"] for r, rep in enumerate(reports) if rep["error"]}
    if rank == 0 and not failed:
        try:
            merged: dict[str, Any] = {}
            for r, rep in enumerate(reports):
                for name, entry in rep["files"].items():
                    if name in merged:
                        raise CheckpointError(f"ranks wrote the same file {name!r}")
                    size = (staging / name).stat().st_size
                    if size != entry["bytes"]:
                        raise CheckpointError(f"rank {r}'s {name} has {size} bytes on rank 0, "
                                              f"{entry['bytes']} written: is {root} shared?")
                    merged[name] = entry
            manifest = {"format": files.FORMAT, **meta, "epoch": int(epoch), "files": merged,
                        "created": datetime.datetime.now(datetime.timezone.utc).isoformat()}
            files.commit(root, epoch, manifest, keep)
        except (OSError, CheckpointError) as exc:
            failed[0] = f"committing: {exc}"
    if world.failed_ranks(not failed):
        if rank == 0:
            shutil.rmtree(staging, ignore_errors=True)
        detail = "; ".join(f"rank {r}: {msg}" for r, msg in failed.items()) or "see rank 0's log"
        raise CheckpointError(f"checkpoint of epoch {epoch} under {root} was not written "
                              f"({detail}); the previous checkpoints are unchanged")
    path = root / files.checkpoint_name(epoch)
    if rank == 0:
        log.debug("checkpoint written: %s", path)
    return path


def find(world: Comm, root: Path) -> tuple[Path, dict[str, Any], Callable[[str], bytes]] | None:
    """The newest intact checkpoint under ``root`` as ``(path, manifest, read)``, with
    ``read(name)`` returning a file's verified bytes; None on every rank when there is none
    (collective)."""
    root = Path(root)
    epoch = -1
    if world.global_rank == 0:
        found = files.find_latest(root)
        epoch = found[1]["epoch"] if found is not None else -1
    epoch = int(world.broadcast(torch.tensor([epoch], dtype=torch.int64), 0)[0])
    if epoch < 0:
        return None
    path = root / files.checkpoint_name(epoch)
    manifest = files.read_manifest(path)
    return path, manifest, lambda name: files.read_file(path, manifest, name)


def on_rank_zero(world: Comm, decide: Callable[[], T]) -> T | None:
    """Runs ``decide`` on rank 0 alone; returns its result there and None elsewhere
    (collective).

    Raises:
        CheckpointError: on every rank, with rank 0's message, when ``decide`` raised one:
            rank 0 reports it (one line), and no rank waits in a later collective.
    """
    result, error = None, None
    if world.global_rank == 0:
        try:
            result = decide()
        except CheckpointError as exc:
            error = exc
    message = _exchange_json(world, str(error) if error is not None else "")[0]
    if message:
        raise same_on_every_rank(error if error is not None else CheckpointError(message))
    return result
