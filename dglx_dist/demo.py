"""``dglx demo``: what the package does, on the built-in Cora, on this machine.

1. Partitions Cora with every registered partitioner and prints their quality side by side
   (``verbose``: each partitioner's whole report too).
2. Trains GraphSAGE with the ``distdgl`` strategy on two local processes started by torchrun
   (two virtual servers, gloo), with rank 0's progress bar over the epochs, and prints the
   evaluated epochs' metrics and the test accuracy (``metrics_out``: every epoch's record
   appended to a file as a JSON line).
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from dglx_dist.data.builtin import builtin_path
from dglx_dist.errors import StateError
from dglx_dist.partition import PARTITIONERS, PartitionDir, partition_dataset
from dglx_dist.report import EPOCH_COLUMNS, epoch_table, markdown_table
from dglx_dist.runtime.env import free_local_port, torchrun

__all__ = ["partition_demo", "training_demo"]

log = logging.getLogger(__name__)
_PARTITION_COLUMNS = ("method", "parts", "edge_cut", "cut_frac", "imb_nodes", "imb_edges", "imb_train",
                      "halo_total", "seconds", "part0_feat")
"""The partition table's columns at the default verbosity (``verbose``: every one)."""


def partition_demo(dataset: str = "cora", parts: int = 4, verbose: bool = False) -> str:
    """Partitions ``dataset`` with every partitioner; returns the markdown table of their
    quality (``verbose``: every column, after each partitioner's whole report)."""
    rows, sections = [], []
    with tempfile.TemporaryDirectory(prefix="dglx-demo-") as tmp:
        for method in PARTITIONERS.names():
            out = Path(tmp) / method
            report = partition_dataset(builtin_path(dataset), out, method, parts, progress=True)
            part0 = PartitionDir(out).load_part(0)
            row = report.summary_row()
            row["part0_feat"] = "x".join(map(str, part0.feat.shape))
            rows.append(row)
            if verbose:
                sections.append(f"## {method}\n\n{report.to_markdown()}\n")
    sections.append(f"## {dataset}: {parts} parts, every registered partitioner\n\n"
                    + markdown_table(rows, None if verbose else _PARTITION_COLUMNS))
    return "\n".join(sections)


def training_demo(strategy: str = "distdgl", nproc: int = 2, epochs: int = 60,
                  dataset: str = "cora", timeout: float = 900.0, verbose: bool = False,
                  metrics_out: Path | None = None) -> tuple[str, list[dict[str, Any]]]:
    """Runs ``dglx train`` under torchrun on ``nproc`` local processes (one virtual server
    each; its progress bar and log on this process's stderr, ``verbose``: with ``-v``);
    returns a markdown table of its evaluated epochs and its metrics records."""
    cmd = [*torchrun("--nproc-per-node", str(nproc), "--master-port", str(free_local_port())),
           "-m", "dglx_dist", "train",
           "--strategy", strategy, "--data", dataset, "--epochs", str(epochs), "--json",
           *(["-v"] if verbose else []),
           *(["--metrics-out", str(metrics_out)] if metrics_out is not None else [])]
    env = {**os.environ, "DGLX_VIRTUAL_SERVERS": str(nproc), "OMP_NUM_THREADS": "1",
           "GLOO_SOCKET_IFNAME": "lo"}
    with tempfile.TemporaryDirectory(prefix="dglx-demo-train-") as tmp:
        cmd += ["--cache-dir", str(Path(tmp) / "parts")]
        log.debug("running: %s", " ".join(cmd))
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, timeout=timeout, text=True)
    if proc.returncode != 0:
        raise StateError(f"training run failed with exit code {proc.returncode} "
                         f"(its log is above)")
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return epoch_table(records, EPOCH_COLUMNS), records
