"""What a :class:`~dglx_dist.api.loader.DataLoader` call asks for, checked before the
loader is built: DGL's options (refused, honoured or said to be ignored), how deep a worker
thread draws, the sampler's fields of the loader's spec, and the call as every rank
compares it (``same_call``) and errors name it."""
from __future__ import annotations

import operator
import warnings

from dglx_dist.api.graph import DistGraph
from dglx_dist.api.link import EdgePairs, is_edge_sampler
from dglx_dist.api.samplers import (prefetched_names, sampler_fanouts, sampler_options,
                                    user_sampler)
from dglx_dist.errors import InvalidTypeError, InvalidValueError, NotSupportedError
from dglx_dist.sampling.options import UNIFORM
from dglx_dist.strategies.steps import LoaderSpec

__all__ = ["call_options", "prefetch_depth", "call_signature", "checked_call"]

_IGNORED = ("device", "use_uva", "use_alternate_streams", "pin_prefetcher",
            "gpu_cache", "persistent_workers", "pin_memory")
"""DGL's loader options accepted with a warning: they have no meaning here yet."""


def call_options(session, kwargs: dict, num_workers, prefetch_factor) -> int:
    """Refuses unknown arguments, warns of those without meaning here and of
    ``num_workers`` (once: every rank is given them); the steps a worker thread may draw
    ahead (:func:`prefetch_depth`)."""
    ignored = sorted(k for k in kwargs if k in _IGNORED)
    unknown = sorted(k for k in kwargs if k not in _IGNORED)
    if unknown:
        raise InvalidTypeError(f"DataLoader: unknown arguments {unknown}")
    if ignored and session.is_main:
        warnings.warn(f"dglx_dist.DataLoader: {ignored} have no meaning here (the strategy "
                      f"decides where batches are built and where they live); ignored",
                      stacklevel=3)
    depth = prefetch_depth(num_workers, prefetch_factor)
    if num_workers and session.is_main:
        warnings.warn(f"dglx_dist.DataLoader: num_workers={num_workers}: sampler processes "
                      f"are not run yet; one worker thread draws prefetch_factor={depth} "
                      f"steps ahead instead", stacklevel=3)
    return depth


def prefetch_depth(num_workers, prefetch_factor) -> int:
    """Steps a worker thread may draw ahead (DGL's ``prefetch_factor``, default 2)."""
    for name, value, least in (("num_workers", num_workers, 0),
                               ("prefetch_factor", 2 if prefetch_factor is None
                                else prefetch_factor, 1)):
        try:
            ok = not isinstance(value, bool) and operator.index(value) >= least
        except TypeError:
            ok = False
        if not ok:
            raise InvalidValueError(f"DataLoader: {name}={value!r}; expected an integer "
                                    f">= {least}")
    return 2 if prefetch_factor is None else operator.index(prefetch_factor)


def call_signature(spec: LoaderSpec, sampler, lookahead: bool = True, depth: int = 2,
               threaded: bool = False) -> str:
    """The loader's call as ranks compare it and errors name it."""
    drawn = f"fanouts={list(spec.fanouts)}" if spec.draw is None else \
        f"sampler={type(sampler).__name__}"
    drawn += f", {spec.sampling}" if spec.sampling != UNIFORM else ""
    return (f"DataLoader({'edge' if spec.pairs else 'node'} ids, {drawn}, "
            f"batch_size={spec.batch_size}, shuffle={spec.shuffle}"
            f"{', whole_degrees=True' if spec.whole_degrees else ''}"
            f"{', use_prefetch_thread=False' if not lookahead else ''}"
            f"{', use_prefetch_thread=True' if threaded else ''}"
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
