"""Host rows onto the rank's device, overlapped with the compute already queued there.

A step's feature rows arrive in host memory (the KVStore and sampling stay on the host, as
DistDGL's do). On a GPU they are copied from pinned (page-locked) host memory with
``non_blocking=True`` on a copy stream of their own, so the copy of step ``t+1`` runs while
the GPU still computes step ``t`` (whose kernels the caller queued before asking for the next
step); the compute stream waits for the copy's event only when the step is handed over.
Pinned blocks come from torch's caching host allocator, which keeps a block from being reused
until the copies recorded on it finished. On the CPU nothing is copied or pinned: a step's
tensors are handed over as they are.
"""
from __future__ import annotations

from typing import Callable

import torch

__all__ = ["DeviceCopies", "Ready"]

Ready = Callable[[], torch.Tensor]
"""Called when the step is handed over: the tensor on the device, safe to compute with on the
current stream."""


class DeviceCopies:
    """Copies host tensors to ``device`` (see the module docstring).

    Args:
        device: where the copies go.
        pin: copy from page-locked memory (DGL's ``pin_prefetcher``; None: when ``device``
            is a GPU). Only a GPU's copies pin.
        side_stream: copy on a stream of its own (DGL's ``use_alternate_streams``; None:
            when ``device`` is a GPU); False: on the current stream, in its order.

    Attributes:
        device: where the copies go.
        pins: whether host buffers are pinned.
    """

    def __init__(self, device: torch.device, pin: bool | None = None,
                 side_stream: bool | None = None):
        self.device = torch.device(device)
        gpu = self.device.type == "cuda"
        self.pins = gpu and (pin is None or bool(pin))
        stream = gpu and (side_stream is None or bool(side_stream))
        self._stream = torch.cuda.Stream(self.device) if stream else None

    def start(self, tensor: torch.Tensor) -> Ready:
        """Starts copying ``tensor`` to the device; the returned callable gives the device
        tensor once the current stream waits for the copy (``tensor`` itself where it already
        is on the device)."""
        if tensor.device == self.device or (tensor.device.type == self.device.type == "cpu"):
            return lambda: tensor
        if tensor.device.type != "cpu":  # from one device to another: nothing to pin
            moved = tensor.to(self.device)
            return lambda: moved
        source = tensor if not self.pins or tensor.is_pinned() else tensor.pin_memory()
        if self._stream is None:  # on the current stream (asynchronous from pinned memory)
            out = source.to(self.device, non_blocking=self.pins)
            return lambda: out
        with torch.cuda.stream(self._stream):
            out = source.to(self.device, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self._stream)

        def ready() -> torch.Tensor:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(copied)
            out.record_stream(current)  # its memory is the compute stream's from here on
            return out

        return ready
