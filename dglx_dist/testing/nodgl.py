"""A machine without DGL, in one interpreter or a whole job: :data:`NO_DGL` is Python source
that makes ``import dgl`` (and ``dgl.*``) raise ModuleNotFoundError from then on, and
:func:`blocking_path` writes it as a ``sitecustomize.py`` whose folder, put first on
``PYTHONPATH``, blocks DGL in every process a command starts (a launcher and its ranks)."""
from __future__ import annotations

import textwrap
from pathlib import Path

__all__ = ["NO_DGL", "blocking_path"]

NO_DGL = textwrap.dedent("""
    import importlib, importlib.abc, pkgutil, sys

    class NoDgl(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "dgl" or name.startswith("dgl."):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)

    sys.meta_path.insert(0, NoDgl())
    for name in [m for m in sys.modules if m == "dgl" or m.startswith("dgl.")]:
        del sys.modules[name]
""")


def blocking_path(folder: Path, extra: str = "") -> Path:
    """``folder`` holding a ``sitecustomize.py`` of :data:`NO_DGL` (then ``extra``, more
    source); put it first on ``PYTHONPATH``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(NO_DGL + extra)
    return folder
