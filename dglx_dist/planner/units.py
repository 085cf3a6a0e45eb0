"""The plan's constants: one rank's unit costs, how many epochs a kind of training needs, and
the link between servers (each strategy's per-step overhead is its cost's,
:class:`~dglx_dist.strategies.cost.Cost`), as documented defaults
(measured on the development machine: docs/cluster_model.md) or as measured on this machine
and cached (:func:`load_measured`).

What writes the cache (a JSON file, :func:`units_path`): ``dglx plan --measure`` (this
machine's unit costs: a row gather, message passing, a dense product, TCP over loopback;
torch only, one thread, about a second) and ``dglx commcheck --payload-mb N`` on more than
one server (the rate between servers its timed exchange saw). A key the cache does not hold
keeps its default; a flag of ``dglx plan`` beats both.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import socket
import statistics
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from dglx_dist.data.nolinks import replace_file
from dglx_dist.strategies.cost.shapes import GraphShape, Units, Workload

__all__ = ["DEFAULT_GPU_SPEEDUP", "DEFAULT_LINK_GBIT", "DEFAULT_UNITS", "FULL_STEP", "Measured",
           "full_step", "loopback_s_per_byte", "median_s", "load_measured",
           "measure_gpu_speedup", "measure_units", "save_measured", "units_path"]

log = logging.getLogger(__name__)

DEFAULT_UNITS = Units(sample_s_per_edge=7.35e-08, gather_s_per_byte=7.32e-10,
                      spmm_s_per_edge_dim=8.45e-10, dense_s_per_flop=1.55e-11,
                      intra_s_per_byte=2.51e-10, round_s=4.16e-3)
"""One core of the development machine (docs/cluster_model.md, "Checked where it can be"):
the package's own sampling and block building per sampled edge (:func:`measure_units`; 1.18e-7
before the sampler's speed-up of 2026-11-28, which took 0.62 of the time there: medians of
five alternating measurements, 8.1e-8 against 1.30e-7), a
row gather per byte, ``copy_u_sum`` per edge and column, ``torch.mm`` per FLOP, TCP over
loopback per byte; a round of messages across its emulated servers (gloo over TCP between
network namespaces, the ranks sharing 2 cores), fitted with distdgl's per-step overhead on
the measured rows of ``benchmarks/plan_check.py`` (``--replan``; docs/choosing.md, "Is the
plan right?")."""

FULL_STEP = 0.6
"""The sampled mini-batch steps one full-graph step is worth on the way to the same accuracy,
inverted, for a 2-layer model whose features are at least as wide as its hidden layer:
full-graph training reached the check's target in 0.5-0.63 of the sampled strategies' steps
(docs/choosing.md, "Is the plan right?": 5 against 8 on the tiny graph at 2 and at 4
servers, 2 against 4 at F = 1024; 8 against 15 on the small preset). :func:`full_step` widens
it for narrow features and deep models."""


def full_step(graph: GraphShape, work: Workload) -> float:
    """Full-graph steps to accuracy per sampled step: :data:`FULL_STEP`, times the square root
    of how much narrower the features are than the hidden layer and of the depth over 2
    layers. Where the features are 4x narrower (F = 16, hidden 64) full-graph training
    needed about as many steps as the sampled strategies, or more (at least 7 against 5-8),
    and so did 8 layers of ResGCN+ (at 0.21 of the target after 6 steps where the sampled
    strategies needed 21-24): 1.2 for both (docs/choosing.md, "Is the plan right?")."""
    narrow = max(1.0, work.hidden / graph.feat_dim)
    deep = max(1.0, work.layers / 2)
    return FULL_STEP * math.sqrt(narrow * deep)


DEFAULT_LINK_GBIT = 10.0
"""The link between servers when neither a flag nor a measurement says."""

DEFAULT_GPU_SPEEDUP = 50.0
"""How much faster a GPU rank runs the model's math than one core of the machine the units
are from, where ``dglx plan --measure`` has not measured it on a machine with CUDA
(:func:`measure_gpu_speedup`): the start docs/cluster_model.md takes for a GPU."""

_KEYS = {f.name for f in dataclasses.fields(Units)}


@dataclasses.dataclass(frozen=True)
class Measured:
    """What the plan uses: the units, the link rate (None: not measured) and where each
    came from."""

    units: Units = DEFAULT_UNITS
    link_gbit: float | None = None
    source: str = "defaults (docs/cluster_model.md)"
    gpu_speedup: float | None = None
    """How much faster this machine's GPU ran the model's math than its one core
    (:func:`measure_gpu_speedup`; None: not measured)."""


def units_path() -> Path:
    """The cache: ``$XDG_CACHE_HOME/dglx_dist/units.json`` (``~/.cache`` when unset)."""
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "dglx_dist" / "units.json"


def _read(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("%s: unreadable (%s); the plan uses its defaults", path, exc)
        return {}
    return raw if isinstance(raw, dict) else {}


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1e12


def load_measured(path: Path | None = None) -> Measured:
    """The cached measurements at ``path`` (default :func:`units_path`) over the defaults;
    a missing or unreadable file, or a value that is not a positive number, is the default."""
    path = units_path() if path is None else path
    raw = _read(path)
    units = {k: float(v) for k, v in raw.get("units", {}).items() if k in _KEYS and _positive(v)}
    link, gpu = (float(raw[k]) if _positive(raw.get(k)) else None
                 for k in ("link_gbit", "gpu_speedup"))
    if not units and link is None and gpu is None:
        return Measured()
    what = ", ".join([*(["unit costs"] if units else []), *(["link rate"] if link else []),
                      *(["GPU speed-up"] if gpu else [])])
    return Measured(dataclasses.replace(DEFAULT_UNITS, **units), link,
                    f"{what} measured here ({path}), defaults for the rest", gpu)


def save_measured(changes: Mapping[str, Any], path: Path | None = None) -> Path:
    """Merges ``changes`` (``units``: a dict of unit costs; ``link_gbit``) into the cache,
    written whole through a temporary file; returns its path."""
    path = units_path() if path is None else path
    data = _read(path)
    for key, value in changes.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, Mapping) else value
    data["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_file(path, json.dumps(data, indent=2, sort_keys=True))
    return path


def median_s(fn: Callable[[], Any], repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def loopback_s_per_byte(total: int, repeat: int) -> float:
    """Seconds per byte sent from one thread to another over a TCP loopback connection."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
    chunk = b"\0" * min(total, 1 << 20)
    total -= total % len(chunk)  # whole chunks

    def drain() -> None:
        left = total
        while left:
            left -= len(peer.recv(min(left, 1 << 20)))

    def once() -> None:
        reader = threading.Thread(target=drain)
        reader.start()
        for _ in range(total // len(chunk)):
            client.sendall(chunk)
        reader.join()

    try:
        return median_s(once, repeat) / total
    finally:
        client.close()
        peer.close()


def measure_units(nodes: int = 100_000, edges: int = 1_000_000, repeat: int = 3) -> Units:
    """This machine's unit costs on one thread, with torch alone: sampling a 2-layer block
    as the package draws it (:class:`~dglx_dist.sampling.LocalSampler`, fanouts 10,25) on a
    random graph, a row gather, message passing as the package sums a block's rows
    (:func:`~dglx_dist.graphcore.aggregate.sum_by_dst`), ``torch.mm``, TCP over loopback. A
    round across servers is not measured here (:data:`DEFAULT_UNITS`)."""
    import torch

    from dglx_dist.sampling.local import LocalSampler, WholeGraph

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        gen = torch.Generator().manual_seed(0)
        src, dst = _random_edges(nodes, edges, gen)
        table = torch.randn(nodes, 128, generator=gen)
        rows = torch.randint(0, nodes, (50_000,), generator=gen)
        gather = median_s(lambda: table.index_select(0, rows), repeat) / (rows.numel() * 512)
        sampler = LocalSampler(WholeGraph(src, dst, torch.arange(edges), nodes))
        seeds = rows[:1000]
        drawn = sum(b.num_edges() for b in sampler.draw_blocks(seeds, [10, 25]))
        sample = median_s(lambda: sampler.draw_blocks(seeds, [10, 25]), repeat) / drawn
        spmm, dense = (median_s(op, repeat) / work
                       for op, work in _model_ops(src, dst, nodes, torch.device("cpu")))
    finally:
        torch.set_num_threads(threads)
    return dataclasses.replace(DEFAULT_UNITS, sample_s_per_edge=sample, gather_s_per_byte=gather,
                               spmm_s_per_edge_dim=spmm,
                               dense_s_per_flop=dense,
                               intra_s_per_byte=loopback_s_per_byte(32 << 20, repeat))


def _random_edges(nodes: int, edges: int, gen) -> tuple[Any, Any]:
    """The units' random graph: ``edges`` edges ``(src, dst)`` among ``nodes`` nodes."""
    import torch

    return tuple(torch.randint(0, nodes, (edges,), generator=gen) for _ in range(2))


def _model_ops(src, dst, nodes: int, device) -> list[tuple[Callable[[], Any], int]]:
    """The model's math as the units count it, on ``device``: message passing (the
    package's sum of a block's rows, 64 columns, per edge and column) and ``torch.mm`` (per
    FLOP), each ``(op, its work)``; an op returns once its work is done (on a GPU: after a
    synchronisation)."""
    import torch

    from dglx_dist.graphcore.aggregate import Layout, sum_by_dst

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(nodes, 64, generator=gen).to(device)
    layout = Layout.of_edges(src.to(device), dst.to(device), nodes, nodes)
    a, b = (torch.randn(shape, generator=gen).to(device) for shape in ((20_000, 128), (128, 64)))
    done = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    return [(lambda: (sum_by_dst(layout, x), done()), src.numel() * 64),
            (lambda: (torch.mm(a, b), done()), 2 * a.shape[0] * a.shape[1] * b.shape[1])]


def measure_gpu_speedup(units: Units, device: Any = "cuda", nodes: int = 100_000,
                        edges: int = 1_000_000, repeat: int = 3) -> float:
    """How much faster ``device`` runs the model's math than ``units`` say one core here
    does (``units``: :func:`measure_units`' of this machine): the time ``units`` give
    message passing and a dense product of :func:`measure_units`' sizes, over theirs on the
    device (:func:`median_s`: a first run left out, as a GPU loads its kernels then). What
    ``--strategy auto`` plans a GPU rank's model with (:class:`~dglx_dist.planner.auto.Launch`)."""
    import torch

    src, dst = _random_edges(nodes, edges, torch.Generator().manual_seed(0))
    (spmm, spmm_work), (mm, mm_work) = _model_ops(src, dst, nodes, torch.device(device))
    host = units.spmm_s_per_edge_dim * spmm_work + units.dense_s_per_flop * mm_work
    return host / (median_s(spmm, repeat) + median_s(mm, repeat))
