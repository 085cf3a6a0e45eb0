"""The byte counter a session's communicators share (see :mod:`dglx_dist.runtime.comm` for
what each collective counts)."""
from __future__ import annotations

import dataclasses
import threading

__all__ = ["ByteCounter"]


@dataclasses.dataclass
class ByteCounter:
    """Bytes this rank sent and received, intra- vs inter-server; ``control`` is metadata;
    ``cache_*``: rows of other servers its pulls read from its server's cache (``hits``) or
    asked for (``misses``) while a cache held rows, and the bytes the hits saved; ``reused``:
    bytes of other servers' rows its pulls read from its own copies of earlier pulls' rows
    (:mod:`~dglx_dist.kvstore.copies`: the recent rows, a learning cache's kept rows).

    Updates go through :meth:`add` / :meth:`add_control`, under a lock: a KVStore's serving
    thread counts its answers while the main thread counts its own exchanges.
    """

    sent_intra: int = 0
    sent_inter: int = 0
    recv_intra: int = 0
    recv_inter: int = 0
    control_sent: int = 0
    calls: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    cache_saved: int = 0
    reused: int = 0

    def __post_init__(self):
        self._lock = threading.Lock()  # not a field: snapshot() and reset() skip it

    def _add(self, **amounts: int) -> None:
        with self._lock:
            for name, amount in amounts.items():
                setattr(self, name, getattr(self, name) + amount)

    def add(self, intra: bool, sent: int, recv: int) -> None:
        """Counts ``sent`` / ``recv`` payload bytes exchanged with one peer."""
        kind = "intra" if intra else "inter"
        self._add(**{f"sent_{kind}": sent, f"recv_{kind}": recv})

    def add_control(self, sent: int, calls: int = 0) -> None:
        """Counts ``sent`` metadata bytes and ``calls`` communication calls."""
        self._add(control_sent=sent, calls=calls)

    def add_cache(self, hits: int, misses: int, saved: int) -> None:
        """Counts a pull's rows read from the server's cache and asked of other servers."""
        self._add(cache_hits=hits, cache_misses=misses, cache_saved=saved)

    def add_reused(self, nbytes: int) -> None:
        """Counts ``nbytes`` of other servers' rows a pull read from this rank's copies."""
        self._add(reused=nbytes)

    def merge(self, counts: dict[str, int]) -> None:
        """Adds ``counts`` (another counter's :meth:`snapshot`, or the difference of two: a
        loader's sampler process's bytes)."""
        self._add(**counts)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dataclasses.asdict(self)

    def reset(self) -> None:
        with self._lock:
            for f in dataclasses.fields(self):
                setattr(self, f.name, 0)
