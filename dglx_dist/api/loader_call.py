"""What a :class:`~dglx_dist.api.loader.DataLoader` call asks for, checked before the
loader is built: DGL's options (refused where DGL refuses them, else honoured:
:class:`Delivery`), how deep a worker thread draws, the sampler's fields of the loader's
spec, and the call as every rank compares it (``same_call``) and errors name it."""
from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch

from dglx_dist.api.device_rows import node_caches
from dglx_dist.api.graph import DistGraph
from dglx_dist.api.link import EdgePairs, is_edge_sampler
from dglx_dist.api.samplers import (prefetched_names, sampler_fanouts, sampler_options,
                                    user_sampler)
from dglx_dist.errors import InvalidTypeError, InvalidValueError, NotSupportedError
from dglx_dist.sampling.options import UNIFORM
from dglx_dist.strategies.steps import PREFETCH_FACTOR, LoaderSpec

__all__ = ["Delivery", "call_options", "prefetch_depth", "call_signature", "checked_call"]

_DELIVERY = ("device", "use_uva", "use_alternate_streams", "pin_prefetcher",
             "persistent_workers", "gpu_cache")
"""DGL's loader options that say where the steps go and how (:class:`Delivery`)."""


@dataclasses.dataclass(frozen=True)
class Delivery:
    """Where a loader's steps go and how they get there, as DGL's ``DataLoader`` options say.

    Attributes:
        device: where the blocks and their rows go (DGL's ``device``); None: the strategy's
            device (the rank's GPU in a GPU job), or with ``uva`` the current GPU (as DGL).
        pin: rows are copied to a GPU from page-locked memory (``pin_prefetcher``; None:
            where the steps go to a GPU, DGL's default).
        side_stream: the copies run on a CUDA stream of their own (``use_alternate_streams``;
            None: where the steps go to a GPU).
        uva: DGL's ``use_uva``: the steps are drawn on the GPU they go to, by a copy of the
            sampler whose structure is in that GPU's memory (DGL leaves the graph pinned in
            host memory for the GPU to read; torch has no kernel that reads pinned host
            memory, so the structure is copied).
        persistent: DGL's ``persistent_workers``.
        gpu_cache: DGL's ``gpu_cache`` as given; once the device is decided (:meth:`on`),
            the rows to keep on it by node data name
            (:func:`~dglx_dist.api.device_rows.node_caches`).
    """

    device: torch.device | None = None
    pin: bool | None = None
    side_stream: bool | None = None
    uva: bool = False
    persistent: bool = False
    gpu_cache: Any = None

    def on(self, device: torch.device) -> "Delivery":
        """The options for steps that go to ``device`` (given, or the strategy's), the
        defaults that depend on it decided; ``pin_prefetcher=True`` for steps that stay on
        the host is refused, as DGL refuses it."""
        gpu = device.type == "cuda"
        if self.uva and not gpu:
            raise InvalidValueError(f"DataLoader: use_uva=True, but the steps go to {device}: "
                                    "the steps are drawn on the GPU they go to (as in DGL); "
                                    "expected a CUDA device")
        if self.pin and not gpu:
            raise InvalidValueError(f"DataLoader: pin_prefetcher=True, but the steps go to "
                                    f"{device}: pinned memory only speeds up copies to a GPU "
                                    "(DGL refuses it too); expected pin_prefetcher=False or a "
                                    "CUDA device")
        return dataclasses.replace(self, device=device, pin=gpu if self.pin is None else self.pin,
                                   side_stream=gpu if self.side_stream is None
                                   else self.side_stream,
                                   gpu_cache=node_caches(self.gpu_cache, device))


def _device(value) -> torch.device:
    """DGL's ``device`` argument as a torch device this rank has (an int: that GPU)."""
    try:
        device = torch.device("cuda", value) if isinstance(value, int) else torch.device(value)
    except (RuntimeError, TypeError) as exc:
        raise InvalidValueError(f"DataLoader: device={value!r}; expected a torch.device, "
                                "'cpu', 'cuda' or 'cuda:N'") from exc
    count = torch.cuda.device_count() if device.type == "cuda" else 0
    if device.type == "cuda" and (not count or (device.index or 0) >= count):
        raise InvalidValueError(f"DataLoader: device={value!r}, but this rank has "
                                f"{count} CUDA device(s); expected 'cpu'"
                                f"{' or cuda:0 to cuda:' + str(count - 1) if count else ''}")
    if device.type not in ("cpu", "cuda"):
        raise InvalidValueError(f"DataLoader: device={value!r}; expected 'cpu' or 'cuda'")
    if device.type == "cuda" and device.index is None:  # DGL's "cuda": the current GPU
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def delivery(kwargs: dict, num_workers) -> Delivery:
    """The delivery options of a call's ``kwargs``, refused where DGL's loader (or torch's,
    which it passes them to) refuses them."""
    device = kwargs.get("device")
    out = Delivery(device=None if device is None else _device(device),
                   pin=kwargs.get("pin_prefetcher"), side_stream=kwargs.get(
                       "use_alternate_streams"), uva=bool(kwargs.get("use_uva", False)),
                   persistent=bool(kwargs.get("persistent_workers", False)),
                   gpu_cache=kwargs.get("gpu_cache"))
    if out.persistent and not num_workers:
        raise InvalidValueError("DataLoader: persistent_workers=True needs num_workers > 0 "
                                "(as in torch's and DGL's DataLoader)")
    if out.uva and num_workers:
        raise InvalidValueError("DataLoader: use_uva=True needs num_workers=0 (as in DGL)")
    if out.uva and not torch.cuda.is_available():
        raise InvalidValueError("DataLoader: use_uva=True draws the steps on a GPU, and this "
                                "rank has no CUDA device; expected use_uva=False")
    if out.uva and out.device is None:  # DGL: use_uva's steps go to the current GPU
        return dataclasses.replace(out, device=_device("cuda"))
    return out


def call_options(kwargs: dict, num_workers, prefetch_factor
                 ) -> tuple[int, Delivery]:
    """Refuses unknown arguments and refused combinations; the steps drawn ahead
    (:func:`prefetch_depth`) and the :class:`Delivery` asked for."""
    if "pin_memory" in kwargs:
        raise InvalidTypeError("DataLoader: pin_memory is torch's name; DGL's loader takes "
                               "pin_prefetcher (whether rows go to a GPU from pinned memory)")
    unknown = sorted(k for k in kwargs if k not in _DELIVERY)
    if unknown:
        raise InvalidTypeError(f"DataLoader: unknown arguments {unknown}")
    return prefetch_depth(num_workers, prefetch_factor), delivery(kwargs, num_workers)


def prefetch_depth(num_workers, prefetch_factor) -> int:
    """Steps a worker thread may draw ahead (DGL's ``prefetch_factor``, default
    :data:`~dglx_dist.strategies.steps.PREFETCH_FACTOR`)."""
    if prefetch_factor is None:
        prefetch_factor = PREFETCH_FACTOR
    for name, value, least in (("num_workers", num_workers, 0),
                               ("prefetch_factor", prefetch_factor, 1)):
        try:
            ok = not isinstance(value, bool) and operator.index(value) >= least
        except TypeError:
            ok = False
        if not ok:
            raise InvalidValueError(f"DataLoader: {name}={value!r}; expected an integer "
                                    f">= {least}")
    return operator.index(prefetch_factor)


def call_signature(spec: LoaderSpec, sampler, lookahead: bool = True, depth: int = 2,
                   threaded: bool = False, workers: int = 0) -> str:
    """The loader's call as ranks compare it and errors name it."""
    drawn = f"fanouts={list(spec.fanouts)}" if spec.draw is None else \
        f"sampler={type(sampler).__name__}"
    drawn += f", {spec.sampling}" if spec.sampling != UNIFORM else ""
    return (f"DataLoader({'edge' if spec.pairs else 'node'} ids, {drawn}, "
            f"batch_size={spec.batch_size}, shuffle={spec.shuffle}"
            f"{', whole_degrees=True' if spec.whole_degrees else ''}"
            f"{', use_prefetch_thread=False' if not lookahead else ''}"
            f"{', use_prefetch_thread=True' if threaded and not workers else ''}"
            f"{f', num_workers={workers}' if workers else ''}"
            f"{f', prefetch_factor={depth}' if lookahead and depth != 2 else ''})")


def checked_call(graph: DistGraph, sampler, batch_size, whole_degrees: bool = False) -> dict:
    """The loader's spec fields of the sampler: its fanouts, for an edge loader its pairs,
    and its draws (options, or a user's sampler); refuses bad arguments."""
    try:  # an integer of any kind (numpy's, a 0-d tensor's), not 2.5 rounded down
        whole = operator.index(batch_size) if not isinstance(batch_size, bool) else 0
    except TypeError:
        whole = 0
    if whole < 1:
        raise InvalidValueError(f"DataLoader: batch_size {batch_size!r}; expected an "
                                f"integer >= 1")
    edges = is_edge_sampler(sampler)  # an edge loader: its node sampler draws the blocks
    if edges and not graph.strategy.capabilities.link_prediction:
        raise NotSupportedError(f"DataLoader: strategy {graph.strategy.registered_name!r} "
                                "does not train link prediction (edge loaders run under "
                                "distdgl, p3, granndis and fullgraph; docs/link_prediction.md)")
    node_sampler = sampler.sampler if edges else sampler
    prefetched_names(graph, node_sampler, labels=not edges)  # an edge loader's: edge data
    fields = {"pairs": EdgePairs(graph, sampler)} if edges else {}
    draw = user_sampler(graph, node_sampler)
    fields.update({"fanouts": (), "draw": draw} if draw is not None else
                  {"fanouts": sampler_fanouts(node_sampler, graph.pdir.types),
                   "sampling": sampler_options(graph, node_sampler)})
    if whole_degrees:
        why = "DataLoader(whole_degrees=True): blocks of DGL's neighbour samplers on a " \
            "graph without types only; got "
        graph.refuse_types(why + "a graph with types")
        if draw is not None:
            raise NotSupportedError(why + type(sampler).__name__)
    return fields
