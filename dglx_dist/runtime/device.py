"""Where a rank computes: its torch device and the backend of its device collectives.

docs/launching.md ("GPUs") gives the choices (``--device`` / ``DGLX_DEVICE``, ``--backend``).
Process groups under NCCL carry both backends (``"cpu:gloo,cuda:nccl"``): host tensors over
gloo, device tensors over NCCL, dispatched by the tensor's device. Bad combinations are refused
before any process group exists, each in one line naming the rank, the device and what is
expected; :func:`mixed_devices` compares the ranks' choices once the groups are up.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping, Sequence

import torch

from dglx_dist.errors import InvalidValueError

__all__ = ["Placement", "choose_placement", "group_backend", "mixed_devices", "module_devices",
           "nccl_environment", "DEVICE_KINDS"]

DEVICE_KINDS = ("cpu", "cuda")
"""Device kinds a rank may compute on (``--device``; ``auto`` picks one of them)."""


@dataclasses.dataclass(frozen=True)
class Placement:
    """A rank's device and the backend of its device collectives.

    Attributes:
        device: where the model, blocks, features and labels live.
        backend: "nccl" or "gloo": what ``--backend`` asked for (or the default).
    """

    device: torch.device
    backend: str

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"


def _parse_device(text: str, rank: int) -> tuple[str, int | None]:
    kind, _, index = text.strip().lower().partition(":")
    if kind not in ("auto", *DEVICE_KINDS) or (index and (kind != "cuda" or not index.isdigit())):
        raise InvalidValueError(f"rank {rank}: device {text!r}; expected 'auto', 'cpu', 'cuda' "
                                f"or 'cuda:N'")
    return kind, int(index) if index else None


def choose_placement(rank: int, local_rank: int, local_world_size: int, backend: str | None,
                     device: str | None, cuda_count: int) -> Placement:
    """The device and backend of global rank ``rank`` (local rank ``local_rank`` of
    ``local_world_size`` on its machine, which has ``cuda_count`` usable GPUs).

    Args:
        backend: "gloo", "nccl" or None (NCCL when the device is a GPU, else gloo).
        device: "auto"/None, "cpu", "cuda" or "cuda:N".

    Raises:
        InvalidValueError: a device that is not there, NCCL without a GPU per local rank.
    """
    if backend not in (None, "gloo", "nccl"):
        raise InvalidValueError(f"rank {rank}: backend {backend!r}; expected 'gloo' or 'nccl'")
    kind, index = _parse_device(device or "auto", rank)
    if kind == "auto":
        kind = "cuda" if cuda_count else "cpu"
    where = f"rank {rank} (local rank {local_rank} of {local_world_size})"
    if kind == "cpu":
        if backend == "nccl":
            why = ("CUDA is not available here" if not cuda_count else "its device is the CPU")
            raise InvalidValueError(f"{where}: backend 'nccl' needs a CUDA device and {why}; "
                                    f"expected --backend gloo (or --device cuda on a GPU machine)")
        return Placement(torch.device("cpu"), backend or "gloo")
    if not cuda_count:
        raise InvalidValueError(f"{where}: device {device!r} needs CUDA, which is not available "
                                f"here (torch {torch.__version__}); expected --device cpu")
    backend = backend or "nccl"
    if index is None:
        if backend == "nccl" and local_world_size > cuda_count:
            raise InvalidValueError(
                f"{where}: {local_world_size} local ranks but {cuda_count} GPU(s) on this "
                f"machine; NCCL needs one GPU per rank: launch with --nproc-per-node "
                f"{cuda_count}, or use --backend gloo to share GPUs")
        index = local_rank % cuda_count
    elif index >= cuda_count:
        raise InvalidValueError(f"{where}: device cuda:{index}, but this machine has "
                                f"{cuda_count} GPU(s) (cuda:0 to cuda:{cuda_count - 1})")
    return Placement(torch.device("cuda", index), backend)


def group_backend(backend: str) -> str:
    """torch.distributed's backend string for the job's process groups: under NCCL both
    backends, dispatched by the tensor's device (host traffic stays on gloo)."""
    return "cpu:gloo,cuda:nccl" if backend == "nccl" else "gloo"


def nccl_environment(environ: Mapping[str, str], timeout: float) -> dict[str, str]:
    """The NCCL settings a job under NCCL needs where the user did not set them: errors and
    timeouts surface as exceptions in the waiting call (which the comm layer turns into the
    error naming the failed rank), not as an abort of the process by NCCL's watchdog; the
    watchdog's own heartbeat is left a margin over the job's timeout."""
    wanted = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2",  # CleanUpOnly: abort comms, raise
              "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": str(int(timeout) + 60)}
    return {k: v for k, v in wanted.items() if k not in environ}


def mixed_devices(devices: Sequence[str]) -> str | None:
    """None when every rank computes on the same kind of device, else one line saying which
    ranks are on which (``devices[r]``: rank r's device, e.g. "cuda:0")."""
    kinds: dict[str, list[int]] = {}
    for rank, name in enumerate(devices):
        kinds.setdefault(name.split(":")[0], []).append(rank)
    if len(kinds) < 2:
        return None
    parts = "; ".join(f"rank(s) {_ranges(r)} on {k}" for k, r in sorted(kinds.items()))
    return (f"mixed devices among ranks: {parts}; expected every rank on the same kind of "
            f"device (the same --device, and CUDA on every machine of a GPU job)")


def _ranges(ranks: list[int]) -> str:
    shown = ", ".join(str(r) for r in ranks[:8])
    return shown + (f", ... ({len(ranks)} ranks)" if len(ranks) > 8 else "")


def module_devices(tensors: Iterable[tuple[str, torch.Tensor]],
                   device: torch.device) -> list[str]:
    """Names (with their devices) of the named ``tensors`` that are not on ``device``
    (a module's parameters and buffers)."""
    return [f"{name} on {t.device}" for name, t in tensors if not _same(t.device, device)]


def _same(a: torch.device, b: torch.device) -> bool:
    return a.type == b.type and (a.type == "cpu" or a.index == b.index)

