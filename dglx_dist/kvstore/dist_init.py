"""The distributed store's collective ``init_data``: the ranks agree on the request, then
each server's parts are created in shared memory and mapped (the ``dist`` module docstring says
how)."""
from __future__ import annotations

import logging
import zlib
from pathlib import Path

import torch

from dglx_dist.errors import InvalidValueError, StateError
from dglx_dist.kvstore.base import InitSpec, TensorEntry
from dglx_dist.kvstore.ops import init_part
from dglx_dist.kvstore.shm import attach_shared, create_shared

__all__ = ["DistInit"]

log = logging.getLogger(__name__)
_SIGNATURE = ("ok", "name", "index", "num_rows", "num_parts", "dtype", "trailing", "policy")


def _crc(value) -> int:
    return zlib.crc32(str(value).encode())


class DistInit:
    """The collective ``init_data`` of :class:`~dglx_dist.kvstore.dist.DistKVStore` (a mixin:
    it uses the store's session, placement, shared-memory directory and token)."""

    def _init_data(self, name: str, spec: InitSpec | None,
                   error: Exception | None) -> TensorEntry:
        has = self._agree(name, spec, error)
        entry = TensorEntry.from_spec(spec, len(self._by_index))
        servers = self.part_servers(spec.policy)
        ranks = self.session.topology.server_ranks(self._server)
        mine = [p for p, s in enumerate(servers) if s == self._server]
        writers = {p: next((r for r in ranks if has[r][p]), ranks[0]) for p in mine}
        created: list[Path] = []
        try:
            ok = self._fill_parts(entry, spec, writers, created, create=True)
            self._all_ok(ok, name, "could not create its shared-memory parts")
            ok = self._fill_parts(entry, spec, writers, created, create=False)
            self._all_ok(ok, name, "could not map its server's shared-memory parts")
        finally:
            for path in created:
                path.unlink(missing_ok=True)
        self.session.server.barrier()  # no rank returns before its server's files are gone
        with self._registered:
            self._servers[entry.index] = servers
            self._by_index.append(entry)
            self._registered.notify_all()
        return entry

    def _agree(self, name: str, spec: InitSpec | None,
               error: Exception | None) -> list[list[bool]]:
        """Checks every rank validated the same request; returns who passed which part's rows."""
        if spec is None:
            sig = [0, _crc(name), len(self._by_index)] + [0] * (len(_SIGNATURE) - 3)
        else:
            pol = spec.policy
            sig = [1, _crc(name), len(self._by_index), pol.num_rows, pol.num_parts,
                   _crc(spec.dtype), _crc(spec.trailing), _crc(repr(pol))]
        got = self._gather_rows(torch.tensor(sig)).tolist()
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
                                        f"{self.session.rank} on {field} (this rank: "
                                        f"{spec.policy}, {spec.dtype}, row shape {spec.trailing}); "
                                        "call init_data in the same order with the same arguments "
                                        "on every rank")
        has = torch.tensor([p in spec.part_data for p in range(spec.policy.num_parts)])
        return self._gather_rows(has.long()).bool().tolist()

    def _fill_parts(self, entry: TensorEntry, spec: InitSpec, writers: dict[int, int],
                    created: list[Path], create: bool) -> bool:
        """Creates (the writers) or maps (the others) this server's parts; False on failure."""
        me = self.session.rank
        try:
            for part, writer in writers.items():
                if (writer == me) != create:
                    continue
                path = self._dir / f"dglx-kv-{self.token}-{entry.index}-{part}"
                shape = spec.policy.part_shape(part, spec.trailing)
                if create:
                    rows = spec.part_data.get(part)
                    if rows is None:
                        rows = init_part(spec.init, shape, spec.dtype, self.seed, entry.name,
                                         part)
                    entry.parts[part] = create_shared(path, rows)
                    created.append(path)
                else:
                    entry.parts[part] = attach_shared(path, shape, spec.dtype)
        except (OSError, RuntimeError, ValueError, KeyError) as exc:
            log.error("init_data %r on rank %d: %s", entry.name, me, exc)
            return False
        return True

    def _all_ok(self, ok: bool, name: str, what: str) -> None:
        flags = self._gather_rows(torch.tensor([int(ok)]))[:, 0].tolist()
        bad = [r for r, f in enumerate(flags) if not f]
        if bad:
            raise StateError(f"init_data {name!r}: ranks {bad} {what} in {self._dir} (see "
                             f"their logs)")

    def _gather_rows(self, row: torch.Tensor) -> torch.Tensor:
        """Every rank's ``row`` (the same length everywhere), stacked by rank."""
        return torch.stack(self.session.world.all_gather(row.contiguous()))
