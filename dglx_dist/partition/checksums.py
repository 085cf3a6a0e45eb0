"""A partition's part files against their checksums: the full check, and the sampled check
that per-chunk checksums allow at every load.

A part file's manifest entry (:mod:`~dglx_dist.partition.io`) holds, besides its size and
SHA-256, ``chunks``: the SHA-256 of every :data:`CHUNK_BYTES` chunk and ``of_sha256``, the file
checksum they were computed with (stale chunk sums are not used); writers compute both in one
pass. The entry, when a load checks every chunk and when a sample (:func:`sample_size`), and
how likely a sample finds damage (:func:`catch_probability`), are docs/partition_format.md's.
"""
from __future__ import annotations

import hashlib
import math
import os
import random
from pathlib import Path
from typing import Any, Iterable, Mapping

from dglx_dist.data.owned import sha256_file
from dglx_dist.errors import PartitionFormatError

__all__ = ["CHUNK_BYTES", "MIN_SAMPLE", "SAMPLE_FRACTION", "file_sums", "chunk_entry", "usable",
           "check_entry", "sample_size", "catch_probability", "verify_files", "verify_file",
           "verify_sample"]

CHUNK_BYTES = 1 << 20
MIN_SAMPLE = 8  # chunks per file and load: files up to 8 MiB are hashed whole at every load
SAMPLE_FRACTION = 1 / 16  # of a larger file's chunks, per load
_HEX = frozenset("0123456789abcdef")


def file_sums(path: str | os.PathLike, chunk_bytes: int = CHUNK_BYTES) -> tuple[str, list[str]]:
    """The hex SHA-256 of the file ``path`` and of each of its ``chunk_bytes`` chunks, in
    one read."""
    whole, sums = hashlib.sha256(), []
    with open(path, "rb") as f:
        while block := f.read(chunk_bytes):
            whole.update(block)
            sums.append(hashlib.sha256(block).hexdigest())
    return whole.hexdigest(), sums


def chunk_entry(sha256: str, sums: list[str], chunk_bytes: int = CHUNK_BYTES) -> dict[str, Any]:
    """A file entry's ``chunks`` field for chunk sums ``sums`` of the file hashing to
    ``sha256``."""
    return {"chunk_bytes": chunk_bytes, "of_sha256": sha256, "sha256": sums}


def usable(info: Mapping[str, Any]) -> bool:
    """Whether the file entry ``info`` (checked by :func:`check_entry`) has chunk sums that
    describe its file: present and computed with its current checksum."""
    chunks = info.get("chunks")
    return isinstance(chunks, dict) and chunks.get("of_sha256") == info.get("sha256")


def check_entry(where: str, info: Mapping[str, Any]) -> None:
    """Checks a file entry's optional ``chunks`` field: a chunk size, the file checksum the
    sums were made with and, when that is the file's, one hex SHA-256 per chunk of its size.

    Raises:
        PartitionFormatError: naming ``where`` and what was expected."""
    if "chunks" not in info:
        return
    chunks = info["chunks"]
    size = chunks.get("chunk_bytes") if isinstance(chunks, dict) else None
    sums = chunks.get("sha256") if isinstance(chunks, dict) else None
    ok = (isinstance(size, int) and not isinstance(size, bool) and size > 0
          and isinstance(chunks.get("of_sha256"), str) and isinstance(sums, list)
          and all(isinstance(s, str) and len(s) == 64 and _HEX.issuperset(s) for s in sums))
    if not ok:
        raise PartitionFormatError(f"{where}.chunks = {chunks!r:.80}; expected {{chunk_bytes: "
                                   f"int > 0, of_sha256: hex, sha256: [hex, one per chunk]}}")
    if usable(info) and len(sums) != math.ceil(info["bytes"] / size):
        raise PartitionFormatError(f"{where}.chunks lists {len(sums)} chunk sums; expected "
                                   f"{math.ceil(info['bytes'] / size)} for {info['bytes']} "
                                   f"bytes in chunks of {size}")


def sample_size(num_chunks: int) -> int:
    """How many of a file's ``num_chunks`` chunks a load hashes."""
    return min(num_chunks, max(MIN_SAMPLE, math.ceil(num_chunks * SAMPLE_FRACTION)))


def catch_probability(num_chunks: int, damaged: int, sample: int | None = None) -> float:
    """The chance that a sample of ``sample`` distinct chunks (default
    :func:`sample_size`) drawn uniformly from ``num_chunks`` holds at least one of
    ``damaged`` damaged ones: ``1 - C(n-k, s) / C(n, s)``."""
    s = sample_size(num_chunks) if sample is None else sample
    return 1.0 - math.comb(num_chunks - damaged, s) / math.comb(num_chunks, s)


def verify_files(folder: Path, files: Mapping[str, Mapping[str, Any]],
                 sampler: random.Random | None = None) -> int:
    """Checks the files of a part's ``folder`` against their manifest entries ``files``
    (name -> entry): each one's size, then in full (its chunks, or without usable chunk sums
    its SHA-256), or with a ``sampler``, a sample of its chunks drawn by it (none without
    chunk sums). Returns how many chunks a sampled check hashed.

    Raises:
        PartitionFormatError: naming the first missing, resized or damaged file (and chunk)."""
    hashed = 0
    for name, info in files.items():
        file = folder / name
        if not file.is_file():
            raise PartitionFormatError(f"{file}: missing (listed in the manifest)")
        size = file.stat().st_size
        if size != info["bytes"]:
            raise PartitionFormatError(f"{file}: {size} bytes; the manifest says {info['bytes']}")
        if sampler is not None:
            hashed += verify_sample(file, info, sampler) if usable(info) else 0
        elif usable(info):  # one pass over the chunks is the whole file's check
            verify_file(file, info)
        elif (digest := sha256_file(file)) != info["sha256"]:
            raise PartitionFormatError(
                f"{file}: sha256 {digest[:16]}... does not match the manifest's "
                f"{info['sha256'][:16]}...; the file is damaged or was replaced")
    return hashed


def verify_file(file: Path, info: Mapping[str, Any]) -> None:
    """Hashes every chunk of ``file`` (of the size ``info`` says, checked before) against
    its usable chunk sums: the full check, naming the first damaged chunk.

    Raises:
        PartitionFormatError: naming the file and the chunk."""
    _compare(file, info, range(len(info["chunks"]["sha256"])), "")


def verify_sample(file: Path, info: Mapping[str, Any], rng: random.Random) -> int:
    """Hashes a random sample (:func:`sample_size`, drawn by ``rng``) of ``file``'s chunks
    against its usable chunk sums; returns how many were hashed.

    Raises:
        PartitionFormatError: naming the file and the damaged chunk."""
    n = len(info["chunks"]["sha256"])
    picked = sorted(rng.sample(range(n), sample_size(n)))
    _compare(file, info, picked, f" (found by the sampled check of {len(picked)} of {n} "
             f"chunks at load: `dglx verify` checks every chunk)")
    return len(picked)


def _compare(file: Path, info: Mapping[str, Any], indices: Iterable[int], note: str) -> None:
    size, sums = info["chunks"]["chunk_bytes"], info["chunks"]["sha256"]
    with open(file, "rb") as f:
        for i in indices:
            f.seek(i * size)
            digest = hashlib.sha256(f.read(size)).hexdigest()
            if digest != sums[i]:
                lo, hi = i * size, min((i + 1) * size, info["bytes"])
                raise PartitionFormatError(
                    f"{file}: sha256 of chunk {i} (bytes {lo}-{hi - 1}) {digest[:16]}... does "
                    f"not match the manifest's {sums[i][:16]}...; the file is damaged or was "
                    f"replaced{note}")
