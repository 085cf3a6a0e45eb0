"""scripts/bench_h2d.py (issue 18: the feature path's host-to-device throughput against torch's
pinned copy) runs on the CPU, checks the rows it pulled, and imports no DGL."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench_h2d.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_tiny_run_on_the_cpu_reports_and_checks_its_rows():
    proc = _run("--device", "cpu", "--preset", "tiny", "--repeat", "2")
    assert proc.returncode == 0, proc.stderr
    first, _, rest = proc.stdout.partition("\n")
    record = json.loads(first)
    assert record["device"] == "cpu" and record["torch"]
    assert (record["rows"], record["F"], record["batches"]) == (2000, 16, [256])
    assert record["rows_ok"] is True
    assert "no device copy" in record["note"]
    assert record["pull"] == "start_pull(dedup=False)"
    (result,) = record["results"]
    assert result["B"] == 256 and result["rows_ok"] is True and result["rows_pinned"] is None
    for key in ("torch_GBps", "ours_GBps", "ratio", "gather_ms", "copy_ms", "index_select_ms"):
        assert isinstance(result[key], float) and result[key] > 0, key
    ours_ms = result["gather_ms"] + result["copy_ms"]
    assert result["ratio"] == pytest.approx(result["torch_ms"] / ours_ms)
    assert all(len(v) == 2 and v[0] <= v[1] for v in result["spread_ms"].values())
    assert "| B | MB | torch_GBps | ours_GBps | ratio |" in rest
    assert "\n| 256 | " in rest


def test_bad_batch_is_refused_before_any_work():
    proc = _run("--device", "cpu", "--preset", "tiny", "--batch", "5000")
    assert proc.returncode == 2
    assert "--batch 5000" in proc.stderr and "rows=2000" in proc.stderr


def test_imports_without_dgl():
    code = textwrap.dedent(f"""
        import importlib.abc, importlib.util, sys

        class NoDgl(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "dgl" or name.startswith("dgl."):
                    raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)

        sys.meta_path.insert(0, NoDgl())
        spec = importlib.util.spec_from_file_location("bench_h2d", {str(SCRIPT)!r})
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
        assert "dgl" not in sys.modules
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
