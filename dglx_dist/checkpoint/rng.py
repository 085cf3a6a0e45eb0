"""A rank's random number generator states as plain data (tensors and integers).

DGL's own sampling RNG has no state to read; the strategies re-seed it at the start of every
epoch from (seed, epoch, rank), so a run resumed at an epoch boundary samples as the
uninterrupted one did.
"""
from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

__all__ = ["capture", "restore"]


def capture() -> dict[str, Any]:
    """torch (CPU and every CUDA device), numpy's global and Python's ``random`` states."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state = {"torch": torch.get_rng_state(),
             "numpy": {"kind": str(kind), "keys": torch.from_numpy(np.asarray(keys, np.int64)),
                       "pos": int(pos), "has_gauss": int(has_gauss), "gauss": float(gauss)},
             "python": {"version": int(version), "state": torch.tensor(internal, dtype=torch.int64),
                        "gauss_next": gauss_next}}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore(state: dict[str, Any]) -> None:
    """Sets the generators to a :func:`capture`'d state."""
    torch.set_rng_state(state["torch"])
    npy = state["numpy"]
    np.random.set_state((npy["kind"], npy["keys"].numpy().astype(np.uint32), npy["pos"],
                         npy["has_gauss"], npy["gauss"]))
    py = state["python"]
    random.setstate((py["version"], tuple(int(v) for v in py["state"].tolist()),
                     py["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
