"""OGB's package and the files it keeps, read without its dataset classes
(:mod:`~dglx_dist.data.ogb_import` says why; docs/dataset_format.md, "From OGB").

:func:`ogb_package` imports ``ogb``; :func:`read_master` is its list of datasets
(``master.csv``), :class:`OgbDataset` one of them. :func:`check_layout` tells whether a folder
holds OGB's files of a dataset, :func:`fetch_dataset` downloads them as OGB's loaders do, and
:func:`read_graph`, :func:`read_labels` and :func:`read_split` read them with OGB's own readers
(``ogb.io.read_graph_raw``) and the arguments its loaders pass, a ``.pt`` split as numpy arrays
alone (:func:`read_numpy_file`). A failure of OGB's readers is one line
(:class:`~dglx_dist.errors.DatasetFormatError`), and what they print goes to stderr.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator, Mapping

import numpy as np

from dglx_dist.data.dataset import MASKS

from dglx_dist.graphcore.types import ONE_ETYPE, ONE_NTYPE, Etype
from dglx_dist.data.torch_files import RefusedGlobal, load_allowed, numpy_globals
from dglx_dist.errors import DatasetFormatError, InvalidValueError, MissingDependencyError

__all__ = ["OgbDataset", "ogb_package", "read_master", "check_layout", "fetch_dataset",
           "ogb_output", "reading", "read_graph", "read_labels", "read_split", "OGB_SPLIT"]

OGB_SPLIT = dict(zip(MASKS, ("train", "valid", "test")))  # ours: OGB's


def ogb_package() -> ModuleType:
    """The ``ogb`` package, imported without the check that its import starts: a thread that
    asks PyPI whether ``ogb`` is outdated (the ``outdated`` package is hidden while it loads),
    and without the environment variable it sets.

    Raises:
        MissingDependencyError: ``ogb`` is not installed (naming the extra)."""
    import importlib
    import importlib.util

    if "ogb" not in sys.modules and importlib.util.find_spec("ogb") is None:
        raise MissingDependencyError("dglx data import needs the ogb package: pip install "
                                     "'dglx_dist[ogb]' (or pip install ogb)")
    hide = "ogb" not in sys.modules and "outdated" not in sys.modules
    if hide:
        sys.modules["outdated"] = None  # type: ignore[assignment]  # its import then fails
    env = os.environ.get("OUTDATED_IGNORE")
    try:
        return importlib.import_module("ogb")
    finally:
        if hide:
            del sys.modules["outdated"]
        if env is None:  # ogb's import sets it for good
            os.environ.pop("OUTDATED_IGNORE", None)


@dataclasses.dataclass(frozen=True)
class OgbDataset:
    """One dataset as OGB's ``master.csv`` describes it (its column, values as strings)."""

    name: str
    family: str
    info: Mapping[str, str]

    @property
    def dir_name(self) -> str:
        return self.name.replace("-", "_")  # OGB's folder name, as its loaders derive it

    @property
    def version(self) -> str:
        return self.info["version"]

    def flag(self, key: str) -> bool:
        return self.info[key] == "True"

    def files(self, key: str) -> list[str]:
        """``additional node files`` / ``additional edge files``."""
        return [] if self.info[key] == "None" else self.info[key].split(",")

    @property
    def num_classes(self) -> int:
        return int(self.info.get("num classes", 1))


def read_master(folder: str) -> dict[str, dict[str, str]]:
    """OGB's ``FOLDER/master.csv`` as its loaders read it: dataset name -> meta info."""
    import pandas as pd

    path = Path(ogb_package().__file__).parent / folder / "master.csv"
    table = pd.read_csv(path, index_col=0, keep_default_na=False)
    return {name: {k: str(v) for k, v in table[name].items()} for name in table.columns}


# what OGB's loaders look for first, by (binary, typed): the file whose absence makes them
# download, and the labels' file of a node task
_GRAPH_FILE = {(False, False): "raw/edge.csv.gz", (False, True): "raw/triplet-type-list.csv.gz",
               (True, False): "raw/data.npz", (True, True): "raw/edge_index_dict.npz"}
_LABEL_FILE = {(False, False): "raw/node-label.csv.gz",
               (False, True): "raw/nodetype-has-label.csv.gz",
               (True, False): "raw/node-label.npz", (True, True): "raw/node-label.npz"}


def kind(ds: OgbDataset) -> tuple[bool, bool]:
    return ds.flag("binary"), ds.flag("is hetero")


def check_layout(ds: OgbDataset, folder: Path) -> None:
    """Refuses ``folder`` unless it holds OGB's files of ``ds`` (before anything is read)."""
    if not folder.is_dir():
        raise DatasetFormatError(f"{folder} is not a directory; expected OGB's folder of "
                                 f"{ds.name}")
    needed = [f"RELEASE_v{ds.version}.txt", _GRAPH_FILE[kind(ds)],
              f"split/{ds.info['split']}"]
    if ds.family == "ogbn":
        needed.append(_LABEL_FILE[kind(ds)])
    missing = [n for n in needed if not (folder / n).exists()]
    if missing:
        raise DatasetFormatError(
            f"{folder} is not OGB's folder of {ds.name} (release {ds.version}): it lacks "
            f"{', '.join(missing)}; point --ogb-root at the directory holding "
            f"{ds.dir_name}/ as OGB extracted it, or at one without {ds.dir_name}/ for OGB to "
            f"download it into")


def fetch_dataset(ds: OgbDataset, root: Path) -> None:
    """OGB's download of ``ds`` into ``root``, as its loaders do it: asking first above 1 GB
    (on stdin), then the zip file's folder renamed to the dataset's.

    Raises:
        DatasetFormatError: the download failed, was declined, or would extract into a
            folder that exists already (one line; a partial download is removed)."""
    from ogb.utils.url import decide_download, download_url, extract_zip

    url, extracted = ds.info["url"], root / ds.info["download_name"]
    zipped = root / url.rpartition("/")[2]
    for there in (extracted, zipped):  # neither is ours to replace or remove
        if there.exists() or there.is_symlink():
            raise DatasetFormatError(f"{there} exists, and OGB's download of {ds.name} writes "
                                     f"it; move it away or choose another --ogb-root")
    try:
        with ogb_output():
            try:
                wanted = decide_download(url)
            except EOFError:  # it asks on stdin (above 1 GB), and stdin is closed
                wanted = False
            if wanted:
                root.mkdir(parents=True, exist_ok=True)
                download_url(url, str(root))
                extract_zip(str(zipped), str(root))
    except OSError as exc:
        zipped.unlink(missing_ok=True)
        raise DatasetFormatError(f"{ds.name}: OGB's download of {url} into {root} did not "
                                 f"complete ({type(exc).__name__}: {exc}); download and extract "
                                 f"it there yourself, or point --ogb-root at a copy") from exc
    if not wanted:
        raise DatasetFormatError(f"{ds.name}: the download of {url} was declined; download "
                                 f"and extract it into {root} yourself, or point --ogb-root at "
                                 f"a copy")
    zipped.unlink(missing_ok=True)
    shutil.move(str(extracted), str(root / ds.dir_name))


@contextlib.contextmanager
def ogb_output() -> Iterator[None]:
    """OGB's readers print their progress to stdout, where dglx writes its result: to stderr."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


@contextlib.contextmanager
def reading(folder: Path, what: str) -> Iterator[None]:
    """A failure of OGB's readers on ``folder`` as one line."""
    try:
        with ogb_output():
            yield
    except (DatasetFormatError, InvalidValueError):
        raise
    except (OSError, ValueError, KeyError, IndexError, RuntimeError, AssertionError, EOFError,
            TypeError, zlib.error) as exc:
        text = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        raise DatasetFormatError(f"{folder}: reading {what} failed ({text}); are these OGB's "
                                 f"files as it extracted them?") from exc


def read_graph(ds: OgbDataset, folder: Path) -> tuple[dict[str, int], dict[str, np.ndarray],
                                                     dict[Etype, np.ndarray]]:
    """The graph as OGB's loader of ``ds`` reads it (``ogb.io.read_graph_raw``): node counts,
    features and edges (2, E) by type (a graph without types is DGL's one-type case). A graph
    whose features OGB's reader did not find is refused (OGB lists them for every dataset
    dglx imports)."""
    from ogb.io import read_graph_raw as r

    raw, inverse = str(folder / "raw"), ds.flag("add_inverse_edge")
    files = {"additional_node_files": ds.files("additional node files"),
             "additional_edge_files": ds.files("additional edge files")}
    readers = {(False, False): lambda: r.read_csv_graph_raw(raw, inverse, **files),
               (False, True): lambda: r.read_csv_heterograph_raw(raw, inverse, **files),
               (True, False): lambda: r.read_binary_graph_raw(raw, inverse),
               (True, True): lambda: r.read_binary_heterograph_raw(raw, inverse)}
    with reading(folder, "the graph"):
        graph = readers[kind(ds)]()[0]
    if "edge_index_dict" in graph:
        counts, feats = graph["num_nodes_dict"], graph.get("node_feat_dict") or {}
        edges = graph["edge_index_dict"]
    else:
        counts, edges = {ONE_NTYPE: graph["num_nodes"]}, {ONE_ETYPE: graph["edge_index"]}
        feats = {ONE_NTYPE: graph.get("node_feat")}
    feats = {t: np.asarray(f, np.float32) for t, f in feats.items() if f is not None}
    if not feats:
        raise DatasetFormatError(f"{folder}: no node features (raw/node-feat.csv.gz, or "
                                 f"node_feat in raw/data.npz); OGB lists them for {ds.name}")
    return ({t: int(n) for t, n in counts.items()}, feats,
            {tuple(et): np.asarray(e, np.int64) for et, e in edges.items()})


def read_labels(ds: OgbDataset, folder: Path) -> dict[str, np.ndarray]:
    """Node labels by type, as OGB's node loader reads them."""
    import pandas as pd
    from ogb.io import read_graph_raw as r

    raw = folder / "raw"
    readers = {(False, False): lambda: {ONE_NTYPE: pd.read_csv(
                   raw / "node-label.csv.gz", compression="gzip", header=None).values},
               (False, True): lambda: r.read_node_label_hetero(str(raw)),
               (True, False): lambda: {ONE_NTYPE: np.load(raw / "node-label.npz")["node_label"]},
               (True, True): lambda: dict(np.load(raw / "node-label.npz"))}
    with reading(folder, "the labels"):
        return readers[kind(ds)]()


def read_split(ds: OgbDataset, folder: Path) -> dict:
    """OGB's split of ``ds``: its ``split_dict.pt`` where there is one (OGB's loaders take
    that first), else the files its loader reads (a node task's ``train.csv.gz`` ..., typed
    ones through OGB's reader; a link task's ``train.pt`` ...)."""
    import pandas as pd
    from ogb.io import read_graph_raw as r

    path, names = folder / "split" / ds.info["split"], list(OGB_SPLIT.values())
    readers = {("ogbn", False): lambda: {s: pd.read_csv(path / f"{s}.csv.gz", compression="gzip",
                                                        header=None).values.T[0] for s in names},
               ("ogbn", True): lambda: dict(zip(names, r.read_nodesplitidx_split_hetero(
                   str(path)))),
               ("ogbl", False): lambda: {s: read_numpy_file(path / f"{s}.pt") for s in names}}
    with reading(folder, f"the split split/{ds.info['split']}"):
        if (path / "split_dict.pt").is_file():
            return read_numpy_file(path / "split_dict.pt")
        return readers[ds.family, ds.flag("is hetero")]()


def read_numpy_file(file: Path) -> Any:
    """The dicts, lists and numpy arrays ``torch.save`` wrote to ``file`` (OGB keeps some
    splits so), read with numpy's globals alone (:func:`~dglx_dist.data.torch_files.
    numpy_globals`): nothing in the file is run.

    Raises:
        DatasetFormatError: the file names another global (a torch tensor's rebuilder too),
            or is no ``torch.save`` file (one line).
    """
    try:
        return load_allowed(file, numpy_globals())
    except RefusedGlobal as exc:
        raise DatasetFormatError(f"{file}: names {exc}, which a file of numpy arrays does not "
                                 f"hold (nothing in the file was run)") from None
    except Exception as exc:  # noqa: BLE001 - any reader failure is a bad file for the user
        raise DatasetFormatError(f"{file}: not a torch.save file of numpy arrays "
                                 f"({type(exc).__name__}: {exc})") from None
