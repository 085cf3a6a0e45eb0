"""The on-disk checkpoint format: one directory per checkpoint, its manifest written last
(docs/reliability.md, "On disk").

``epoch-NNNNNN/`` (epochs completed) is built under ``.epoch-NNNNNN.tmp`` and renamed into place
once ``manifest.json`` (every file's size and SHA-256) is synced. Files are ``torch.save``
archives of plain data, read with ``torch.load(weights_only=True)`` after their checksum
matched. Single-process; :mod:`dglx_dist.checkpoint.collective` runs it over ranks.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import torch

from dglx_dist.data.atomic import replace_directory
from dglx_dist.data.nolinks import create_new, open_new
from dglx_dist.data.owned import Record, describe_unproven, remove_recorded, unproven
from dglx_dist.errors import CheckpointError, InvalidValueError

__all__ = ["FORMAT", "MANIFEST", "checkpoint_name", "staging_dir", "encode", "decode",
           "write_file", "commit", "read_manifest", "read_file", "verify", "find_latest",
           "list_checkpoints", "describe_unusable", "checkpoint_record",
           "make_root", "check_contents", "check_matches", "LOCK_FILE"]

log = logging.getLogger(__name__)

FORMAT = 1
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 16 << 20  # a manifest lists files: megabytes would already be absurd
_DIR = re.compile(r"^epoch-(\d{6,9})$")
_FILE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$")
_SHA = re.compile(r"^[0-9a-f]{64}$")
LOCK_FILE = ".dglx-job.lock"  # the lock of the job using the root (checkpoint.lock)
# what a checkpoint root may hold: checkpoints, their staging and replaced directories
# (atomic's temporaries), what a replacement kept of files no manifest listed, and the lock
# of the job using it
_DIRS = r"epoch-\d{6,9}|\.epoch-\d{6,9}\.(tmp|old-.*|tmp-.*)|epoch-\d{6,9}\.kept-.*"
_OURS = re.compile(rf"^({_DIRS}|\.write-probe-\d+|\.dglx-job\.lock)$")
# the names of those that are directories dglx made (a link or file there is not its own)
_DIR_NAMES = re.compile(rf"^({_DIRS})$")


def checkpoint_name(epoch: int) -> str:
    """The directory name of the checkpoint taken after ``epoch`` completed epochs."""
    return f"epoch-{int(epoch):06d}"


def staging_dir(root: Path, epoch: int) -> Path:
    """Where the checkpoint of ``epoch`` is built before it is renamed into place."""
    return Path(root) / f".{checkpoint_name(epoch)}.tmp"


def encode(obj: Any) -> bytes:
    """``obj`` (tensors, numbers, strings, lists, tuples, dicts) as a torch.save archive."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def decode(data: bytes, what: str) -> Any:
    """The object of :func:`encode`'s archive ``data``; only plain data is accepted."""
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # the restricted unpickler raises many types
        raise CheckpointError(f"{what}: not a checkpoint archive of plain data "
                              f"({type(exc).__name__}: {exc})") from None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(directory: Path, name: str, data: bytes) -> dict[str, Any]:
    """Writes ``data`` to ``directory/name`` and syncs it; returns its manifest entry."""
    if not _FILE.match(name):
        raise InvalidValueError(f"checkpoint file name {name!r}; expected letters, digits, '_.-'")
    with open_new(Path(directory) / name) as f:  # never through a planted link
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def commit(root: Path, epoch: int, manifest: dict[str, Any], keep: int) -> Path:
    """Writes the manifest into the staging directory of ``epoch`` and renames it into place;
    then removes all but the newest ``keep`` checkpoints. Returns the checkpoint's path."""
    root, staging = Path(root), staging_dir(root, epoch)
    write_file(staging, MANIFEST + ".tmp", json.dumps(manifest, indent=1, sort_keys=True).encode())
    os.rename(staging / (MANIFEST + ".tmp"), staging / MANIFEST)
    _fsync_dir(staging)
    final = root / checkpoint_name(epoch)
    if final.exists():  # an earlier run's checkpoint of this epoch: replaced if provably one
        _clear_for(final)
    replace_directory(staging, final, record_of=checkpoint_record)
    _fsync_dir(root)
    for _, path in list_checkpoints(root)[:-keep] if keep > 0 else []:
        if path.is_symlink():  # not ours, nor what it points to: never pruned through
            continue
        left = remove_recorded(path, checkpoint_record(path))
        if left:
            log.warning("kept %s: it holds %s, which its manifest does not list", path,
                        describe_unproven(left))
    return final


def _clear_for(final: Path) -> None:
    """Lets a new checkpoint take ``final``'s place: a checkpoint whose own files changed
    since, or whose manifest cannot be read (the damaged one a resume skipped), is moved
    aside whole, ``NAME.kept-*`` with a warning; one holding anything its manifest does not
    list (or with no manifest: the user's) is refused."""
    if final.is_symlink() or not final.is_dir():
        raise CheckpointError(f"{final} is {_not_a_dir(final)}, "
                              f"where dglx writes a checkpoint; refusing to replace it: remove "
                              f"it or choose another --checkpoint-dir")
    record = checkpoint_record(final)
    bad = unproven(final, record)
    damaged = record is None and (final / MANIFEST).is_file()  # a manifest a resume skipped
    if bad and (damaged or record is not None and all(rel in record.files for rel in bad)):
        aside = Path(tempfile.mkdtemp(prefix=f"{final.name}.kept-", dir=final.parent))
        os.replace(final, aside / final.name)  # whole: nothing is lost, whoever's it was
        what = "its manifest cannot be read" if damaged else \
            f"{describe_unproven(bad)} changed since it was written"
        log.warning("%s is damaged (%s); moved aside whole to %s", final, what, aside)
    elif bad:
        raise CheckpointError(f"{final} holds {describe_unproven(bad)}, which no checkpoint "
                              f"manifest lists; refusing to replace it: move it or choose "
                              f"another --checkpoint-dir")


def checkpoint_record(path: Path) -> Record | None:
    """What the checkpoint directory ``path`` provably holds: its manifest's files (None when
    the manifest is missing or damaged: then nothing in it is provably a checkpoint's)."""
    try:
        return Record("checkpoint", read_manifest(path)["files"], name=MANIFEST)
    except CheckpointError:
        return None


def check_matches(path: Path, manifest: dict[str, Any], expected: dict[str, Any]) -> None:
    """Refuses the checkpoint at ``path`` when its manifest records another value for a key
    of ``expected`` (the job's world size, strategy, and ``data``: the partitions' content
    fingerprint, which checkpoints before it recorded none)."""
    for key, value in expected.items():
        if manifest.get(key, value) != value:
            what = " (another dataset or partitioning)" if key == "data" else ""
            raise CheckpointError(f"{path} was written with {key}={manifest[key]!r}; this job "
                                  f"has {key}={value!r}{what}")


def make_root(root: Path) -> list[Path]:
    """Creates the checkpoint root ``root`` (with its parents) and checks that it can be
    written; returns the directories it created, innermost first.

    Raises:
        CheckpointError: ``root`` is a file or cannot be created or written.
    """
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise CheckpointError(f"--checkpoint-dir {root} is a file; expected a directory")
    made = [p for p in (root, *root.parents) if not p.exists()]
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".write-probe-{os.getpid()}"
        os.close(create_new(probe))  # never through a planted link
        probe.unlink()
    except OSError as exc:
        raise CheckpointError(f"--checkpoint-dir {root} cannot be written "
                              f"({exc.strerror or exc}); choose a writable directory") from None
    return made


def check_contents(root: Path) -> None:
    """Refuses a checkpoint root holding anything but checkpoints (before the first epoch:
    pruning works in it)."""
    root = Path(root)
    foreign = sorted(p.name for p in root.iterdir() if not _OURS.match(p.name)) if \
        root.is_dir() else []
    if foreign:
        raise CheckpointError(f"--checkpoint-dir {root} holds {describe_unproven(foreign)}, "
                              f"which are not checkpoints; choose an empty or new directory "
                              f"(old checkpoints are pruned there)")
    for path in sorted(root.iterdir()) if root.is_dir() else []:
        if _DIR_NAMES.match(path.name) and (path.is_symlink() or not path.is_dir()):
            raise CheckpointError(f"--checkpoint-dir {root} holds {path.name}, {_not_a_dir(path)}"
                                  f", under a name where dglx keeps its checkpoints (it never "
                                  f"writes or deletes through a link, nor replaces a file it did "
                                  f"not make): remove it (what a link points to is left as it is)"
                                  f" or choose another directory")


def _not_a_dir(path: Path) -> str:
    """What ``path``, found where dglx keeps a checkpoint directory, is instead."""
    if path.is_symlink():
        return f"a symbolic link (to {os.readlink(path)})"
    return "not a directory"


def list_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """``(epoch, path)`` of the committed-looking checkpoint directories, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir()
             if (m := _DIR.match(p.name)) and p.is_dir()]
    return sorted(found)


def _int(manifest: dict, key: str, low: int, high: int, where: Path) -> int:
    value = manifest.get(key)
    if type(value) is not int or not low <= value <= high:
        raise CheckpointError(f"{where}: field {key!r} is {value!r}; expected an integer in "
                              f"[{low}, {high}]")
    return value


def read_manifest(path: Path) -> dict[str, Any]:
    """The validated manifest of the checkpoint directory ``path``."""
    path = Path(path)
    mpath = path / MANIFEST
    try:
        size = mpath.stat().st_size
        if size > MAX_MANIFEST_BYTES:
            raise CheckpointError(f"{mpath}: {size} bytes; a manifest is at most "
                                  f"{MAX_MANIFEST_BYTES}")
        manifest = json.loads(mpath.read_bytes())
    except OSError as exc:
        raise CheckpointError(f"{mpath}: cannot read the manifest ({exc.strerror or exc}); "
                              f"the checkpoint is incomplete") from None
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"{mpath}: not valid JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise CheckpointError(f"{mpath}: expected a JSON object, got {type(manifest).__name__}")
    if manifest.get("format") != FORMAT:
        raise CheckpointError(f"{mpath}: format {manifest.get('format')!r}; this version reads "
                              f"format {FORMAT}")
    for key, high in (("epoch", 10**9), ("step", 2**62), ("world_size", 1 << 20)):
        _int(manifest, key, 0 if key != "world_size" else 1, high, mpath)
    if not isinstance(manifest.get("strategy"), str):
        raise CheckpointError(f"{mpath}: field 'strategy' must be a string")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise CheckpointError(f"{mpath}: field 'files' must be a non-empty object")
    for name, entry in files.items():
        if not _FILE.match(name):
            raise CheckpointError(f"{mpath}: file name {name!r} is not a plain file name")
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str) or \
                not _SHA.match(entry["sha256"]):
            raise CheckpointError(f"{mpath}: file {name!r} needs a hex 'sha256'")
        _int(entry, "bytes", 0, 1 << 44, mpath)
    return manifest


def read_file(path: Path, manifest: dict[str, Any], name: str) -> bytes:
    """The bytes of checkpoint file ``name``, after checking its size and SHA-256."""
    entry = manifest["files"].get(name)
    if entry is None:
        raise CheckpointError(f"{path}: the manifest lists no file {name!r} (this job needs it; "
                              f"was the checkpoint written by a job of another shape?)")
    fpath = Path(path) / name
    try:
        size = fpath.stat().st_size
        if size != entry["bytes"]:  # checked before reading: a declared size allocates nothing
            raise CheckpointError(f"{fpath}: {size} bytes, the manifest says {entry['bytes']} "
                                  f"(truncated or replaced)")
        data = fpath.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"{fpath}: cannot read ({exc.strerror or exc})") from None
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise CheckpointError(f"{fpath}: SHA-256 differs from the manifest (damaged)")
    return data


def verify(path: Path, manifest: dict[str, Any]) -> None:
    """Checks every file the manifest lists."""
    for name in manifest["files"]:
        read_file(path, manifest, name)


def _check(path: Path, epoch: int) -> dict[str, Any]:
    manifest = read_manifest(path)
    if manifest["epoch"] != epoch:
        raise CheckpointError(f"{path}: the manifest says epoch {manifest['epoch']}")
    verify(path, manifest)
    return manifest


def describe_unusable(root: Path) -> str:
    """Why ``root`` yields no checkpoint, for a message: it is missing, holds none, or each
    one's first problem."""
    root = Path(root)
    if not root.is_dir():
        return " (the directory does not exist)"
    problems = []
    for epoch, path in list_checkpoints(root):
        try:
            _check(path, epoch)
        except CheckpointError as exc:
            problems.append(str(exc))
    if not problems:
        return " (it holds no epoch-NNNNNN checkpoint)"
    return "; every checkpoint is damaged: " + "; ".join(problems)


def find_latest(root: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint under ``root`` whose manifest and every file are intact; damaged
    newer ones are skipped with a warning. None when there is none."""
    for epoch, path in reversed(list_checkpoints(root)):
        try:
            return path, _check(path, epoch)
        except CheckpointError as exc:
            log.warning("skipping checkpoint %s: %s", path, exc)
    return None
