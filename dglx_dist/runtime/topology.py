"""Servers x local ranks: which rank sits where, as plain arithmetic.

Ranks are laid out server-major: server ``s`` holds ranks ``s*R .. s*R+R-1`` where ``R`` is the
number of ranks per server. This matches torchrun (node ``g`` holds ranks ``g*L .. g*L+L-1``)
and virtual servers (each machine's ``L`` ranks split into ``L/R`` consecutive servers).
"""
from __future__ import annotations

import dataclasses

from dglx_dist.errors import IdOutOfRangeError, InvalidValueError

__all__ = ["Topology"]


@dataclasses.dataclass(frozen=True)
class Topology:
    """``num_servers`` servers with ``ranks_per_server`` ranks each."""

    num_servers: int
    ranks_per_server: int

    def __post_init__(self):
        if self.num_servers < 1 or self.ranks_per_server < 1:
            raise InvalidValueError(f"topology needs >= 1 server and >= 1 rank per server, got "
                                    f"{self.num_servers} x {self.ranks_per_server}")

    @property
    def world_size(self) -> int:
        return self.num_servers * self.ranks_per_server

    def server_of(self, rank: int) -> int:
        """The server holding ``rank``."""
        _check("rank", rank, self.world_size)
        return rank // self.ranks_per_server

    def local_rank_of(self, rank: int) -> int:
        """``rank``'s index within its server."""
        _check("rank", rank, self.world_size)
        return rank % self.ranks_per_server

    def server_ranks(self, server: int) -> list[int]:
        """Ranks of ``server``, in order."""
        _check("server", server, self.num_servers)
        return list(range(server * self.ranks_per_server, (server + 1) * self.ranks_per_server))

    def cross_ranks(self, local_rank: int) -> list[int]:
        """The ranks with local index ``local_rank`` on every server, by server."""
        _check("local rank", local_rank, self.ranks_per_server)
        return [s * self.ranks_per_server + local_rank for s in range(self.num_servers)]

    def family(self, members) -> list[list[int]]:
        """The member lists of the groups of ``members``' kind, in the order every rank makes
        them: ``[world]``, the servers' ranks, or the cross ranks, where ``members`` is one of
        them (the world first where it is two kinds at once).

        Raises:
            InvalidValueError: ``members`` is none of these groups.
        """
        members = list(members)
        for family in ([list(range(self.world_size))],
                       [self.cross_ranks(i) for i in range(self.ranks_per_server)],
                       [self.server_ranks(s) for s in range(self.num_servers)]):
            if members in family:
                return family
        raise InvalidValueError(f"ranks {members} are neither the world, a server's ranks nor "
                                f"one local index's ranks on every server")

    def same_server(self, a: int, b: int) -> bool:
        """Whether ranks ``a`` and ``b`` share a server (their traffic is intra-server)."""
        return self.server_of(a) == self.server_of(b)


def _check(what: str, index: int, count: int) -> None:
    if not 0 <= index < count:
        raise IdOutOfRangeError(f"{what} {index} is outside [0, {count})")
