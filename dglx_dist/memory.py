"""Memory measurement: a process's peak resident memory and the bytes autograd saves for
backward (reported as ``peak_rss_mb`` and ``peak_saved_mb``); the up-front refusal of work
whose estimated peak does not fit (:func:`check_memory`); and the measured model of a rank's
peak as the graph grows (:class:`MemoryModel`, applied to a
:class:`~dglx_dist.strategies.cost.shapes.GraphShape`)."""
from __future__ import annotations

import dataclasses
import math
import threading
import time
import types
from typing import Any, Callable

import psutil

from dglx_dist.errors import InsufficientMemoryError, InvalidValueError
__all__ = ["MemoryModel", "PeakRSS", "SavedBytes", "check_memory", "peak_rss_bytes"]

_MB = 1 << 20


def check_memory(estimate: int, limit: int | None, what: str,
                 advice: str | Callable[[int], str]) -> None:
    """Refuses ``what`` when its estimated peak exceeds ``limit`` (None: the memory available
    now), naming both and what to do instead: ``advice``, or what ``advice(limit_bytes)``
    returns (called only when refusing, for advice that takes work to find).

    Raises:
        InsufficientMemoryError: with the estimate, the limit and the advice in the message.
    """
    available = psutil.virtual_memory().available if limit is None else int(limit)
    if estimate > available:
        raise InsufficientMemoryError(
            f"{what} needs about {estimate / _MB:,.0f} MiB at its peak but only "
            f"{available / _MB:,.0f} MiB {'is available' if limit is None else 'is allowed'}; "
            f"{advice if isinstance(advice, str) else advice(available)}")


@dataclasses.dataclass(frozen=True)
class MemoryModel:
    """A rank's peak resident bytes as the graph grows, fitted to measured peaks: ``base +
    (per_node x nodes + per_edge x edges + per_feature_byte x feature bytes +
    per_embedding_byte x embedding bytes) / W`` for a graph (a
    :class:`~dglx_dist.strategies.cost.shapes.GraphShape`) trained by
    ``W`` ranks (``benchmarks/cluster_model.py memory`` measures and fits it; the strategies'
    fits are their cost's ``memory`` and ``typed_memory``).

    The fits on graphs without types were measured at one feature width (F = 128) and carry
    no feature term: their per-node bytes hold the features at that width. The typed fits
    (``memory --typed``, mag-shaped graphs) split the graph into feature bytes of the featured
    types, learned-row bytes of the others, and edges. Neither knows the model or the batch.

    Attributes:
        base: bytes a rank holds whatever the graph (Python, torch, DGL, buffers).
        per_node: bytes per node of the rank's share of the graph.
        per_edge: bytes per edge of the rank's share.
        per_feature_byte: resident bytes per byte of float32 features of the rank's share
            (its ``feature_bytes``; their copies: store, pulls, batches).
        per_embedding_byte: resident bytes per byte of learned rows with their optimizer state
            (its ``embedding_bytes``).
    """

    base: float
    per_node: float
    per_edge: float
    per_feature_byte: float = 0.0
    per_embedding_byte: float = 0.0

    def __post_init__(self):
        values = (self.base, self.per_node, self.per_edge, self.per_feature_byte,
                  self.per_embedding_byte)
        if not all(math.isfinite(v) and v >= 0 for v in values):
            raise InvalidValueError(f"MemoryModel{values}: base, per_node, per_edge, "
                                    "per_feature_byte and per_embedding_byte must be finite "
                                    "numbers >= 0")

    def peak(self, nodes: float, edges: float, world: int) -> float:
        """Peak bytes of one of ``world`` ranks training a graph of ``nodes`` and ``edges``
        without types at F = 128 (:meth:`estimate` of the one-type graph)."""
        return self.estimate(_one_type(int(nodes), int(edges)), world)

    def estimate(self, graph, world: int) -> float:
        """Peak bytes of one of ``world`` ranks training ``graph`` (its ``nodes``, ``edges``,
        ``feature_bytes`` and ``embedding_bytes``)."""
        return self.base + self._growth(graph) / world

    def _growth(self, graph) -> float:
        """The bytes that grow with ``graph``, all ranks together."""
        return (self.per_node * graph.nodes + self.per_edge * graph.edges
                + self.per_feature_byte * graph.feature_bytes
                + self.per_embedding_byte * graph.embedding_bytes)

    def largest_nodes(self, degree: float, budget: float, world: int) -> int | None:
        """Nodes of the largest graph without types (F = 128) with ``degree`` edges per node
        whose ``world`` ranks fit in ``budget`` bytes together; None when it does not grow
        with the graph."""
        slope = self._growth(_one_type(1, degree))
        if slope <= 0:
            return None
        return max(0, int((budget / world - self.base) * world / slope))

    def public(self) -> dict[str, Any]:
        """The fit as the docs' tables show it (MiB, bytes per node, bytes per edge; the
        typed terms where it has them)."""
        out = {"base_mb": round(self.base / _MB), "bytes_per_node": round(self.per_node),
               "bytes_per_edge": round(self.per_edge, 1)}
        if self.per_feature_byte or self.per_embedding_byte:
            out |= {"per_feature_byte": round(self.per_feature_byte, 2),
                    "per_embedding_byte": round(self.per_embedding_byte, 2)}
        return out


def _one_type(nodes: float, edges: float) -> types.SimpleNamespace:
    """The shape of a graph without types at F = 128 (what :meth:`MemoryModel.estimate`
    reads)."""
    return types.SimpleNamespace(nodes=nodes, edges=edges, feature_bytes=4 * 128 * nodes,
                                 embedding_bytes=0)


def peak_rss_bytes() -> int:
    """This process's peak resident memory so far (VmHWM; ru_maxrss where /proc is absent)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class SavedBytes:
    """Bytes autograd keeps for the backward pass of one forward (its activations): use
    ``pack`` as the pack hook of ``torch.autograd.graph.saved_tensors_hooks``. Each storage
    counts once per forward; ``peak`` is the largest forward seen since the last reset.
    ``Trainer(..., measure_saved_bytes=True)`` reports it as ``peak_saved_mb`` (the hook runs
    on every saved tensor, so the trainer installs it only when asked)."""

    def __init__(self):
        self.peak = 0
        self._seen: set[int] = set()
        self._now = 0

    def start(self) -> None:
        """A new forward begins."""
        self._seen.clear()
        self._now = 0

    def pack(self, tensor):
        key, size = _footprint(tensor)
        if key is None or key not in self._seen:
            self._seen.add(key)
            self._now += size
            self.peak = max(self.peak, self._now)
        return tensor

    def reset(self) -> None:
        self.peak = 0
        self.start()


def _footprint(tensor) -> tuple[int | None, int]:
    """Where the memory behind ``tensor`` starts (None: not known, counted every time) and its
    size in bytes."""
    import torch  # here: only SavedBytes needs torch, importing this module does not

    if tensor.layout == torch.strided:
        storage = tensor.untyped_storage()
        return storage.data_ptr(), storage.nbytes()
    if tensor.layout == torch.sparse_coo:  # no storage of its own: its index and value arrays
        parts = (tensor._indices(), tensor._values())
    elif tensor.layout == torch.sparse_csr:
        parts = (tensor.crow_indices(), tensor.col_indices(), tensor.values())
    else:  # other layouts (mkldnn, blocked sparse): counted at their dense size, each time
        return None, tensor.numel() * tensor.element_size()
    return parts[-1].untyped_storage().data_ptr(), sum(p.numel() * p.element_size()
                                                       for p in parts)


class PeakRSS:
    """Context manager sampling this process's resident memory; ``peak`` is the maximum seen.

    Sampling (every ``interval`` seconds, in a daemon thread) can miss a spike shorter than the
    interval; benchmarks that need the exact peak run the work in a fresh child process and read
    its ``VmHWM`` from /proc/self/status (a forked child's ``ru_maxrss`` starts at its parent's
    peak, so it is not the child's own).
    """

    def __init__(self, interval: float = 0.02):
        self.interval = interval
        self.peak = 0
        self.start = 0
        self.seconds = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc = psutil.Process()
        self._t0 = 0.0

    def _sample(self) -> None:
        self.peak = max(self.peak, self._proc.memory_info().rss)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> "PeakRSS":
        self.start = self._proc.memory_info().rss
        self.peak = self.start
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="peak-rss", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        self.seconds = time.perf_counter() - self._t0
