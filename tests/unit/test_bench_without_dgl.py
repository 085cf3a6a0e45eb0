"""``dglx bench`` where DGL cannot be imported: DGL's own rows (single-process DGL, DGL's
DistDGL) are skipped, said once in one line, and every strategy's rows run (the runs
themselves stubbed: the choice of rows is what is checked)."""
import subprocess
import sys
import textwrap

import pytest

from tests.unit.test_import_boundary import _BLOCK, ROOT

_CHOOSE = """
    import logging, types
    from dglx_dist.bench import suite
    from dglx_dist.bench.kinds import KINDS
    from dglx_dist.strategies import STRATEGIES

    logging.basicConfig(level=logging.INFO, format="LOG %(message)s")
    suite.run_system = lambda name, runner, setup: {"system": name}  # no run: the choice
    args = types.SimpleNamespace(strategy_opt=[], repeat=1, systems=None)
    task = types.SimpleNamespace(name="node")
    setup = types.SimpleNamespace(run=types.SimpleNamespace(task=task))
    for kind in ("graph", "typed"):
        print(kind, [r["system"] for r in suite.run_all(args, setup, KINDS[kind])])
    print("strategies", list(STRATEGIES.names()))
    print("dgl" in sys.modules)
"""


def _rows(block: str) -> tuple[dict[str, list[str]], list[str]]:
    proc = subprocess.run([sys.executable, "-c", block + textwrap.dedent(_CHOOSE)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    rows = {ln.split(" ", 1)[0]: eval(ln.split(" ", 1)[1]) for ln in lines[:-1]}  # noqa: S307
    assert lines[-1] == "False" or not block  # blocked: nothing imported DGL
    return rows, [ln for ln in proc.stderr.splitlines() if ln.startswith("LOG DGL")]


def test_without_dgl_the_dgl_rows_are_skipped_in_one_line():
    rows, said = _rows(_BLOCK)
    assert rows["graph"] == rows["strategies"]  # every strategy, no DGL row
    assert "dgl-distdgl" not in rows["typed"] and rows["typed"]
    assert said[0] == ("LOG DGL is not installed: the DGL rows (dgl, dgl-distdgl) are skipped; "
                       "pip install dglx-dist[dgl] to run them")
    assert len([s for s in said if "(dgl, dgl-distdgl)" in s]) == 1  # once per bench run


def test_systems_naming_a_dgl_row_without_dgl_says_to_install_it():
    code = _BLOCK + textwrap.dedent("""
        from dglx_dist.cli import build_parser
        from dglx_dist.cli.bench import _check
        from dglx_dist.errors import MissingDependencyError
        args = build_parser().parse_args(["bench", "--systems", "dgl,distdgl", "--no-plot",
                                          "--out", "/nonexistent/out"])
        try:
            _check(args)
        except MissingDependencyError as exc:
            print(exc)
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.stdout.strip() == ("--systems dgl needs DGL, which is not installed: pip install "
                                   "dglx-dist[dgl] (or leave them out)"), proc.stderr[-2000:]


@pytest.mark.dgl
def test_with_dgl_no_row_is_skipped():
    from dglx_dist.bench.harness import skipped_baselines, systems

    assert skipped_baselines() == () and {"dgl", "dgl-distdgl"} <= set(systems({}))
