"""Shared-memory tensors and raw-byte views, for the distributed store.

A part's tensor lives in a file under ``/dev/shm`` (or the system temp directory where there is
none) named by a per-job token: one rank creates and fills it, the server's other ranks
``mmap`` it, then it is unlinked; every rank keeps it open (:class:`SharedFile`), so that the
remote-row cache can grow it in place (docs/kvstore.md, "How it works"). :class:`SharedParts`
does both for a distributed store, collectively.
"""
from __future__ import annotations

import errno
import functools
import logging
import math
import mmap
import os
import secrets
import shutil
import tempfile
import zlib
from pathlib import Path
from typing import Callable

import torch

from dglx_dist.errors import DiskFullError, InvalidValueError, ProtocolError, StateError
from dglx_dist.kvstore.entries import InitSpec, TensorEntry

__all__ = ["default_shm_dir", "SharedFile", "to_bytes", "from_bytes", "SharedParts",
           "EMPTY_I64", "EMPTY_U8"]

log = logging.getLogger(__name__)
_SIGNATURE = ("ok", "name", "index", "num_rows", "num_parts", "dtype", "trailing", "policy")

EMPTY_I64 = torch.zeros(0, dtype=torch.int64)
EMPTY_U8 = torch.zeros(0, dtype=torch.uint8)


def default_shm_dir() -> Path:
    """``/dev/shm`` when it is a writable directory, else the system temp directory."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return shm
    return Path(tempfile.gettempdir())


def _crc(value) -> int:
    return zlib.crc32(str(value).encode())


def _nbytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    return math.prod(shape) * dtype.itemsize


def _map(fd: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    mapping = mmap.mmap(fd, _nbytes(shape, dtype))
    # the tensor keeps a reference to the mapping: it stays mapped as long as the tensor lives
    return torch.frombuffer(mapping, dtype=dtype).view(shape)


class SharedFile:
    """A tensor's file in shared memory, kept open by this process until :meth:`close`, so that
    it can grow after it is unlinked (the mappings, not the name, keep the memory).

    Its pages are reserved before they are written: on a full tmpfs (a container's 64 MB
    ``/dev/shm``) writing into a mapping past its free space would kill the process with
    SIGBUS, where reserving fails with an ``OSError`` that says how much was needed.
    """

    def __init__(self, path: Path, create: bool):
        """Opens ``path``; with ``create`` it must not exist (FileExistsError: another job's or
        a stale file is never overwritten)."""
        self.path = path
        self.fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0), 0o600)

    def grow(self, start: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """The file mapped as ``dtype`` of ``shape``, its bytes from ``start`` on reserved
        (DiskFullError: the file system cannot hold them); the bytes before stay as written."""
        _reserve(self.fd, self.path, start, _nbytes(shape, dtype) - start)
        return _map(self.fd, shape, dtype)

    def map(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """The file (another rank made it) mapped as ``dtype`` of ``shape``; ProtocolError
        when its size is not that of such a tensor."""
        size = os.fstat(self.fd).st_size
        if size != _nbytes(shape, dtype):
            raise ProtocolError(f"shared tensor {self.path} has {size} bytes; expected "
                                f"{_nbytes(shape, dtype)} for {dtype} of shape {shape}")
        return _map(self.fd, shape, dtype)

    def close(self) -> None:
        os.close(self.fd)


def _reserve(fd: int, path: Path, offset: int, nbytes: int) -> None:
    if nbytes <= 0:
        return
    try:
        os.posix_fallocate(fd, offset, nbytes)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL):  # a file system without fallocate
            os.ftruncate(fd, offset + nbytes)
            return
        free = shutil.disk_usage(path.parent).free
        raise DiskFullError(exc.errno, f"cannot hold {nbytes / 2**20:,.1f} MiB of shared tensor in "
                      f"{path.parent} ({free / 2**20:,.1f} MiB free: {exc.strerror}); expected "
                      f"room for this server's parts: enlarge it (docker run --shm-size) or "
                      f"free it") from None


def to_bytes(rows: torch.Tensor) -> torch.Tensor:
    """``rows`` as a flat uint8 tensor (a view when contiguous)."""
    return rows.contiguous().reshape(-1).view(torch.uint8)


def from_bytes(buf: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Reinterprets a flat uint8 tensor as ``dtype`` of ``shape`` (copies when misaligned)."""
    if buf.numel() != _nbytes(shape, dtype):
        raise ProtocolError(f"received {buf.numel()} bytes; expected {_nbytes(shape, dtype)} "
                            f"for {dtype} of shape {shape}")
    if buf.storage_offset() % dtype.itemsize:
        buf = buf.clone()
    return buf.view(dtype).view(shape)


class SharedParts:
    """A distributed store's collective ``init_data``: the ranks agree on the request, one rank
    per part creates and fills the part's file in ``shm_dir``, the server's other ranks map it,
    then it is unlinked. Building it is collective (the files' per-job ``token`` is rank 0's).

    Args:
        world, server: the job's and the server's communicators.
        shm_dir: where the files are created; seed: mixed into callable initialisers' seeds.
    """

    def __init__(self, world, server, shm_dir: Path, seed: int):
        self.world, self.server, self.dir, self.seed = world, server, Path(shm_dir), seed
        self.token = f"{int(self._gather(torch.tensor([secrets.randbits(62)]))[0, 0]):016x}"
        self._files: dict[str, SharedFile] = {}  # by name, open so that it can grow

    def create(self, shards, name: str, spec: InitSpec | None,
               error: Exception | None) -> TensorEntry:
        """The entry of request ``spec`` (None: this rank's failed with ``error``), its parts
        mapped, registered with ``shards`` (a :class:`~dglx_dist.kvstore.shards.Shards`).
        ValueError: a rank's request was bad, or the ranks' differ; StateError: a rank could not
        create or map its parts."""
        has = self._agree(name, spec, error, len(shards))
        entry = TensorEntry.from_spec(spec, len(shards))
        servers = shards.part_servers(spec.policy)
        ranks = shards.topology.server_ranks(shards.server)
        mine = [p for p, s in enumerate(servers) if s == shards.server]
        writers = {p: next((r for r in ranks if has[r][p]), ranks[0]) for p in mine}
        shapes = {p: (spec.policy.part_shape(p, spec.trailing), spec.dtype) for p in mine}
        entry.parts.update(self.grow({p: self.part_file(entry.index, p) for p in mine}, writers,
                                     shapes, dict.fromkeys(mine, 0), f"init_data {name!r}",
                                     "parts", lambda p, rows: rows.copy_(
                                         spec.initial_rows(p, self.seed))))
        shards.add(entry, servers)
        return entry

    def _agree(self, name: str, spec: InitSpec | None, error: Exception | None,
               index: int) -> list[list[bool]]:
        """Checks every rank validated the same request; returns who passed which part's rows."""
        if spec is None:
            sig = [0, _crc(name), index] + [0] * (len(_SIGNATURE) - 3)
        else:
            pol = spec.policy
            sig = [1, _crc(name), index, pol.num_rows, pol.num_parts, _crc(spec.dtype),
                   _crc(spec.trailing), _crc(repr(pol))]
        got = self._gather(torch.tensor(sig)).tolist()
        failed = [r for r, g in enumerate(got) if g[0] == 0]
        if error is not None:
            raise error
        if failed:
            raise InvalidValueError(f"init_data {name!r} failed on ranks {failed} (see their "
                                    "errors); every rank must pass valid arguments")
        for i, field in enumerate(_SIGNATURE[1:], start=1):
            differ = [r for r, g in enumerate(got) if g[i] != sig[i]]
            if differ:
                raise InvalidValueError(f"init_data {name!r}: ranks {differ} disagree with rank "
                                        f"{self.world.global_rank} on {field} (this rank: "
                                        f"{spec.policy}, {spec.dtype}, row shape {spec.trailing}); "
                                        "call init_data in the same order with the same arguments "
                                        "on every rank")
        has = torch.tensor([p in spec.part_data for p in range(spec.policy.num_parts)])
        return self._gather(has.long()).bool().tolist()

    def part_file(self, index: int, part: int) -> str:
        """The name of the file of part ``part`` of the store's tensor ``index``."""
        return f"kv-{self.token}-{index}-{part}"

    def grow(self, names: dict[int, str], writers: dict[int, int],
             shapes: dict[int, tuple[tuple[int, ...], torch.dtype]], start: dict[int, int],
             call: str, what: str, write: Callable[[int, torch.Tensor], None] | None = None
             ) -> dict[int, torch.Tensor]:
        """This server's tensors by index ``i``, the file ``names[i]`` (in ``dir``) grown to
        ``shapes[i]`` (its shape and dtype; created where this store has not made it yet) by
        rank ``writers[i]``, which writes its rows from ``start[i]`` on with ``write(i, those
        rows)`` (or leaves them to the caller); the server's other ranks map it; a created file
        is unlinked once mapped, and stays open here (:meth:`close`). Collective over the
        job: StateError names the ranks that could not grow or map theirs (``call`` says what
        asked; ``what`` the tensors, for the message)."""
        me, created, out = self.world.global_rank, [], {}
        fill = write or (lambda i, rows: None)  # (or the caller writes them)
        try:
            for writing in (True, False):
                ok = True
                try:
                    for i, (shape, dtype) in shapes.items():
                        if (writers[i] == me) == writing:
                            out[i] = self._grown(names[i], shape, dtype, start[i], created,
                                                 functools.partial(fill, i) if writing else None)
                except (OSError, RuntimeError, ValueError, KeyError) as exc:
                    log.error("%s on rank %d: %s", call, me, exc)
                    ok = False
                bad = self.world.failed_ranks(ok)
                if bad:
                    did = "create or grow their" if writing else "map their server's"
                    raise StateError(f"{call}: ranks {bad} could not {did} shared-memory {what} "
                                     f"in {self.dir} (see their logs)")
        finally:
            for made in created:
                made.unlink(missing_ok=True)
        self.server.barrier()  # no rank returns before its server's files are gone
        return out

    def _grown(self, name: str, shape: tuple[int, ...], dtype: torch.dtype, start: int,
               created: list[Path], write: Callable[[torch.Tensor], None] | None
               ) -> torch.Tensor:
        """One file of :meth:`grow`: on its writer (``write`` given: it writes the new rows)
        or on a rank that maps it."""
        if _nbytes(shape, dtype) == 0:
            return torch.empty(shape, dtype=dtype)  # no file
        file = self._files.get(name)
        if file is None:
            file = SharedFile(self.dir / f"dglx-{name}", create=write is not None)
            self._files[name] = file
            if write is not None:
                created.append(file.path)
        if write is None:
            return file.map(shape, dtype)
        tensor = file.grow(_nbytes((start, *shape[1:]), dtype), shape, dtype)
        write(tensor[start:])
        return tensor

    def close(self) -> None:
        """Closes the files this store made or mapped (their mappings stay while their
        tensors live)."""
        for file in self._files.values():
            file.close()
        self._files.clear()

    def _gather(self, row: torch.Tensor) -> torch.Tensor:
        """Every rank's ``row`` (the same length everywhere), stacked by rank."""
        return torch.stack(self.world.all_gather(row.contiguous()))
