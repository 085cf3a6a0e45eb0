"""Conversion between datasets and graphs: DGL's DGLGraph, or the package's
:class:`~dglx_dist.graphcore.heterograph.Graph` (no DGL), which :func:`from_dgl` reads through the
same API.

A graph with one node type and one edge type (DGL's homogeneous graph) is a
:class:`~dglx_dist.data.dataset.GraphDataset` without types, one with several a typed one. The
graph carries node data ``feat``,
``label``, ``train_mask``, ``val_mask`` and ``test_mask`` (per node type on a heterograph:
``g.nodes[ntype].data``), the names DGL's own node-classification datasets use, and its edge
data as the dataset's edge data (numeric tensors of one value or one vector per edge).
:func:`~dglx_dist.dgl.conversion.to_dgl` (DGL's door) is the one path from the package's graph
(or a dataset) to DGL's, :func:`~dglx_dist.graphcore.construct.to_graph` the one to the package's,
and :func:`user_graph` the one place that chooses between the two for a dataset's graph:
DGL's where DGL is installed, the package's where it is not (what the dataset loaders give).
Nothing here imports DGL.
"""
from __future__ import annotations

import functools
import importlib.util
import operator
import sys
from typing import Any

import numpy as np
import torch

from dglx_dist.data.dataset import EdgeTable, GraphDataset, NodeTable
from dglx_dist.data.edge_data import STRUCTURE
from dglx_dist.errors import DatasetFormatError, MissingDependencyError
from dglx_dist.graphcore.construct import MASK_KEYS, to_graph
from dglx_dist.graphcore.heterograph import Graph

__all__ = ["user_graph", "from_dgl", "check_convertible", "is_dgl", "is_heterograph",
           "dgl_installed", "require_dgl", "DGL_EXTRA"]


def is_heterograph(g) -> bool:
    """Whether a graph (DGL's or the package's) has several node or edge types (DGL's own
    test)."""
    return len(g.ntypes) != 1 or len(g.canonical_etypes) != 1


@functools.cache
def dgl_installed() -> bool:
    """Whether DGL can be imported here: a package named ``dgl`` with a file behind it. A
    folder named ``dgl`` on the path with no ``__init__.py`` (``examples/dgl`` beside a script
    run from ``examples/``) is a namespace package, not DGL."""
    try:
        spec = importlib.util.find_spec("dgl")
    except ImportError:  # a finder that refuses it
        return False
    return spec is not None and spec.origin is not None


DGL_EXTRA = "pip install dglx-dist[dgl]"


def require_dgl(what: str, instead: str = "") -> None:
    """Refuses ``what`` in one line where DGL cannot be imported: a MissingDependencyError
    naming the extra to install (and ``instead``, what works without DGL), or, where DGL is
    installed but its import fails, that failure (a DGL built for another torch, numpy 2, a
    missing library), so it is never taken for DGL being absent."""
    problem = _dgl_problem()
    if problem is not None:
        raise MissingDependencyError(f"{what} needs DGL, {problem}"
                                     + (f" ({instead})" if instead else ""))


def _dgl_problem() -> str | None:
    """Why DGL cannot be used here (None where ``import dgl`` works): not installed, or
    installed at a path where its import raises (that error, in one line)."""
    if not dgl_installed():
        return f"which is not installed: {DGL_EXTRA}"
    try:
        importlib.import_module("dgl")
    except Exception as exc:  # a broken install raises ImportError, OSError, RuntimeError...
        origin = importlib.util.find_spec("dgl").origin
        error = " ".join(f"{type(exc).__name__}: {exc}".split())
        return (f"which is installed ({origin}) but fails to import: {error}; DGL 2.1 needs "
                f"torch 2.0-2.2 and numpy < 2 (docs/install.md)")
    return None


def is_dgl(value, kind: str = "DGLGraph") -> bool:
    """Whether ``value`` is an instance of DGL's ``kind`` (a dotted name under ``dgl``, e.g.
    ``"DGLGraph"``, ``"dataloading.Sampler"``), without importing DGL: where no one has
    imported it, no object of DGL's can exist (False)."""
    dgl = sys.modules.get("dgl")
    try:
        return dgl is not None and isinstance(value, operator.attrgetter(kind)(dgl))
    except AttributeError:  # a ``dgl`` that is not DGL (a namespace package, see above)
        return False


def user_graph(source: GraphDataset | Graph):
    """A dataset (or the package's :class:`Graph`) as the graph a script that reads a
    dataset expects (DGL's dataset classes' ``dataset[0]``, :mod:`~dglx_dist.data.citation`):
    DGL's where DGL is installed, else the package's."""
    if dgl_installed():
        from dglx_dist.dgl.conversion import to_dgl  # noqa: PLC0415 - DGL's door, when it is used

        return to_dgl(source)
    return to_graph(source) if isinstance(source, GraphDataset) else source


def check_convertible(g, what: str) -> None:
    """Refuses a graph :func:`from_dgl` cannot take: no nodes, or a graph without types
    without ``ndata['feat']``.

    Raises:
        DatasetFormatError: naming ``what`` and the reason."""
    if g.num_nodes() == 0:
        raise DatasetFormatError(f"{what}: the graph has no nodes (node types {g.ntypes}); "
                                 "expected at least one")
    if not is_heterograph(g) and "feat" not in g.ndata:
        raise DatasetFormatError(f"{what}: g.ndata['feat'] is missing; "
                                 f"found {sorted(g.ndata.keys())}")


def from_dgl(g, num_classes: int | None = None, **extra: Any) -> GraphDataset:
    """A dataset from a graph (a DGLGraph, or the package's :class:`Graph`) with node data
    feat/label/train_mask/val_mask/test_mask.

    Args:
        g: the graph. Homogeneous (DGL's graph without types): missing masks are taken as
            all-false; a missing label (a graph for link prediction) as class 0 for every
            node. With several node or edge types: a typed dataset; each type keeps what it
            has (a type may have no features, and no labels; masks need labels).
        num_classes: defaults to the largest label + 1.
        **extra: free-form provenance stored in meta.json (e.g. ``name="cora"``).
    """
    check_convertible(g, "from_dgl")
    one_type = not is_heterograph(g)
    nodes = [_node_table(g, t, labeled=one_type) for t in g.ntypes]
    edges = [EdgeTable(*(_numpy(t, torch.int64) for t in g.edges(etype=et)),
                       _edge_data(g.edges[et].data)) for et in g.canonical_etypes]
    if num_classes is None:
        tops = [int(n.label.max()) + 1 for n in nodes if n.labeled and n.label.size]
        num_classes = max(tops, default=1)
    if one_type:  # DGL's graph without types, whatever its one type's names: ``_N`` / ``_E``
        [n], [e] = nodes, edges
        return GraphDataset(e.src, e.dst, n.feat, n.label, n.train, n.val, n.test,
                            int(num_classes), dict(extra), e.edata)
    return GraphDataset.typed(dict(zip(g.ntypes, nodes)), dict(zip(g.canonical_etypes, edges)),
                              int(num_classes), extra=dict(extra))


def _edge_data(edata) -> dict:
    """Edge data (``g.edata`` of one edge type) as numpy arrays of one value or one vector
    per edge."""
    out = {}
    for name, t in edata.items():
        if name in STRUCTURE or t.dim() not in (1, 2) or t.is_complex():
            raise DatasetFormatError(f"from_dgl: g.edata[{name!r}] has shape {tuple(t.shape)} "
                                     f"and dtype {t.dtype}; expected one number or one vector "
                                     f"per edge, under a name other than {', '.join(STRUCTURE)}")
        if t.dtype == torch.bfloat16:
            t = t.float()
        out[name] = np.ascontiguousarray(t.detach().cpu().numpy())
    return out


def _numpy(t: torch.Tensor, dtype: torch.dtype) -> np.ndarray:
    return np.ascontiguousarray(t.detach().cpu().to(dtype).numpy())


def _node_table(g, ntype: str, labeled: bool) -> NodeTable:
    """One node type's data; ``labeled``: a missing label is class 0 for every node."""
    data, n = g.nodes[ntype].data, g.num_nodes(ntype)
    feat = _numpy(data["feat"], torch.float32).reshape(n, -1) if "feat" in data else None
    if "label" not in data and not labeled:
        return NodeTable(n, feat)
    label = _numpy(data["label"], torch.int64).reshape(-1) if "label" in data else \
        np.zeros(n, np.int64)
    masks = {ours: (_numpy(data[theirs], torch.bool).reshape(-1) if theirs in data
                    else np.zeros(n, bool)) for ours, theirs in MASK_KEYS.items()}
    return NodeTable(n, feat, label, **masks)
