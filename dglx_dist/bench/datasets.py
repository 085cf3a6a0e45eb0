"""The benchmarks' datasets: synthetic graphs (with or without node types) generated once and
cached by their config, a cache key for partitions of a dataset directory, and whether its
features can be row-normalised."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path

__all__ = ["data_key", "mag_dataset_dir", "nonnegative_features", "synthetic_dataset"]

log = logging.getLogger("dglx_dist.bench")


def synthetic_dataset(config, workdir: Path) -> Path:
    """The synthetic dataset of ``config`` (a
    :class:`~dglx_dist.data.synthetic.SyntheticConfig`) in ``workdir``, generated once and
    keyed by the config."""
    from dglx_dist.data.synthetic import write_synthetic

    return _cached("synthetic", "synthetic", config, workdir,
                   lambda path: write_synthetic(config, path, progress=True))


def mag_dataset_dir(config, workdir: Path) -> Path:
    """The typed ogbn-mag-shaped dataset of ``config`` (a
    :class:`~dglx_dist.data.mag.MagConfig`) in ``workdir``, generated once and keyed by the
    config."""
    from dglx_dist.data.mag import write_mag

    return _cached("mag", "typed", config, workdir, lambda path: write_mag(config, path))


def _cached(prefix: str, what: str, config, workdir: Path, write) -> Path:
    """``workdir/<prefix>-<config's key>``, written by ``write(path)`` unless it is there."""
    key = hashlib.sha1(json.dumps(dataclasses.asdict(config), sort_keys=True).encode())
    path = workdir / f"{prefix}-{key.hexdigest()[:12]}"
    if not (path / "meta.json").is_file():
        log.info("generating %s dataset %s: %s", what, path, config)
        write(path)
    return path


def data_key(data: Path) -> str:
    """A cache key for partitions of ``data``: where it is, and its files' sizes and
    modification times (:func:`~dglx_dist.prepare.derived_key`, as the partition cache's)."""
    from dglx_dist.prepare import derived_key

    return derived_key(data, "bench", [str(data.resolve())])


def nonnegative_features(data: Path) -> bool:
    """Whether every feature is >= 0 (then rows can be normalised by their sums); of a typed
    dataset, every feature of every type that has them."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from dglx_dist.data.format import is_hetero

    tables = sorted((data / "nodes").glob("*.parquet")) if is_hetero(data) else \
        [data / "nodes.parquet"]
    for table in tables:
        if "feat" in pq.read_schema(table).names:
            col = pq.read_table(table, columns=["feat"]).column("feat")
            if pc.min(pc.list_flatten(col)).as_py() < 0:
                return False
    return True
