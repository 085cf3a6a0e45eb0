"""``dglx data import NAME OUT``: an OGB dataset as a dglx dataset directory, with OGB's
official split, through the ``ogb`` package and without DGL (docs/dataset_format.md, "From
OGB").

What a dataset is comes from OGB itself: its ``master.csv`` (the names, each one's folder,
release, split scheme, classes and file layout) and its readers of the files it downloads
(``ogb.io.read_graph_raw``), called with the arguments OGB's own ``NodePropPredDataset`` and
``LinkPropPredDataset`` pass them; the split is the files OGB's ``get_idx_split`` /
``get_edge_split`` read (``split/SCHEME/...``). Those classes themselves are not used: they
unpickle their cache (``processed/data_processed``) with ``torch.load``, which runs what the
file names and fails under torch >= 2.6, write that cache into ROOT and ask on stdin when a
folder lacks its release file. Here ROOT is only read (OGB downloads into it where the
dataset's folder is missing), its ``.pt`` split files are read as numpy arrays alone
(:mod:`~dglx_dist.data.torch_files`), and the test checks that the result is what OGB's
classes give on the same files.

* **Node tasks** (``ogbn-*`` with one class per node): nodes, features, labels and the masks
  of OGB's split; a typed one (ogbn-mag) as a typed dataset. Edges OGB lists one way get
  their reverses (DGL's ``add_reverse_edges``; in a typed graph each relation a ``rev-``
  one, as ``dglx datagen --preset mag`` names them) unless ``directed``.
* **Link tasks** (``ogbl-*`` of a graph without types, with node features): the training
  edges of OGB's split, both directions (edge e's reverse is e + E/2), with the validation
  and test pairs beside the tables (``val_u.npy``, ...), as ``dglx train --task link`` takes
  a split given with the data.

Everything else OGB has is refused in one line saying why.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from dglx_dist.data.atomic import check_target
from dglx_dist.data.dataset import EdgeTable, GraphDataset, NodeTable
from dglx_dist.graphcore.types import ONE_ETYPE, ONE_NTYPE, Etype
from dglx_dist.data.format import DATASET_DIR, HELDOUT_ARRAYS, write_dataset
from dglx_dist.data.mag import reverse_etype
from dglx_dist.data.ogb_files import (OGB_SPLIT, OgbDataset, check_layout, fetch_dataset,
                                      ogb_package, read_graph, read_labels, read_master,
                                      read_split)
from dglx_dist.errors import DatasetFormatError, InvalidValueError, UnknownNameError

__all__ = ["OgbDataset", "ogb_dataset", "import_ogb", "ogb_package", "DEFAULT_ROOT"]

log = logging.getLogger(__name__)
DEFAULT_ROOT = Path("dataset")  # OGB's own default root


@dataclasses.dataclass(frozen=True)
class _Family:
    """A kind of OGB task dglx trains: where OGB lists its datasets, what dglx refuses of
    them (``(refuse?, why)``, first match), and how one becomes a dataset (with the arrays
    written beside its tables)."""

    folder: str
    task: str
    refusals: tuple[tuple[Callable[[OgbDataset], bool], str], ...]
    convert: Callable[[OgbDataset, Path, bool], tuple[GraphDataset, dict[str, np.ndarray]]]


def ogb_dataset(name: str) -> OgbDataset:
    """``name`` as OGB describes it, if dglx trains it.

    Raises:
        UnknownNameError: OGB (this version) has no such node or link dataset.
        InvalidValueError: OGB has it but dglx does not train it (the message says why).
    """
    prefix = name.split("-", 1)[0]
    family = _FAMILIES.get(prefix)
    if family is None:
        raise UnknownNameError(f"{name!r} is no OGB node or link dataset: dglx imports "
                               f"{' and '.join(f'{p}-*' for p in _FAMILIES)} (graph property "
                               f"and OGB-LSC datasets are not trained by dglx)")
    master = read_master(family.folder)
    if name not in master:
        raise UnknownNameError(f"OGB {ogb_package().__version__} has no dataset {name!r}; its "
                               f"{prefix}-* datasets: {', '.join(sorted(master))}")
    ds = OgbDataset(name, prefix, master[name])
    for refuse, why in family.refusals:
        if refuse(ds):
            raise InvalidValueError(f"dglx data import {name}: {why.format(**ds.info)}")
    return ds


def _labeled(ds: OgbDataset, ntype: str, n: int, label: np.ndarray,
             split: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A labeled node type's label and masks: OGB's split, its nodes all labeled; a node
    without a label (NaN) takes class 0 and stays out of the masks."""
    y = np.asarray(label).reshape(n, -1)
    if y.shape[1] != 1:
        raise InvalidValueError(f"{ds.name}: {y.shape[1]} labels per {ntype} node; dglx "
                                f"trains one class per node")
    y = y[:, 0]
    known = np.isfinite(y) if y.dtype.kind == "f" else np.ones(n, bool)
    out = {"label": np.where(known, y, 0).astype(np.int64)}
    for ours, theirs in OGB_SPLIT.items():
        idx = split[theirs]
        idx = np.asarray(idx.get(ntype, []) if isinstance(idx, Mapping) else idx, np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            bad = idx.min() if idx.min() < 0 else idx.max()
            raise DatasetFormatError(f"{ds.name}: split {theirs!r} names {ntype} node "
                                     f"{int(bad)}, outside [0, {n})")
        if not known[idx].all():
            raise DatasetFormatError(f"{ds.name}: split {theirs!r} names {ntype} nodes "
                                     f"without a label")
        out[ours] = np.zeros(n, bool)
        out[ours][idx] = True
    return out


def _with_reverses(edges: dict[Etype, EdgeTable]) -> dict[Etype, EdgeTable]:
    """Each edge also the other way: in DGL's one edge type of a graph without types (as
    ``dgl.add_reverse_edges``), else as a ``rev-`` relation of its own (``reverse_etype``)."""
    out = dict(edges)
    for etype, e in edges.items():
        if etype == ONE_ETYPE:
            out[etype] = EdgeTable(np.concatenate([e.src, e.dst]), np.concatenate([e.dst, e.src]))
        else:
            out[reverse_etype(etype)] = EdgeTable(e.dst, e.src)
    return out


def _node_dataset(ds: OgbDataset, folder: Path,
                  directed: bool) -> tuple[GraphDataset, dict[str, np.ndarray]]:
    counts, feats, edge_index = read_graph(ds, folder)
    labels = read_labels(ds, folder)
    split = read_split(ds, folder)
    if not isinstance(split, Mapping) or set(split) < set(OGB_SPLIT.values()):
        raise DatasetFormatError(f"{folder}: the split holds {type(split).__name__} "
                                 f"{sorted(split)[:5] if isinstance(split, Mapping) else ''}; "
                                 f"expected train, valid and test")
    nodes = {t: NodeTable(n, feats.get(t), **(_labeled(ds, t, n, labels[t], split)
                                              if t in labels else {}))
             for t, n in counts.items()}
    edges = {et: EdgeTable(e[0], e[1]) for et, e in edge_index.items()}
    reverse = not directed and not ds.flag("add_inverse_edge")
    if reverse:
        edges = _with_reverses(edges)
    listed = "both directions (OGB's)" if ds.flag("add_inverse_edge") else \
        "both directions (reverses added)" if reverse else "as OGB lists them"
    return GraphDataset.typed(nodes, edges, ds.num_classes,
                              extra=_provenance(ds, listed)), {}


def _positives(part: Any, ds: OgbDataset, which: str) -> tuple[np.ndarray, np.ndarray]:
    """The positive pairs of one part of OGB's edge split: ``edge`` (E, 2), or
    ``source_node`` and ``target_node`` (ogbl-citation2)."""
    if isinstance(part, Mapping) and "edge" in part:
        e = np.asarray(part["edge"], np.int64)
        if e.ndim == 2 and e.shape[1] == 2:
            return e[:, 0], e[:, 1]
    if isinstance(part, Mapping) and {"source_node", "target_node"} <= set(part):
        return (np.asarray(part["source_node"], np.int64).reshape(-1),
                np.asarray(part["target_node"], np.int64).reshape(-1))
    keys = sorted(part) if isinstance(part, Mapping) else type(part).__name__
    raise DatasetFormatError(f"{ds.name}: split {which!r} holds {keys}; expected 'edge' (E, 2) "
                             f"or 'source_node' and 'target_node'")


def _link_dataset(ds: OgbDataset, folder: Path,
                  directed: bool) -> tuple[GraphDataset, dict[str, np.ndarray]]:
    if directed:
        raise InvalidValueError(f"dglx data import {ds.name}: --directed not accepted (the "
                                f"link task trains on both directions of each training edge)")
    counts, feats, _ = read_graph(ds, folder)
    split = read_split(ds, folder)
    (u, v), val, test = (_positives(split.get(s) if isinstance(split, Mapping) else None, ds, s)
                         for s in OGB_SPLIT.values())
    n = counts[ONE_NTYPE]
    none = np.zeros(n, bool)
    graph = GraphDataset(np.concatenate([u, v]), np.concatenate([v, u]), feats[ONE_NTYPE],
                         np.zeros(n, np.int64), none, none, none, num_classes=1,
                         extra=_provenance(ds, "both directions (edge e's reverse is e + E/2)"))
    GraphDataset.typed(graph.nodes, graph.edges, 1)  # checks the ids against the node count
    for name, ids in zip(HELDOUT_ARRAYS, (*val, *test)):
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            raise DatasetFormatError(f"{ds.name}: held-out {name} id outside [0, {n})")
    return graph, dict(zip(HELDOUT_ARRAYS, (*val, *test)))


def _provenance(ds: OgbDataset, edges: str) -> dict[str, Any]:
    """meta.json's provenance: where the dataset came from, the task dglx trains on it, how
    its edges are listed."""
    return {"name": ds.name, "source": "ogb", "ogb_version": ogb_package().__version__,
            "ogb_release": ds.version, "split": ds.info["split"],
            "task": _FAMILIES[ds.family].task, "edges": edges}


def import_ogb(name: str, out: str | os.PathLike, root: str | os.PathLike | None = None,
               overwrite: bool = False, directed: bool = False,
               download: bool = True) -> GraphDataset:
    """Writes OGB's dataset ``name`` as the dataset directory ``out`` (module docstring).

    Args:
        name: OGB's name (``ogbn-arxiv``, ``ogbn-mag``, ``ogbl-collab``, ...).
        out: the directory to write (the rules of ``dglx datagen``: a new or empty directory,
            or with ``overwrite`` one dglx wrote).
        root: where OGB keeps its datasets (``ROOT/ogbn_arxiv/...``); OGB's default ``dataset``.
        overwrite: replace ``out`` if it is a dataset directory dglx wrote.
        directed: keep the edges of a node task as OGB lists them.
        download: let OGB download a dataset whose folder is missing (else refuse).

    Returns:
        The dataset written.

    Raises:
        UnknownNameError / InvalidValueError: a name OGB lacks or dglx does not train.
        DatasetFormatError: ``ROOT/FOLDER`` is not OGB's files of the dataset.
        OutputExistsError: ``out`` may not be written.
    """
    ds = ogb_dataset(name)
    root = DEFAULT_ROOT if root is None else Path(root)
    folder = root / ds.dir_name
    check_target(out, overwrite, DATASET_DIR, inputs=[folder])
    if root.exists() and not root.is_dir():
        raise DatasetFormatError(f"--ogb-root {root} is not a directory")
    if not folder.exists():
        if not download:
            raise DatasetFormatError(f"{folder} does not exist (OGB would download {name} "
                                     f"there; not with --no-download)")
        log.info("%s: OGB downloads it into %s", name, root)
        fetch_dataset(ds, root)
    check_layout(ds, folder)
    graph, arrays = _FAMILIES[ds.family].convert(ds, folder, directed)
    write_dataset(graph, out, overwrite=overwrite, arrays=arrays)
    return graph


_FAMILIES: dict[str, _Family] = {
    "ogbn": _Family("nodeproppred", "node", (
        (lambda d: d.info["task type"] != "multiclass classification" or
         d.info["num tasks"] != "1",
         "{num tasks} {task type} tasks per node (scored by {eval metric}); dglx trains one "
         "class per node"),
        (lambda d: not d.flag("has_node_attr"), "it has no node features; dglx's models "
         "read them")), _node_dataset),
    "ogbl": _Family("linkproppred", "link", (
        (lambda d: d.info["task type"] != "link prediction" or d.flag("is hetero"),
         "a {task type} task over typed relations (scored by {eval metric}); dglx train "
         "--task link trains on a graph without types"),
        (lambda d: not d.flag("has_node_attr"), "it has no node features; dglx's models "
         "read them")), _link_dataset),
}
"""The OGB families dglx imports, by name prefix."""
