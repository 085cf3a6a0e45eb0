"""Shared-memory tensors and raw-byte views, for the distributed store.

A part's tensor lives in a file under ``/dev/shm`` (or the system temp directory where there is
none) named by a per-job token: one rank creates and fills it, the server's other ranks
``mmap`` it, then it is unlinked (docs/kvstore.md, "How it works"). :class:`SharedParts` does
that for a distributed store's ``init_data``, collectively.
"""
from __future__ import annotations

import errno
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

__all__ = ["default_shm_dir", "create_shared", "attach_shared", "to_bytes", "from_bytes",
           "SharedParts", "EMPTY_I64", "EMPTY_U8"]

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


def create_shared(path: Path, rows: torch.Tensor | tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Creates ``path`` (it must not exist), copies ``rows`` into it (a tuple: its tensors one
    after another along dim 0, never concatenated in memory first), returns the mapped tensor.

    Empty tensors need no file: a plain empty tensor is returned and nothing is created. On
    failure the file is removed again.

    The file's pages are reserved before they are written: on a full tmpfs (a container's
    64 MB ``/dev/shm``) writing into a mapping past its free space would kill the process with
    SIGBUS, where reserving fails with an ``OSError`` that says how much was needed.

    Raises:
        FileExistsError: ``path`` exists (another job's or a stale file: never overwritten).
        DiskFullError: the file system cannot hold the tensor (an ``OSError``).
    """
    pieces = rows if isinstance(rows, tuple) else (rows,)
    shape = (sum(t.shape[0] for t in pieces), *pieces[0].shape[1:])
    dtype = pieces[0].dtype
    if _nbytes(shape, dtype) == 0:
        return torch.empty(shape, dtype=dtype)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        _reserve(fd, path, _nbytes(shape, dtype))
        tensor = _map(fd, shape, dtype)
        start = 0
        for piece in pieces:
            tensor[start:start + piece.shape[0]].copy_(piece)
            start += piece.shape[0]
    except BaseException:
        os.unlink(path)  # what this call created, it removes
        raise
    finally:
        os.close(fd)
    return tensor


def _reserve(fd: int, path: Path, nbytes: int) -> None:
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL):  # a file system without fallocate
            os.ftruncate(fd, nbytes)
            return
        free = shutil.disk_usage(path.parent).free
        raise DiskFullError(exc.errno, f"cannot hold {nbytes / 2**20:,.1f} MiB of shared tensor in "
                      f"{path.parent} ({free / 2**20:,.1f} MiB free: {exc.strerror}); expected "
                      f"room for this server's parts: enlarge it (docker run --shm-size) or "
                      f"free it") from None


def attach_shared(path: Path, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Maps the tensor another rank created at ``path``.

    Raises:
        RuntimeError: the file's size is not that of a ``dtype`` tensor of ``shape``.
    """
    if _nbytes(shape, dtype) == 0:
        return torch.empty(shape, dtype=dtype)
    fd = os.open(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        if size != _nbytes(shape, dtype):
            raise ProtocolError(f"shared tensor {path} has {size} bytes; expected "
                                f"{_nbytes(shape, dtype)} for {dtype} of shape {shape}")
        return _map(fd, shape, dtype)
    finally:
        os.close(fd)


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
        entry.parts.update(self.share(f"kv-{self.token}-{entry.index}", writers,
                                      lambda p: spec.initial_rows(p, self.seed), shapes,
                                      f"init_data {name!r}", "parts"))
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

    def share(self, key: str, writers: dict[int, int], make: Callable[[int], torch.Tensor],
              shapes: dict[int, tuple[tuple[int, ...], torch.dtype]], call: str,
              what: str) -> dict[int, torch.Tensor]:
        """This server's tensors by index ``i``: rank ``writers[i]`` creates the file of
        ``make(i)`` (called there only) in ``dir`` (named by ``key`` and ``i``), the server's
        other ranks map it (``shapes[i]``: its shape and dtype), then it is unlinked.
        Collective over the job: StateError names the ranks that could not create or map
        theirs (``call`` says what asked; ``what`` the tensors, for the message)."""
        me, created, out = self.world.global_rank, [], {}
        path = lambda i: self.dir / f"dglx-{key}-{i}"  # noqa: E731
        try:
            for create in (True, False):
                ok = True
                try:
                    for i, (shape, dtype) in shapes.items():
                        if (writers[i] == me) != create:
                            continue
                        if create:
                            out[i] = create_shared(path(i), make(i))
                            created.append(path(i))
                        else:
                            out[i] = attach_shared(path(i), shape, dtype)
                except (OSError, RuntimeError, ValueError, KeyError) as exc:
                    log.error("%s on rank %d: %s", call, me, exc)
                    ok = False
                bad = self.world.failed_ranks(ok)
                if bad:
                    did = "create its" if create else "map its server's"
                    raise StateError(f"{call}: ranks {bad} could not {did} shared-memory {what} "
                                     f"in {self.dir} (see their logs)")
        finally:
            for made in created:
                made.unlink(missing_ok=True)
        self.server.barrier()  # no rank returns before its server's files are gone
        return out

    def _gather(self, row: torch.Tensor) -> torch.Tensor:
        """Every rank's ``row`` (the same length everywhere), stacked by rank."""
        return torch.stack(self.world.all_gather(row.contiguous()))
