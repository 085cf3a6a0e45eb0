"""Conversion between :class:`GraphDataset` and a DGLGraph.

The DGLGraph carries ndata ``feat``, ``label``, ``train_mask``, ``val_mask`` and ``test_mask``, the
names DGL's own node-classification datasets use, and its edge data as the dataset's ``edata``
(numeric tensors of one value or one vector per edge).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from dglx_dist.data.edge_data import STRUCTURE
from dglx_dist.data.format import GraphDataset
from dglx_dist.errors import DatasetFormatError

__all__ = ["to_dgl", "from_dgl", "check_convertible"]

_MASK_KEYS = {"train": "train_mask", "val": "val_mask", "test": "test_mask"}


def to_dgl(ds: GraphDataset):
    """A DGLGraph with the dataset's edges (in file order) and node data."""
    import dgl

    g = dgl.graph((torch.from_numpy(ds.src), torch.from_numpy(ds.dst)), num_nodes=ds.num_nodes)
    g.ndata["feat"] = torch.from_numpy(ds.feat)
    g.ndata["label"] = torch.from_numpy(ds.label)
    for ours, theirs in _MASK_KEYS.items():
        g.ndata[theirs] = torch.from_numpy(getattr(ds, ours))
    for name, values in ds.edata.items():
        g.edata[name] = torch.from_numpy(values)
    return g


def _edge_data(g) -> dict:
    """``g.edata`` as numpy arrays of one value or one vector per edge."""
    out = {}
    for name, t in g.edata.items():
        if name in STRUCTURE or t.dim() not in (1, 2) or t.is_complex():
            raise DatasetFormatError(f"from_dgl: g.edata[{name!r}] has shape {tuple(t.shape)} "
                                     f"and dtype {t.dtype}; expected one number or one vector "
                                     f"per edge, under a name other than {', '.join(STRUCTURE)}")
        if t.dtype == torch.bfloat16:
            t = t.float()
        out[name] = np.ascontiguousarray(t.detach().cpu().numpy())
    return out


def check_convertible(g, what: str) -> None:
    """Refuses a DGLGraph :func:`from_dgl` cannot take: several node or edge types, no nodes,
    no ``ndata['feat']``.

    Raises:
        DatasetFormatError: naming ``what`` and the reason."""
    if len(g.ntypes) != 1 or len(g.etypes) != 1:
        raise DatasetFormatError(f"{what} needs a homogeneous graph; got node types {g.ntypes} "
                                 f"and edge types {g.etypes} (use dgl.to_homogeneous first)")
    if g.num_nodes() == 0:
        raise DatasetFormatError(f"{what}: the graph has no nodes; expected at least one")
    if "feat" not in g.ndata:
        raise DatasetFormatError(f"{what}: g.ndata['feat'] is missing; "
                                 f"found {sorted(g.ndata.keys())}")


def from_dgl(g, num_classes: int | None = None, **extra: Any) -> GraphDataset:
    """A dataset from a homogeneous DGLGraph with ndata feat/label/train_mask/val_mask/test_mask.

    Args:
        g: the graph. Missing masks are taken as all-false; a missing label (a graph for
            link prediction) as class 0 for every node.
        num_classes: defaults to ``label.max() + 1``.
        **extra: free-form provenance stored in meta.json (e.g. ``name="cora"``).
    """
    check_convertible(g, "from_dgl")
    feat = g.ndata["feat"].detach().cpu().to(torch.float32).reshape(g.num_nodes(), -1).numpy()
    label = np.zeros(g.num_nodes(), np.int64) if "label" not in g.ndata else \
        g.ndata["label"].detach().cpu().to(torch.int64).reshape(-1).numpy()
    masks = {}
    for ours, theirs in _MASK_KEYS.items():
        m = g.ndata.get(theirs)
        masks[ours] = (np.zeros(g.num_nodes(), bool) if m is None
                       else m.detach().cpu().numpy().astype(bool).reshape(-1))
    src, dst = (t.cpu().to(torch.int64).numpy() for t in g.edges())
    n_cls = int(label.max()) + 1 if num_classes is None and label.size else int(num_classes or 1)
    return GraphDataset(src, dst, np.ascontiguousarray(feat), label, masks["train"],
                        masks["val"], masks["test"], n_cls, dict(extra), _edge_data(g))
