"""Porting a DGL script is a handful of lines: each dglx_dist example against the plain DGL
script it was ported from (examples/dgl/), counting added + removed lines of code (the module
docstrings, which say which is which, are not counted)."""
import ast
import difflib
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BUDGET = {"sage_minibatch.py": 10, "gcn_fullgraph.py": 10, "distdgl_sage.py": 6,
          "weighted_sampling.py": 10,
          "link_prediction.py": 10, "rgcn_hetero.py": 12, "distdgl_rgcn.py": 3}
HELPERS = {"partition_cora.py", "partition_mag.py"}  # data preparation shared by both versions
PENDING: set[str] = set()  # plain scripts whose port is still to come


def _code_lines(path: Path) -> list[str]:
    text = path.read_text()
    doc = ast.get_docstring(ast.parse(text), clean=False)
    body = text.split('"""', 2)[2] if doc is not None else text
    return body.splitlines()


def changed_lines(plain: Path, ported: Path) -> int:
    diff = difflib.unified_diff(_code_lines(plain), _code_lines(ported), lineterm="", n=0)
    return sum(1 for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---"))


@pytest.mark.parametrize("name", sorted(BUDGET))
def test_port_is_a_few_lines(name):
    changed = changed_lines(EXAMPLES / "dgl" / name, EXAMPLES / name)
    assert 0 < changed <= BUDGET[name], f"{name}: {changed} lines differ (budget {BUDGET[name]})"


def test_every_plain_script_has_a_port():
    plain = {p.name for p in (EXAMPLES / "dgl").glob("*.py")}
    assert plain == set(BUDGET) | HELPERS | PENDING
    ported = [name for name in PENDING if (EXAMPLES / name).exists()]
    assert not ported, f"{ported}: ported; move them from PENDING to BUDGET"
