"""What is DGL's own, where DGL is not installed (issue 59): each entry point of it refuses
with one line naming the extra to install (``pip install dglx-dist[dgl]``) and a nonzero exit,
never a bare ImportError from deep inside. Each case runs in a fresh interpreter whose
``sitecustomize`` blocks ``import dgl`` (:mod:`dglx_dist.testing.nodgl`)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dglx_dist.testing.nodgl import blocking_path

ROOT = Path(__file__).resolve().parents[2]
EXTRA = "pip install dglx-dist[dgl]"


def _dgl_partition(folder: Path, graphs: dict[str, str]) -> Path:
    """A one-part DGL partition JSON naming ``graphs`` (key -> file, each an empty file): the
    refusal and the choice of file come before any part file is read."""
    (folder / "part0").mkdir(parents=True)
    entry = {"node_feats": "part0/node_feat.dgl", "edge_feats": "part0/edge_feat.dgl", **graphs}
    for rel in entry.values():
        (folder / rel).touch()
    config = {"graph_name": "g", "num_nodes": 4, "num_edges": 3, "num_parts": 1,
              "halo_hops": 1, "node_map": {"_N": [[0, 4]]}, "edge_map": {"_N:_E:_N": [[0, 3]]},
              "ntypes": {"_N": 0}, "etypes": {"_N:_E:_N": 0}, "part-0": entry}
    (folder / "g.json").write_text(json.dumps(config))
    return folder / "g.json"


def _cases(tmp: Path) -> dict[str, list[str]]:
    script = tmp / "train.py"
    script.write_text("import dgl\n")
    dgl_json = _dgl_partition(tmp / "dgl-parts", {"part_graph": "part0/graph.dgl"})
    return {
        "runner": ["-m", "dglx_dist.run", "--strategy", "p3", str(script)],
        "partition --from-dgl": ["-m", "dglx_dist", "partition", "--from-dgl", str(dgl_json),
                                 str(tmp / "out")],
        "import dglx_dist.dgl": ["-c", "import dglx_dist.dgl"],
        "out-edge sampler": ["-c", "import dglx_dist; "
                             "dglx_dist.NeighborSampler([2], edge_dir='out').to_dgl()"],
    }


def _run(tmp: Path, args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(blocking_path(tmp / "nodgl")), str(ROOT)])}
    return subprocess.run([sys.executable, *args], cwd=tmp, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("case", ["runner", "partition --from-dgl", "import dglx_dist.dgl",
                                  "out-edge sampler"])
def test_dgls_own_features_refuse_in_one_line_naming_the_extra(tmp_path, case):
    """A command (the runner, the CLI) prints that one line alone; Python code that imports
    or calls DGL's part ends in it (the last line of the traceback)."""
    proc = _run(tmp_path, _cases(tmp_path)[case])
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode != 0, proc.stderr
    assert [ln for ln in lines if EXTRA in ln] == lines[-1:], proc.stderr
    if case in ("runner", "partition --from-dgl"):
        assert len(lines) == 1 and proc.returncode == 2, proc.stderr


def test_without_dgl_the_import_reads_graphbolts_file_where_both_are_there(tmp_path):
    """A part with DGL's graph.dgl and GraphBolt's file: without DGL the import reads
    GraphBolt's (the package reads it itself) and does not refuse."""
    dgl_json = _dgl_partition(tmp_path / "dgl-parts", {
        "part_graph": "part0/graph.dgl",
        "part_graph_graphbolt": "part0/fused_csc_sampling_graph.pt"})
    proc = _run(tmp_path, ["-c", "from dglx_dist.partition.dgl_config import read_dgl_config;"
                           f"print(sorted(read_dgl_config({str(dgl_json)!r}).files[0]))"])
    assert proc.returncode == 0, proc.stderr
    assert "'part_graph_graphbolt'" in proc.stdout and "'part_graph'" not in proc.stdout


def test_a_folder_named_dgl_is_not_dgl(tmp_path):
    """A script run from examples/ has examples/dgl (DGL's originals, no __init__.py) on its
    path: where DGL is not installed, ``import dgl`` gives that folder as a namespace package,
    which the edge must not take for DGL (found on a GPU machine: examples/pyg_sage.py
    converted its pair graphs through it)."""
    (tmp_path / "dgl").mkdir()
    code = f"""
import importlib.machinery, sys

class OnlyTheFolder:  # DGL's own package hidden, the folder named dgl found
    def find_spec(self, name, path=None, target=None):
        if name == "dgl":
            return importlib.machinery.PathFinder.find_spec("dgl", [{str(tmp_path)!r}])

sys.meta_path.insert(0, OnlyTheFolder())
import dgl
assert dgl.__spec__.origin is None, dgl.__spec__  # the namespace package
from dglx_dist.data.convert import dgl_installed, is_dgl
print(dgl_installed(), is_dgl(object()), is_dgl(object(), "dataloading.Sampler"))
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False", "False"]


@pytest.mark.parametrize("case", ["runner", "import dglx_dist.dgl"])
def test_a_dgl_that_fails_to_import_is_named_with_its_error_not_as_absent(tmp_path, case):
    """Issue 77, item 6: where a package ``dgl`` is installed but its import raises (here a
    ``dgl`` whose ``__init__`` raises as a DGL built for another torch does), the refusal
    says so, with the import's own error, instead of "not installed"."""
    fake = tmp_path / "broken" / "dgl"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ImportError("libdgl.so: cannot open shared '
                                      'object file")\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake.parent), str(ROOT)])}
    proc = subprocess.run([sys.executable, *_cases(tmp_path)[case]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode != 0, proc.stderr
    assert lines[-1].endswith(f"needs DGL, which is installed ({fake / '__init__.py'}) but fails "
                              f"to import: ImportError: libdgl.so: cannot open shared object "
                              f"file; DGL 2.1 needs torch 2.0-2.2 and numpy < 2 "
                              f"(docs/install.md) (the package's own API, dglx_dist.api, and "
                              f"dglx train need no DGL)"), proc.stderr
    assert "not installed" not in proc.stderr
    if case == "runner":
        assert len(lines) == 1 and proc.returncode == 2, proc.stderr
