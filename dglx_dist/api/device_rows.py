"""DGL's ``gpu_cache`` of a loader: rows of node data kept on the GPU the steps go to.

``gpu_cache={"node": {"feat": 500_000}}`` keeps the rows of ``feat`` of the 500,000 nodes
with the most out-edges in the whole graph (the sources a neighbour sampler draws most
often) in the memory of the steps' GPU. A step reads the rows of those of its nodes from
there and pulls only the others' from the store, which it merges on the device. The set is
fixed and ordered by degree, as issue 79 asks (the caches DGL uses, HugeCTR's and
GraphBolt's, fill and evict as the steps read; a fixed set is read once and needs no
bookkeeping per step). The rows are read from the store by this rank alone as the loader is
built. Once this rank writes rows of the name (``g.ndata[name][ids] = ...``) the kept rows
may be stale, so the cache drops them and the steps pull every row again; another rank's
writes are not seen by it (keep names the loop writes out of it).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch

from dglx_dist.errors import InvalidValueError, NotSupportedError

__all__ = ["DeviceRows", "Lookup", "node_caches"]


def node_caches(gpu_cache, device: torch.device) -> dict[str, int]:
    """DGL's ``gpu_cache`` argument as rows to keep by node data name, checked (node data
    only; a GPU only, as DGL's, whose cache runs on NVIDIA GPUs)."""
    if not gpu_cache:
        return {}
    if not isinstance(gpu_cache, dict) or set(gpu_cache) - {"node", "edge"}:
        raise InvalidValueError(f"DataLoader: gpu_cache={gpu_cache!r}; expected a dict such as "
                                "{'node': {'feat': 500000}} (DGL's form)")
    if gpu_cache.get("edge"):
        raise NotSupportedError("DataLoader: gpu_cache of edge data is not supported; expected "
                                "gpu_cache={'node': {name: rows}}")
    if device.type != "cuda":
        raise InvalidValueError(f"DataLoader: gpu_cache keeps rows on a GPU, and the steps go "
                                f"to {device} (as in DGL, NVIDIA GPUs only); expected no "
                                "gpu_cache, or a CUDA device")
    sizes = dict(gpu_cache.get("node") or {})
    for name, rows in sizes.items():
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise InvalidValueError(f"DataLoader: gpu_cache['node'][{name!r}]={rows!r}; "
                                    "expected a number of rows >= 1")
    return sizes


class Lookup(NamedTuple):
    """Where a step's rows come from: positions of the ids the cache holds and their slots
    in it, and positions of the others (to pull)."""

    hit: torch.Tensor
    slot: torch.Tensor
    miss: torch.Tensor


class DeviceRows:
    """The kept rows of one node data name (see the module docstring).

    Args:
        view: the graph's node data view of the name (``g.ndata[name]``).
        rows: the store's row ids of the nodes to keep (most out-edges first).
        device: where the rows are kept (the steps' device).
        pushes: the pushes to the name so far (the first of
            :meth:`~dglx_dist.api.step_rows.StepRows.stamp`'s): one after the fill makes the
            kept rows stale.
    """

    def __init__(self, view, rows: torch.Tensor, device: torch.device,
                 pushes: Callable[[], int]):
        self.view, self.device = view, torch.device(device)
        self._pushes, self._filled_at = pushes, pushes()
        self._rows = self._read(rows.long())
        self._slot = torch.full((view.shape[0],), -1, dtype=torch.int64)  # a row's slot, or -1
        self._slot[rows.long()] = torch.arange(rows.numel())

    def lookup(self, rows: torch.Tensor) -> Lookup | None:
        """Where ``rows`` (store row ids) come from; None where the cache holds nothing any
        more (rows of the name were pushed since it was filled)."""
        if self._pushes() != self._filled_at:
            return None
        slot = self._slot.index_select(0, rows.long())
        held = slot >= 0
        return Lookup(torch.nonzero(held).squeeze(1), torch.masked_select(slot, held),
                      torch.nonzero(~held).squeeze(1))

    def merged(self, found: Lookup, pulled: torch.Tensor) -> torch.Tensor:
        """A step's rows on the device: the kept rows at ``found.hit``, the ``pulled``
        ones (the store's rows at ``found.miss``, in order) at the others."""
        n = found.hit.numel() + found.miss.numel()
        out = torch.empty((n, *self._rows.shape[1:]), dtype=self._rows.dtype,
                          device=self.device)
        out[found.hit.to(self.device)] = self._rows.index_select(0, found.slot.to(self.device))
        out[found.miss.to(self.device)] = pulled.to(self.device, non_blocking=pulled.is_pinned())
        return out

    def _read(self, wanted: torch.Tensor) -> torch.Tensor:
        """The rows to keep, read from the store by this rank alone, on the device."""
        rows = self.view.rows(wanted)
        need = rows.numel() * rows.element_size()
        if self.device.type == "cuda" and need > torch.cuda.mem_get_info(self.device)[0]:
            raise InvalidValueError(
                f"DataLoader: gpu_cache of {wanted.numel()} rows of {self.view.key!r} needs "
                f"{need:,} bytes, more than {self.device} has free; expected fewer rows")
        return rows.to(self.device)
