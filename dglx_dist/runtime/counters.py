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
    asked for (``misses``) while a cache held rows, and the bytes the hits saved.

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

    def __post_init__(self):
        self._lock = threading.Lock()  # not a field: snapshot() and reset() skip it

    def add(self, intra: bool, sent: int, recv: int) -> None:
        """Counts ``sent`` / ``recv`` payload bytes exchanged with one peer."""
        with self._lock:
            if intra:
                self.sent_intra += sent
                self.recv_intra += recv
            else:
                self.sent_inter += sent
                self.recv_inter += recv

    def add_control(self, sent: int, calls: int = 0) -> None:
        """Counts ``sent`` metadata bytes and ``calls`` communication calls."""
        with self._lock:
            self.control_sent += sent
            self.calls += calls

    def add_cache(self, hits: int, misses: int, saved: int) -> None:
        """Counts a pull's rows read from the server's cache and asked of other servers."""
        with self._lock:
            self.cache_hits += hits
            self.cache_misses += misses
            self.cache_saved += saved

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dataclasses.asdict(self)

    def reset(self) -> None:
        with self._lock:
            for f in dataclasses.fields(self):
                setattr(self, f.name, 0)
