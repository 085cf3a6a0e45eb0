"""A thin binding of the METIS C library (``METIS_PartGraphKway`` / ``Recursive``) over ctypes:
several constraints per vertex (``vwgt``), their tolerances (``ubvec``), the objective and a
seed, reproducible and without DGL (docs/partitioners.md says why not DGL's call or pymetis).

The library: ``$DGLX_METIS_LIBRARY`` when set, else the ``cmeel-metis`` wheel's
(``site-packages/cmeel.prefix/lib/libmetis.so``), else the system's
(``ctypes.util.find_library("metis")``). The index and real widths are read from the
``metis.h`` installed beside it (``../include``), else taken as 32 bits each; with 32-bit
indices a symmetric adjacency of more than 2^31 - 1 entries is refused in one line.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import re
import sys
from pathlib import Path

import numpy as np

from dglx_dist.errors import InvalidValueError, MissingDependencyError, PartitionError

__all__ = ["MetisLibrary", "load_metis", "part_graph", "symmetric_csr"]

_OPTION_OBJTYPE, _OPTION_NCUTS, _OPTION_SEED, _OPTION_NUMBERING = 1, 8, 9, 19  # moptions_et
_NOPTIONS = 40
_OK, _ERRORS = 1, {-2: "erroneous input or options", -3: "out of memory", -4: "an error"}
_ENV = "DGLX_METIS_LIBRARY"


class MetisLibrary:
    """The loaded library and its index / real widths."""

    def __init__(self, path: Path, lib: ctypes.CDLL, idx_bits: int, real_bits: int):
        self.path, self.lib = path, lib
        self.idx = np.int32 if idx_bits == 32 else np.int64
        self.real = np.float32 if real_bits == 32 else np.float64

    def __repr__(self) -> str:
        return (f"MetisLibrary({str(self.path)!r}, idx={np.dtype(self.idx).name}, "
                f"real={np.dtype(self.real).name})")


def _candidates() -> list[Path]:
    """Where the library is looked for, in order."""
    if os.environ.get(_ENV):
        return [Path(os.environ[_ENV])]
    found = [Path(p) / "cmeel.prefix" / "lib" / "libmetis.so" for p in sys.path if p]
    system = ctypes.util.find_library("metis")
    return found + ([Path(system)] if system else [])


def _widths(lib_path: Path) -> tuple[int, int]:
    """IDXTYPEWIDTH and REALTYPEWIDTH from the metis.h beside the library (32, 32 without)."""
    header = lib_path.resolve().parent.parent / "include" / "metis.h"
    widths = {"IDXTYPEWIDTH": 32, "REALTYPEWIDTH": 32}
    if header.is_file():
        for name in widths:
            match = re.search(rf"^\s*#define\s+{name}\s+(\d+)", header.read_text(), re.M)
            if match:
                widths[name] = int(match.group(1))
    return widths["IDXTYPEWIDTH"], widths["REALTYPEWIDTH"]


@functools.lru_cache(maxsize=1)
def load_metis() -> MetisLibrary:
    """The METIS library (loaded once per process).

    Raises:
        MissingDependencyError: none could be loaded, naming where it was looked for.
    """
    tried = []
    for path in _candidates():
        if not path.exists() and path.is_absolute():
            tried.append(str(path))
            continue
        try:
            gklib = path.parent / "libGKlib.so"
            if gklib.exists():  # the wheel's libmetis needs it and has no rpath to it
                ctypes.CDLL(str(gklib), mode=ctypes.RTLD_GLOBAL)
            lib = ctypes.CDLL(str(path))
            lib.METIS_PartGraphKway, lib.METIS_PartGraphRecursive  # noqa: B018 - both exist
        except (OSError, AttributeError) as exc:
            tried.append(f"{path} ({exc})")
            continue
        return MetisLibrary(path, lib, *_widths(path))
    raise MissingDependencyError(
        f"the METIS library could not be loaded (looked for {', '.join(tried) or 'nothing'}); "
        f"install the cmeel-metis package (pip install cmeel-metis), or point {_ENV} at a "
        "libmetis.so")


def _ptr(a: np.ndarray):
    return None if a is None else a.ctypes.data_as(ctypes.c_void_p)


def part_graph(indptr: np.ndarray, indices: np.ndarray, nparts: int,
               vwgt: np.ndarray | None = None, ubvec: np.ndarray | None = None,
               objective: str = "cut", seed: int = 0, recursive: bool = False,
               ncuts: int = 1) -> np.ndarray:
    """METIS's part of each vertex of a symmetric graph without self loops (CSR).

    Args:
        indptr, indices: the adjacency (both directions of every edge, no self loops).
        nparts: parts (>= 1).
        vwgt: ``(n, ncon)`` non-negative integer weights, one column per constraint
            balanced (None: one, the vertex count).
        ubvec: ``(ncon,)`` allowed imbalance per constraint, each > 1 (None: METIS's 1.001
            for k-way with one constraint, 1.01 otherwise).
        objective: "cut" (edge cut) or "vol" (communication volume; k-way only).
        seed: METIS's random seed: the same input and seed give the same parts.
        recursive: recursive bisection instead of k-way.
        ncuts: partitionings METIS computes (from different random starts); the best is kept.

    Raises:
        InvalidValueError: bad arguments, naming which.
        PartitionError: METIS failed, or the graph is too large for the library's indices.
    """
    n = indptr.size - 1
    if nparts < 1:
        raise InvalidValueError(f"METIS: nparts = {nparts}; expected >= 1")
    if nparts == 1 or n == 0:
        return np.zeros(max(n, 0), dtype=np.int64)
    lib = load_metis()
    limit = np.iinfo(lib.idx).max
    if indices.size > limit or n > limit:
        raise PartitionError(f"METIS: the symmetric adjacency has {indices.size:,} entries; "
                             f"{lib} indexes at most {limit:,}: partition with hash, or use a "
                             f"METIS library built with 64-bit indices ({_ENV})")
    if objective not in ("cut", "vol"):
        raise InvalidValueError(f"METIS: objective {objective!r}; expected 'cut' or 'vol'")
    if not 0 <= int(seed) <= limit:
        raise InvalidValueError(f"METIS: seed {seed}; expected 0 <= seed <= {limit}")
    if not 1 <= int(ncuts) <= 100:
        raise InvalidValueError(f"METIS: ncuts {ncuts}; expected 1 <= ncuts <= 100")
    weights, ncon = _weights(vwgt, n, lib)
    ub = _tolerances(ubvec, ncon, lib)
    options = np.full(_NOPTIONS, -1, dtype=lib.idx)
    lib.lib.METIS_SetDefaultOptions(_ptr(options))
    options[_OPTION_OBJTYPE] = 0 if objective == "cut" else 1
    options[_OPTION_SEED] = int(seed)
    options[_OPTION_NCUTS] = int(ncuts)
    options[_OPTION_NUMBERING] = 0
    xadj = np.ascontiguousarray(indptr, dtype=lib.idx)
    adjncy = np.ascontiguousarray(indices, dtype=lib.idx)
    nv, nc, npt = (np.array([v], dtype=lib.idx) for v in (n, ncon, nparts))
    cut, part = np.zeros(1, dtype=lib.idx), np.zeros(n, dtype=lib.idx)
    call = lib.lib.METIS_PartGraphRecursive if recursive else lib.lib.METIS_PartGraphKway
    status = call(_ptr(nv), _ptr(nc), _ptr(xadj), _ptr(adjncy), _ptr(weights), None, None,
                  _ptr(npt), None, _ptr(ub), _ptr(options), _ptr(cut), _ptr(part))
    if status != _OK:
        raise PartitionError(f"METIS_PartGraph{'Recursive' if recursive else 'Kway'} returned "
                             f"{status} ({_ERRORS.get(status, 'unknown')}) on {n:,} vertices, "
                             f"{indices.size:,} adjacency entries, {ncon} constraint(s), "
                             f"{nparts} parts")
    return part.astype(np.int64)


def _weights(vwgt: np.ndarray | None, n: int, lib: MetisLibrary):
    if vwgt is None:
        return None, 1
    vwgt = np.asarray(vwgt)
    if vwgt.ndim == 1:
        vwgt = vwgt[:, None]
    if vwgt.ndim != 2 or vwgt.shape[0] != n or vwgt.shape[1] < 1:
        raise InvalidValueError(f"METIS: vwgt has shape {vwgt.shape}; expected ({n}, ncon): "
                                "one row per vertex, one column per constraint")
    if vwgt.dtype.kind not in "iub" or (vwgt.size and int(vwgt.min()) < 0):
        raise InvalidValueError("METIS: vwgt must be non-negative integers")
    if vwgt.size and int(vwgt.max()) > np.iinfo(lib.idx).max:
        raise InvalidValueError(f"METIS: vwgt values up to {int(vwgt.max())} do not fit "
                                f"{np.dtype(lib.idx).name}")
    return np.ascontiguousarray(vwgt, dtype=lib.idx), vwgt.shape[1]


def _tolerances(ubvec: np.ndarray | None, ncon: int, lib: MetisLibrary):
    if ubvec is None:
        return None
    ub = np.asarray(ubvec, dtype=np.float64).reshape(-1)
    if ub.size != ncon or not np.all(ub > 1.0) or not np.all(np.isfinite(ub)):
        raise InvalidValueError(f"METIS: ubvec {ub.tolist()}; expected {ncon} tolerance(s), "
                                "each a finite number > 1 (1.05: 5% imbalance)")
    return np.ascontiguousarray(ub, dtype=lib.real)


def symmetric_csr(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The CSR METIS takes of the graph ``src -> dst`` over ``n`` vertices: every edge in both
    directions, once, without self loops (as DGL makes the graph symmetric first)."""
    import scipy.sparse as sp

    keep = src != dst
    ones = np.ones(int(keep.sum()), dtype=np.int8)
    adj = sp.coo_matrix((ones, (src[keep], dst[keep])), shape=(n, n)).tocsr()
    adj = (adj + adj.T).tocsr()
    adj.sort_indices()
    return adj.indptr.astype(np.int64), adj.indices.astype(np.int64)
