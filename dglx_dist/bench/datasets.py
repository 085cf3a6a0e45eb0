"""The benchmarks' datasets: synthetic graphs generated once and cached by their config, a
cache key for partitions of a dataset directory, and whether its features can be
row-normalised."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path

__all__ = ["data_key", "nonnegative_features", "synthetic_dataset"]

log = logging.getLogger("dglx_dist.bench")


def synthetic_dataset(config, workdir: Path) -> Path:
    """The synthetic dataset of ``config`` (a
    :class:`~dglx_dist.data.synthetic.SyntheticConfig`) in ``workdir``, generated once and
    keyed by the config."""
    from dglx_dist.data.synthetic import write_synthetic

    key = hashlib.sha1(json.dumps(dataclasses.asdict(config), sort_keys=True).encode())
    path = workdir / f"synthetic-{key.hexdigest()[:12]}"
    if not (path / "meta.json").is_file():
        log.info("generating synthetic dataset %s: %s", path, config)
        write_synthetic(config, path, progress=True)
    return path


def data_key(data: Path) -> str:
    """A cache key for partitions of ``data`` (its files' sizes and modification times)."""
    h = hashlib.sha1(str(data.resolve()).encode())
    for name in ("meta.json", "edges.parquet", "nodes.parquet"):
        st = (data / name).stat()
        h.update(f"{name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return f"{data.name}-{h.hexdigest()[:12]}"


def nonnegative_features(data: Path) -> bool:
    """Whether every feature is >= 0 (then rows can be normalised by their sums)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    col = pq.read_table(data / "nodes.parquet", columns=["feat"]).column("feat")
    return pc.min(pc.list_flatten(col)).as_py() >= 0
