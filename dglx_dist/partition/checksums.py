"""A partition's part files against their checksums: the full check, and the sampled check
that per-chunk checksums allow at the loads after a host's full check.

A part file's manifest entry (:mod:`~dglx_dist.partition.io`) holds, besides its size and
SHA-256, ``chunks``: the SHA-256 of every :data:`CHUNK_BYTES` chunk and ``of_sha256``, the file
checksum they were computed with; writers compute both in one pass. The chunk sums are bound
to the file's SHA-256: the full check (:func:`verify_file`) hashes the file whole and every
chunk in one pass and refuses the file unless both match, and only chunk sums that describe
the file (:func:`usable`: of its checksum, one per chunk of its size) are ever sampled; a file
without them is hashed whole at every load. The entry, when a load checks in full and when a
sample (:func:`sample_size`), and how likely a sample finds damage
(:func:`catch_probability`), are docs/partition_format.md's.
"""
from __future__ import annotations

import hashlib
import math
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from dglx_dist.data.owned import sha256_file
from dglx_dist.errors import PartitionFormatError

__all__ = ["CHUNK_BYTES", "MAX_CHUNK_BYTES", "MIN_SAMPLE", "SAMPLE_FRACTION", "Checked",
           "file_sums", "chunk_entry", "usable", "check_entry", "sample_size",
           "catch_probability", "verify_files", "verify_file", "verify_sample"]

CHUNK_BYTES = 1 << 20
MAX_CHUNK_BYTES = 1 << 26  # what a manifest may declare: a chunk is read into memory whole
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
    """Whether the file entry ``info`` has chunk sums that describe its file: computed with
    its current checksum, one hex SHA-256 per chunk of its size. A file without them (none,
    stale, too few or too many) is hashed whole at every load, never sampled."""
    chunks, size = info.get("chunks"), info.get("bytes")
    return (_well_formed(chunks) and isinstance(size, int) and not isinstance(size, bool)
            and size >= 0 and chunks["of_sha256"] == info.get("sha256")
            and len(chunks["sha256"]) == -(-size // chunks["chunk_bytes"]))


def check_entry(where: str, info: Mapping[str, Any]) -> None:
    """Checks a file entry's optional ``chunks`` field: a chunk size, the file checksum the
    sums were made with and, when that is the file's, one hex SHA-256 per chunk of its size.

    Raises:
        PartitionFormatError: naming ``where`` and what was expected."""
    if "chunks" not in info:
        return
    chunks = info["chunks"]
    if not _well_formed(chunks):
        raise PartitionFormatError(f"{where}.chunks = {chunks!r:.80}; expected {{chunk_bytes: "
                                   f"int in [1, {MAX_CHUNK_BYTES}], of_sha256: hex, sha256: "
                                   f"[hex, one per chunk]}}")
    step, sums = chunks["chunk_bytes"], chunks["sha256"]
    expected = -(-info["bytes"] // step)
    if chunks["of_sha256"] == info["sha256"] and len(sums) != expected:
        raise PartitionFormatError(f"{where}.chunks lists {len(sums)} chunk sums; expected "
                                   f"{expected} for {info['bytes']} bytes in chunks of {step}")


def _well_formed(chunks: Any) -> bool:
    """A ``chunks`` field's shape: a chunk size in [1, :data:`MAX_CHUNK_BYTES`], a checksum,
    a list of hex SHA-256s."""
    if not isinstance(chunks, dict):
        return False
    step, sums = chunks.get("chunk_bytes"), chunks.get("sha256")
    return (isinstance(step, int) and not isinstance(step, bool)
            and 0 < step <= MAX_CHUNK_BYTES
            and isinstance(chunks.get("of_sha256"), str) and isinstance(sums, list)
            and all(isinstance(s, str) and len(s) == 64 and _HEX.issuperset(s) for s in sums))


def sample_size(num_chunks: int) -> int:
    """How many of a file's ``num_chunks`` chunks a load hashes."""
    return min(num_chunks, max(MIN_SAMPLE, math.ceil(num_chunks * SAMPLE_FRACTION)))


def catch_probability(num_chunks: int, damaged: int, sample: int | None = None) -> float:
    """The chance that a sample of ``sample`` distinct chunks (default
    :func:`sample_size`) drawn uniformly from ``num_chunks`` holds at least one of
    ``damaged`` damaged ones: ``1 - C(n-k, s) / C(n, s)``."""
    s = sample_size(num_chunks) if sample is None else sample
    return 1.0 - math.comb(num_chunks - damaged, s) / math.comb(num_chunks, s)


@dataclass(frozen=True)
class Checked:
    """What a check of a part's files hashed.

    Attributes:
        files: the files checked (every one's size, then its bytes).
        whole: of them, those hashed whole: SHA-256 and every chunk sum (the full check; at a
            sampled load, the files without usable chunk sums).
        sampled: chunks hashed by the sampled check.
        of_chunks: the chunks of the sampled files.
    """

    files: int = 0
    whole: int = 0
    sampled: int = 0
    of_chunks: int = 0


def verify_files(folder: Path, files: Mapping[str, Mapping[str, Any]],
                 sampler: random.Random | None = None) -> Checked:
    """Checks the files of a part's ``folder`` against their manifest entries ``files``
    (name -> entry): each one's size, then in full (:func:`verify_file`), or with a
    ``sampler``, a sample of its chunks drawn by it where it has usable chunk sums (in full
    where it has none).

    Raises:
        PartitionFormatError: naming the first missing, resized or damaged file (and chunk)."""
    whole = sampled = of_chunks = 0
    for name, info in files.items():
        file = folder / name
        if not file.is_file():
            raise PartitionFormatError(f"{file}: missing (listed in the manifest)")
        size = file.stat().st_size
        if size != info["bytes"]:
            raise PartitionFormatError(f"{file}: {size} bytes; the manifest says {info['bytes']}")
        if sampler is not None and usable(info):
            sampled += verify_sample(file, info, sampler)
            of_chunks += len(info["chunks"]["sha256"])
        else:
            verify_file(file, info)
            whole += 1
    return Checked(len(files), whole, sampled, of_chunks)


def verify_file(file: Path, info: Mapping[str, Any]) -> None:
    """The full check: hashes ``file`` (of the size ``info`` says, checked before) whole and,
    in the same pass, every chunk; the file must match its SHA-256 and, where ``info`` has
    usable chunk sums, every one of them (chunk sums bound to the file's checksum).

    Raises:
        PartitionFormatError: naming the file, and the first chunk that differs."""
    chunked = usable(info)
    digest, sums = (file_sums(file, info["chunks"]["chunk_bytes"]) if chunked else
                    (sha256_file(file), []))
    bad = next((i for i, (got, want) in enumerate(zip(sums, info["chunks"]["sha256"]))
                if got != want), None) if chunked else None
    if digest == info["sha256"] and bad is None:
        return
    if bad is not None:
        note = ("the whole file matches its sha256, so the manifest's chunk sums do not describe "
                "it (partition.json was changed)" if digest == info["sha256"] else
                "the file is damaged or was replaced")
        raise _chunk_error(file, info, bad, sums[bad], note)
    edited = (" (its chunk sums in the manifest match it: partition.json was changed after it "
              "was written)" if chunked else "")
    raise PartitionFormatError(
        f"{file}: sha256 {digest[:16]}... does not match the manifest's {info['sha256'][:16]}"
        f"...; the file is damaged or was replaced{edited}")


def verify_sample(file: Path, info: Mapping[str, Any], rng: random.Random) -> int:
    """Hashes a random sample (:func:`sample_size`, drawn by ``rng``) of ``file``'s chunks
    against its usable chunk sums; returns how many were hashed.

    Raises:
        PartitionFormatError: naming the file and the damaged chunk."""
    size, sums = info["chunks"]["chunk_bytes"], info["chunks"]["sha256"]
    picked = sorted(rng.sample(range(len(sums)), sample_size(len(sums))))
    with open(file, "rb") as f:
        for i in picked:
            f.seek(i * size)
            digest = hashlib.sha256(f.read(size)).hexdigest()
            if digest != sums[i]:
                raise _chunk_error(
                    file, info, i, digest, f"the file is damaged or was replaced (found by the "
                    f"sampled check of {len(picked)} of {len(sums)} chunks that loads after "
                    f"this host's first full check make; `dglx verify` checks every byte)")
    return len(picked)


def _chunk_error(file: Path, info: Mapping[str, Any], i: int, digest: str,
                 note: str) -> PartitionFormatError:
    size, want = info["chunks"]["chunk_bytes"], info["chunks"]["sha256"][i]
    lo, hi = i * size, min((i + 1) * size, info["bytes"])
    return PartitionFormatError(
        f"{file}: sha256 of chunk {i} (bytes {lo}-{hi - 1}) {digest[:16]}... does not match "
        f"the manifest's {want[:16]}...; {note}")
