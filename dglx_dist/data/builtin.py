"""Datasets shipped inside the package, so the demo and tests need no network."""
from __future__ import annotations

from pathlib import Path

from dglx_dist.errors import UnknownNameError

__all__ = ["builtin_names", "builtin_path"]

_ROOT = Path(__file__).resolve().parent / "builtin"


def builtin_names() -> list[str]:
    """Names of the shipped datasets."""
    return sorted(p.name for p in _ROOT.iterdir() if (p / "meta.json").is_file())


def builtin_path(name: str = "cora") -> Path:
    """The dataset directory of a shipped dataset (Cora: 2708 nodes, Planetoid split)."""
    path = _ROOT / name
    if not (path / "meta.json").is_file():
        raise UnknownNameError(f"no built-in dataset {name!r}; available: {builtin_names()}")
    return path
